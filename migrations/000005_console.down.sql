DROP TABLE IF EXISTS usage_total_hour;
DROP TABLE IF EXISTS usage_total_minute;
DROP INDEX IF EXISTS api_keys_prefix;
DROP INDEX IF EXISTS api_keys_created;
