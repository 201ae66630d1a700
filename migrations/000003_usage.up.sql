-- Usage pipeline and monthly statements: decision counts by minute (monthly
-- partitions) rolled up to hours, days and months; the batch IDs that make
-- applying a batch exactly-once; late usage; closed months and their frozen
-- statements; plans' monthly quota mode.
--
-- Tenant and key IDs are the nil UUID for decisions without one (anonymous
-- callers, unknown keys). Usage tables carry no foreign keys: counts must be
-- stored even for a tenant or key deleted since, and a bad reference must
-- never make a batch impossible to apply.

ALTER TABLE plans ADD COLUMN quota_mode text NOT NULL DEFAULT 'none'
    CHECK (quota_mode IN ('none', 'hard', 'overage'));

-- One row per batch ever applied. Inserting the ID in the same transaction
-- as the counts makes a redelivered batch a no-op.
CREATE TABLE usage_batches (
    batch_id    text PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    row_count   int NOT NULL,
    decisions   bigint NOT NULL
);
CREATE INDEX usage_batches_applied_at ON usage_batches (applied_at);

-- Minute rows, one partition per UTC month (usage_minute_YYYYMM), created
-- ahead and dropped after TOLLGATE_USAGE_MINUTE_RETENTION by the worker.
CREATE TABLE usage_minute (
    tenant_id      uuid NOT NULL,
    bucket_start   timestamptz NOT NULL,
    key_id         uuid NOT NULL,
    tier           text NOT NULL,
    resource       text NOT NULL,
    reason         text NOT NULL,
    -- The rules that denied, comma-separated; '' when allowed.
    denied_by      text NOT NULL,
    allowed        bigint NOT NULL,
    denied         bigint NOT NULL,
    allowed_units  bigint NOT NULL,
    denied_units   bigint NOT NULL,
    PRIMARY KEY (tenant_id, bucket_start, key_id, tier, resource, reason, denied_by)
) PARTITION BY RANGE (bucket_start);

-- Rollups, kept for good; same dimensions as the minute rows.
CREATE TABLE usage_hour (LIKE usage_minute INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    PRIMARY KEY (tenant_id, bucket_start, key_id, tier, resource, reason, denied_by));
CREATE INDEX usage_hour_bucket ON usage_hour (bucket_start);
CREATE TABLE usage_day (LIKE usage_minute INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    PRIMARY KEY (tenant_id, bucket_start, key_id, tier, resource, reason, denied_by));
CREATE INDEX usage_day_bucket ON usage_day (bucket_start);
CREATE TABLE usage_month (LIKE usage_minute INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    PRIMARY KEY (tenant_id, bucket_start, key_id, tier, resource, reason, denied_by));
CREATE INDEX usage_month_bucket ON usage_month (bucket_start);

-- Anonymous traffic by IP: each batch carries the top IPs of each minute
-- and folds the rest into ip 'other', so the sum is exact and the size is
-- bounded. Partitioned like usage_minute, with the same retention.
CREATE TABLE usage_anon_ip_minute (
    bucket_start   timestamptz NOT NULL,
    ip             text NOT NULL,
    allowed        bigint NOT NULL,
    denied         bigint NOT NULL,
    allowed_units  bigint NOT NULL,
    denied_units   bigint NOT NULL,
    PRIMARY KEY (bucket_start, ip)
) PARTITION BY RANGE (bucket_start);

-- Months closed by `admin close`; their statements are frozen.
CREATE TABLE usage_closed_months (
    month       date PRIMARY KEY CHECK (extract(day FROM month) = 1),
    closed_at   timestamptz NOT NULL DEFAULT now(),
    statements  int NOT NULL
);

-- Frozen statements of closed months. body is the statement as served.
CREATE TABLE statements (
    tenant_id    uuid NOT NULL,
    month        date NOT NULL REFERENCES usage_closed_months (month),
    currency     text NOT NULL,
    total_minor  bigint NOT NULL,
    body         jsonb NOT NULL,
    closed_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, month)
);

CREATE FUNCTION tollgate_statements_immutable() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'statements of closed months are immutable';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER statements_immutable BEFORE UPDATE OR DELETE ON statements
    FOR EACH ROW EXECUTE FUNCTION tollgate_statements_immutable();

-- Usage that arrived after its month was closed: counted in the usage
-- tables (it happened) and listed here, never added to a frozen statement.
CREATE TABLE usage_late (
    id             bigserial PRIMARY KEY,
    batch_id       text NOT NULL,
    month          date NOT NULL,
    tenant_id      uuid NOT NULL,
    key_id         uuid NOT NULL,
    resource       text NOT NULL,
    bucket_start   timestamptz NOT NULL,
    allowed        bigint NOT NULL,
    denied         bigint NOT NULL,
    allowed_units  bigint NOT NULL,
    denied_units   bigint NOT NULL,
    recorded_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX usage_late_month ON usage_late (month, tenant_id);

-- Stream entries that could not be decoded: kept for inspection instead
-- of blocking the stream.
CREATE TABLE usage_bad_batches (
    entry_id     text PRIMARY KEY,
    payload      text NOT NULL,
    error        text NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now()
);
