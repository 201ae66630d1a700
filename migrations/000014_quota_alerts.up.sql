-- Schema v14: sustained rate limiting of a tenant as a whole, beside that
-- of each key; and the open threshold crossings found without usage.
--
-- ratelimit_alerts.scope 'key': one key (key_id nil: the tenant's checks
-- without a key); 'tenant': the denials of all the tenant's keys and of
-- its checks without a key together (key_id nil). At most one open alert
-- per tenant, scope and key: ratelimit.sustained once when it opens,
-- ratelimit.resolved once when it closes, however many workers apply
-- usage at once.
ALTER TABLE ratelimit_alerts ADD COLUMN scope text NOT NULL DEFAULT 'key' CHECK (scope IN ('key', 'tenant'));
DROP INDEX ratelimit_alerts_open;
CREATE UNIQUE INDEX ratelimit_alerts_open ON ratelimit_alerts (tenant_id, scope, key_id) WHERE resolved_at IS NULL;

-- The threshold crossings not yet resolved, which the usage worker's
-- sweep looks at every half minute to resolve those of a tenant with no
-- usage to apply: a new month, or a threshold moved since.
CREATE INDEX quota_crossings_open ON quota_crossings (tenant_id) WHERE kind = 'threshold' AND resolved_at IS NULL;
