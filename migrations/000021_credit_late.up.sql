-- Schema v21: credits recorded after their month was closed.
--
-- The credits drainer records a balance's consumption log into the
-- ledger while holding the close lock shared, as applying usage does, so
-- a close freezes what the ledger had recorded and every entry recorded
-- later is late. An entry (or a grant's expiry) dated in a closed month
-- is recorded as usual and also listed here, one row per log entry or
-- expiry, the way usage_late lists late usage: a closed statement shows
-- the sums as its late credits and never changes.
--
-- drawn: units drawn from the balance (negative: given back); overage
-- and unpaid as in credit_hours; expired: units that left the balance
-- by the expiry of a grant (or given back from a draw on a grant that
-- expired since).
CREATE TABLE credit_late (
    id           bigserial PRIMARY KEY,
    month        date NOT NULL,
    tenant_id    uuid NOT NULL REFERENCES tenants(id),
    -- entry is the consumption log entry; NULL for an expiry.
    entry        text,
    at           timestamptz NOT NULL,
    drawn        bigint NOT NULL DEFAULT 0,
    overage      bigint NOT NULL DEFAULT 0,
    unpaid       bigint NOT NULL DEFAULT 0,
    expired      bigint NOT NULL DEFAULT 0,
    recorded_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX credit_late_month ON credit_late (month, tenant_id);

-- A hold's draws, by hold: a settlement that gives units back finds the
-- grants its hold drew on, and units drawn on a grant that has expired
-- since (or expires within the drainer's margin) expire at once instead
-- of returning to the balance. The drainer writes a hold's draws with
-- the cause "hold <id>", optionally followed by " (…)".
CREATE INDEX credit_ledger_hold ON credit_ledger (tenant_id, split_part(cause, ' (', 1))
    WHERE kind = 'consumption' AND cause LIKE 'hold %';

-- drained_through is the store's clock of the latest drain that had
-- recorded the balance's whole log (written when the account changes,
-- and at least once a month): a close names the balances whose drainer
-- had not passed the month's end.
ALTER TABLE credit_accounts ADD COLUMN drained_through timestamptz;
