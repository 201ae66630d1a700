-- Schema v10: prepaid credits. A tenant's balance is made of grants
-- (amount, optional expiry, priority) and drawn on the hot path; the
-- ledger is the append-only record of every unit that moved.
--
-- The hot path keeps one number per tenant in Redis, the units consumed
-- (consumption less refunds), and reads the rest from its snapshot: the
-- tenant's line (credit_accounts.line: grants and adjustments less
-- expiries). The balance is line − consumed on both sides; the credits
-- worker drains what checks consumed from Redis into the ledger.

-- A plan's credit settings: whether its tenants draw on credits, what
-- happens past the balance (deny: refuse with credits_exhausted; overage:
-- admit and bill the units no credit covered), how far the balance may go
-- below zero, and the balance under which credits.low is emitted.
CREATE TABLE credit_plan_settings (
    plan_id        bigint PRIMARY KEY REFERENCES plans(id) ON DELETE CASCADE,
    mode           text NOT NULL CHECK (mode IN ('deny', 'overage')),
    overdraft      bigint NOT NULL DEFAULT 0 CHECK (overdraft >= 0),
    low_threshold  bigint NOT NULL DEFAULT 0 CHECK (low_threshold >= 0),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- One row per tenant that ever had credits. line changes only by grants,
-- adjustments and expiries (and announces itself, so API processes see a
-- top-up within a second); consumed and position move with every drain
-- and do not: the hot path's own counter is ahead of them anyway.
CREATE TABLE credit_accounts (
    tenant_id           uuid PRIMARY KEY REFERENCES tenants(id),
    line                bigint NOT NULL DEFAULT 0,
    consumed            bigint NOT NULL DEFAULT 0,
    -- debt is consumed units that no grant covered (an overdraft), paid
    -- from the next grants.
    debt                bigint NOT NULL DEFAULT 0 CHECK (debt >= 0),
    -- position is the ID of the last entry of the tenant's consumption log
    -- (a Redis stream) applied to the ledger.
    position            text NOT NULL DEFAULT '0-0',
    low_notified        boolean NOT NULL DEFAULT false,
    exhausted_notified  boolean NOT NULL DEFAULT false,
    updated_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE credit_grants (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id   uuid NOT NULL REFERENCES tenants(id),
    amount      bigint NOT NULL CHECK (amount > 0),
    remaining   bigint NOT NULL CHECK (remaining >= 0 AND remaining <= amount),
    priority    int NOT NULL DEFAULT 0,
    expires_at  timestamptz,
    -- expired_at is when the worker expired the grant (its remaining
    -- units then left the balance through an expiry row).
    expired_at  timestamptz,
    -- warned_at is when credits.expiring was emitted for it.
    warned_at   timestamptz,
    cause       text NOT NULL,
    created_at  timestamptz NOT NULL
);
-- Consumption draws on a tenant's live grants soonest-expiring first.
CREATE INDEX credit_grants_draw ON credit_grants (tenant_id, expires_at NULLS LAST, priority DESC, created_at)
    WHERE expired_at IS NULL;
CREATE INDEX credit_grants_due ON credit_grants (expires_at) WHERE expired_at IS NULL AND expires_at IS NOT NULL;

-- The ledger: every movement of a tenant's balance, with its cause.
-- units is signed (+ adds to the balance); balance is the tenant's ledger
-- balance after the row. Rows are never changed or removed.
CREATE TABLE credit_ledger (
    id         bigserial PRIMARY KEY,
    tenant_id  uuid NOT NULL REFERENCES tenants(id),
    kind       text NOT NULL CHECK (kind IN ('grant', 'consumption', 'expiry', 'refund', 'adjustment')),
    units      bigint NOT NULL,
    balance    bigint NOT NULL,
    grant_id   uuid REFERENCES credit_grants(id),
    cause      text NOT NULL,
    -- entry is the consumption log entry a consumption or refund row
    -- comes from: one entry is recorded once (per grant it drew on).
    entry      text,
    at         timestamptz NOT NULL
);
-- One log entry is recorded once (per grant it drew on).
CREATE UNIQUE INDEX credit_ledger_entry ON credit_ledger (tenant_id, entry, grant_id) NULLS NOT DISTINCT
    WHERE entry IS NOT NULL;
CREATE INDEX credit_ledger_tenant ON credit_ledger (tenant_id, id DESC);
CREATE INDEX credit_ledger_month ON credit_ledger (tenant_id, at);

-- Units admitted past the balance in overage mode, by month: billed on
-- the statement.
CREATE TABLE credit_overage (
    tenant_id  uuid NOT NULL REFERENCES tenants(id),
    month      date NOT NULL,
    units      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, month)
);

CREATE FUNCTION credit_ledger_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'credit_ledger is append-only';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER credit_ledger_append_only BEFORE UPDATE OR DELETE ON credit_ledger
    FOR EACH ROW EXECUTE FUNCTION credit_ledger_append_only();
CREATE TRIGGER credit_ledger_no_truncate BEFORE TRUNCATE ON credit_ledger
    FOR EACH STATEMENT EXECUTE FUNCTION credit_ledger_append_only();

-- What the hot path reads announces itself (tollgate_changes): plan
-- settings, a tenant's line, a grant made, expired or given units back.
CREATE TRIGGER credit_plan_settings_changed AFTER INSERT OR UPDATE OR DELETE ON credit_plan_settings
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_change();
CREATE TRIGGER credit_accounts_line_changed AFTER UPDATE ON credit_accounts
    FOR EACH ROW WHEN (OLD.line IS DISTINCT FROM NEW.line) EXECUTE FUNCTION tollgate_notify_change();
CREATE TRIGGER credit_accounts_inserted AFTER INSERT ON credit_accounts
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_change();
CREATE TRIGGER credit_grants_inserted AFTER INSERT ON credit_grants
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_change();
CREATE TRIGGER credit_grants_changed AFTER UPDATE ON credit_grants
    FOR EACH ROW WHEN (OLD.expired_at IS DISTINCT FROM NEW.expired_at OR NEW.remaining > OLD.remaining)
    EXECUTE FUNCTION tollgate_notify_change();
