-- Schema v1: plans with rules and pricing, tenants, API keys, service-token
-- signing. Money is integer minor units; limiter periods are integer µs.

CREATE TABLE plans (
    id                  bigserial PRIMARY KEY,
    name                text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    display_name        text NOT NULL DEFAULT '',
    currency            text NOT NULL DEFAULT 'USD' CHECK (currency ~ '^[A-Z]{3}$'),
    base_fee_minor      bigint NOT NULL DEFAULT 0 CHECK (base_fee_minor >= 0),
    included_units      bigint NOT NULL DEFAULT 0 CHECK (included_units >= 0),
    -- Flat overage price per unit; graduated tiers in plan_price_tiers win
    -- when present.
    overage_unit_minor  bigint NOT NULL DEFAULT 0 CHECK (overage_unit_minor >= 0),
    archived_at         timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE plan_price_tiers (
    plan_id          bigint NOT NULL REFERENCES plans(id) ON DELETE CASCADE,
    -- Overage units up to and including up_to are priced at unit_minor;
    -- NULL means "and beyond".
    up_to            bigint CHECK (up_to IS NULL OR up_to > 0),
    unit_minor       bigint NOT NULL CHECK (unit_minor >= 0),
    position         int NOT NULL,
    PRIMARY KEY (plan_id, position)
);

CREATE TABLE plan_rules (
    id             bigserial PRIMARY KEY,
    plan_id        bigint NOT NULL REFERENCES plans(id) ON DELETE CASCADE,
    name           text NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'),
    algorithm      text NOT NULL CHECK (algorithm IN ('gcra', 'token_bucket', 'leaky_bucket',
                       'fixed_window', 'sliding_window_log', 'sliding_window_counter')),
    limit_count    bigint NOT NULL CHECK (limit_count >= 0),
    period_us      bigint NOT NULL CHECK (period_us > 0),
    burst          bigint NOT NULL CHECK (burst >= 1),
    resource       text NOT NULL DEFAULT '*',
    scope          text NOT NULL DEFAULT 'key' CHECK (scope IN ('key', 'tenant', 'ip')),
    mode           text NOT NULL DEFAULT 'enforce' CHECK (mode IN ('enforce', 'shadow')),
    failure_mode   text NOT NULL DEFAULT 'open' CHECK (failure_mode IN ('open', 'closed')),
    -- Algorithm options: {"leaky_mode": "police|shape", "calendar": "month|day",
    -- "anchor": "first_request"}.
    options        jsonb NOT NULL DEFAULT '{}'::jsonb,
    position       int NOT NULL DEFAULT 0,
    UNIQUE (plan_id, name)
);

CREATE TABLE tenants (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 200),
    plan_id     bigint NOT NULL REFERENCES plans(id),
    status      text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'suspended')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Plan history for billing: which plan a tenant was on from when.
CREATE TABLE tenant_plan_changes (
    id             bigserial PRIMARY KEY,
    tenant_id      uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    plan_id        bigint NOT NULL REFERENCES plans(id),
    effective_at   timestamptz NOT NULL,
    recorded_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tenant_plan_changes_tenant ON tenant_plan_changes (tenant_id, effective_at);

CREATE TABLE api_keys (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id     uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name          text NOT NULL DEFAULT '',
    -- SHA-256 of the whole secret; the secret itself is never stored.
    hash          bytea NOT NULL UNIQUE CHECK (length(hash) = 32),
    prefix        text NOT NULL,
    metadata      jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    revoked_at    timestamptz,
    last_used_at  timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

-- Ed25519 keys that sign service tokens (JWT, alg EdDSA). API processes load
-- only the public halves.
CREATE TABLE signing_keys (
    kid          text PRIMARY KEY,
    algorithm    text NOT NULL DEFAULT 'EdDSA' CHECK (algorithm = 'EdDSA'),
    public_key   bytea NOT NULL,
    private_key  bytea NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    retired_at   timestamptz
);

-- Service tokens: credentials of the check API's callers (gateways).
CREATE TABLE service_tokens (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    kid         text NOT NULL REFERENCES signing_keys(kid),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,
    revoked_at  timestamptz
);

-- Every change to what the check API serves from its snapshot is announced
-- on channel tollgate_changes, so API processes reload within a second.
CREATE FUNCTION tollgate_notify_change() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('tollgate_changes', TG_TABLE_NAME);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER plans_changed AFTER INSERT OR UPDATE OR DELETE ON plans
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_change();
CREATE TRIGGER plan_rules_changed AFTER INSERT OR UPDATE OR DELETE ON plan_rules
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_change();
CREATE TRIGGER tenants_changed AFTER INSERT OR UPDATE OR DELETE ON tenants
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_change();
CREATE TRIGGER api_keys_changed AFTER INSERT OR DELETE OR UPDATE OF tenant_id, hash, expires_at, revoked_at ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_change();
CREATE TRIGGER signing_keys_changed AFTER INSERT OR UPDATE OR DELETE ON signing_keys
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_change();
CREATE TRIGGER service_tokens_changed AFTER INSERT OR UPDATE OR DELETE ON service_tokens
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_change();
