-- Schema v5: indexes for the web console's lists and overview at scale
-- (docs/benchmarks.md, "Console"): every tenant's keys newest first and by
-- display prefix, and the last minutes of usage across tenants (the
-- minute table's primary key starts with the tenant).
CREATE INDEX api_keys_created ON api_keys (created_at DESC, id DESC);
CREATE INDEX api_keys_prefix ON api_keys (prefix text_pattern_ops);
CREATE INDEX usage_minute_bucket ON usage_minute (bucket_start);
