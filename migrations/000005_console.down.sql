DROP INDEX IF EXISTS usage_minute_bucket;
DROP INDEX IF EXISTS api_keys_prefix;
DROP INDEX IF EXISTS api_keys_created;
