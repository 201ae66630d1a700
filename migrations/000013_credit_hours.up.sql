-- Schema v13: the units of prepaid balances that statements price, by
-- hour. Statements price by plan span, and an hour counts on the plan in
-- effect at its start, so what credits admitted past the balance is kept
-- by hour, as usage is.
--
-- overage: units admitted past the balance (plans in overage mode),
-- billed with the plan's overage pricing. unpaid: units a hold was
-- settled for past the allowed overdraft on a plan in deny mode (the
-- balance never goes below −overdraft): shown, never billed.
CREATE TABLE credit_hours (
    tenant_id  uuid NOT NULL REFERENCES tenants(id),
    hour       timestamptz NOT NULL,
    overage    bigint NOT NULL DEFAULT 0,
    unpaid     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, hour)
);

-- The monthly overage so far counts in its month's first hour.
INSERT INTO credit_hours (tenant_id, hour, overage)
    SELECT tenant_id, month::timestamp AT TIME ZONE 'UTC', units FROM credit_overage WHERE units <> 0;
DROP TABLE credit_overage;
