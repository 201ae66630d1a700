DROP TABLE key_expiry_notices;
DROP TABLE ratelimit_alerts;
DROP TABLE quota_forecasts;
