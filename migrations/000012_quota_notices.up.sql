-- Schema v12: what the usage worker and the admin server remember so that
-- each of their notices is emitted once, however many of them run.
--
-- quota_forecasts: the earliest day a tenant's month was projected to
-- pass a limit (its included units, its spend cap) and told so with
-- quota.forecast.exceeded; a new event only when the projection moves
-- to an earlier day.
CREATE TABLE quota_forecasts (
    tenant_id      uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    month          date NOT NULL,
    kind           text NOT NULL CHECK (kind IN ('included_units', 'spend_cap')),
    projected_day  date NOT NULL,
    limit_units    bigint NOT NULL,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, month, kind)
);

-- ratelimit_alerts: a key (key_id nil: a tenant's checks without one)
-- denied by rate rules more than a set number of times within a window;
-- at most one open alert per key (ratelimit.sustained when it opens,
-- ratelimit.resolved when it closes).
CREATE TABLE ratelimit_alerts (
    id           bigserial PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    key_id       uuid NOT NULL,
    started_at   timestamptz NOT NULL,
    denials      bigint NOT NULL,
    resolved_at  timestamptz
);
CREATE UNIQUE INDEX ratelimit_alerts_open ON ratelimit_alerts (tenant_id, key_id) WHERE resolved_at IS NULL;

-- key_expiry_notices: key.expiring told for a key's expiry, 7 days and 1
-- day ahead; one row per key, expiry and lead, so each is told once
-- however many admin processes look, and a changed expiry is told anew.
CREATE TABLE key_expiry_notices (
    key_id       uuid NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
    expires_at   timestamptz NOT NULL,
    lead_days    int NOT NULL CHECK (lead_days IN (1, 7)),
    notified_at  timestamptz NOT NULL,
    PRIMARY KEY (key_id, expires_at, lead_days)
);

-- Webhook endpoint secrets are stored sealed with TOLLGATE_SECRET_KEY
-- ("sealed:" and base64). A migration file cannot hold the key, so the
-- rows an earlier version stored in the clear ("whsec_…") are sealed by
-- `admin migrate up` right after this step when the key is set, and
-- otherwise by `admin serve` as it starts; until then they keep working.
COMMENT ON COLUMN webhook_endpoints.secret IS 'sealed:<base64> (TOLLGATE_SECRET_KEY), or whsec_… in the clear until sealed';
COMMENT ON COLUMN webhook_endpoints.previous_secret IS 'as secret';
