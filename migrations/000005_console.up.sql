-- Schema v5, for the web console at scale (docs/benchmarks.md, "Console"):
-- every tenant's keys newest first and by display prefix, and every
-- decision of every tenant and anonymous caller added up by minute and by
-- hour, kept by the usage worker beside the other rollups, so that the
-- operator's overview reads a few rows per bucket instead of every
-- tenant's.
CREATE INDEX api_keys_created ON api_keys (created_at DESC, id DESC);
CREATE INDEX api_keys_prefix ON api_keys (prefix text_pattern_ops);

CREATE TABLE usage_total_minute (
    bucket_start   timestamptz PRIMARY KEY,
    allowed        bigint NOT NULL,
    denied         bigint NOT NULL,
    allowed_units  bigint NOT NULL,
    denied_units   bigint NOT NULL
);
CREATE TABLE usage_total_hour (LIKE usage_total_minute INCLUDING ALL);

INSERT INTO usage_total_minute SELECT bucket_start, sum(allowed), sum(denied), sum(allowed_units), sum(denied_units)
    FROM usage_minute GROUP BY bucket_start;
INSERT INTO usage_total_hour SELECT bucket_start, sum(allowed), sum(denied), sum(allowed_units), sum(denied_units)
    FROM usage_hour GROUP BY bucket_start;
