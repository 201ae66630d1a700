-- Schema v19: a plan's billing settings.
--
-- dunning_grace_s is how long after an invoice's payment failed dunning
-- suspends a tenant on the plan: NULL for the server's default
-- (TOLLGATE_INVOICE_DUNNING_GRACE), 0 for never. top_up_unit_minor is the
-- price of one prepaid credit unit that the plan's own tenant admins pay
-- when they buy credits themselves: NULL when they may not.

CREATE TABLE plan_billing (
    plan_id            bigint PRIMARY KEY REFERENCES plans(id) ON DELETE CASCADE,
    dunning_grace_s    bigint CHECK (dunning_grace_s BETWEEN 0 AND 31536000),
    top_up_unit_minor  bigint CHECK (top_up_unit_minor > 0),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
