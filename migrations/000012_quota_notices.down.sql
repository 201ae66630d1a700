DROP TABLE ratelimit_alerts;
DROP TABLE quota_forecasts;
