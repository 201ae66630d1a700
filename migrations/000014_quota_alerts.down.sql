DROP INDEX quota_crossings_open;
DELETE FROM ratelimit_alerts WHERE scope = 'tenant';
DROP INDEX ratelimit_alerts_open;
ALTER TABLE ratelimit_alerts DROP COLUMN scope;
CREATE UNIQUE INDEX ratelimit_alerts_open ON ratelimit_alerts (tenant_id, key_id) WHERE resolved_at IS NULL;
