COMMENT ON COLUMN webhook_endpoints.previous_secret IS NULL;
COMMENT ON COLUMN webhook_endpoints.secret IS NULL;
DROP TABLE key_expiry_notices;
DROP TABLE ratelimit_alerts;
DROP TABLE quota_forecasts;
