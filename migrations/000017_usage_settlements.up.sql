-- Schema v17: the holds whose settlement (or expiry) usage has counted.
-- An api process hands a hold's settlement on at every final answer, a
-- retried one too, since the first answer may have been lost; applying a
-- batch inserts each hold's hash in the same transaction as its batch ID
-- and adds to the rollups only the settlements whose hash was new, so a
-- hold counts exactly once. The worker forgets hashes after a week
-- (usage.StoreConfig.SettlementRetention); a hold is final within a day
-- and an hour of opening.
CREATE TABLE usage_settlements (
    -- The first 16 bytes of the SHA-256 of the hold's ID.
    hold_hash   bytea PRIMARY KEY CHECK (length(hold_hash) = 16),
    applied_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX usage_settlements_applied_at ON usage_settlements (applied_at);
