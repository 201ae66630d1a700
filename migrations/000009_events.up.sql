-- Schema v7: quota events and their webhooks. An event is written to the
-- outbox (events) in the transaction of the change it describes, together
-- with one delivery per webhook endpoint that wants it; deliverers in the
-- admin server send deliveries whose time has come, each attempt recorded.
CREATE TABLE events (
    id          text PRIMARY KEY,
    type        text NOT NULL,
    -- tenant_id is null for global events. No foreign key: an event is
    -- history and outlives what it names.
    tenant_id   uuid,
    created_at  timestamptz NOT NULL,
    data        jsonb NOT NULL
);
CREATE INDEX events_tenant_created ON events (tenant_id, created_at DESC);
CREATE INDEX events_created ON events (created_at DESC);

CREATE TABLE webhook_endpoints (
    id                    uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    -- owner_tenant_id is the tenant whose admins made the endpoint (it
    -- receives that tenant's events only); null for an operator's.
    owner_tenant_id       uuid REFERENCES tenants(id) ON DELETE CASCADE,
    url                   text NOT NULL,
    description           text NOT NULL DEFAULT '',
    -- event_types and tenant_ids filter what an endpoint receives; empty
    -- means every type, every tenant (tenant_ids: operators' only).
    event_types           text[] NOT NULL DEFAULT '{}',
    tenant_ids            uuid[] NOT NULL DEFAULT '{}',
    secret                text NOT NULL,
    previous_secret       text,
    previous_secret_until timestamptz,
    disabled_at           timestamptz,
    disabled_reason       text NOT NULL DEFAULT '',
    failing_since         timestamptz,
    created_at            timestamptz NOT NULL,
    CHECK (owner_tenant_id IS NULL OR cardinality(tenant_ids) = 0)
);
CREATE INDEX webhook_endpoints_owner ON webhook_endpoints (owner_tenant_id);

CREATE TABLE webhook_deliveries (
    id              bigserial PRIMARY KEY,
    event_id        text NOT NULL REFERENCES events(id) ON DELETE CASCADE,
    endpoint_id     uuid NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
    state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        int NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    next_attempt_at timestamptz NOT NULL,
    -- A deliverer leases a delivery while it sends it: no other deliverer
    -- takes it before lease_until, and only the lease_token holder
    -- records the attempt's result.
    lease_until     timestamptz,
    lease_token     uuid,
    finished_at     timestamptz
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, id DESC);
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);

CREATE TABLE webhook_attempts (
    id            bigserial PRIMARY KEY,
    delivery_id   bigint NOT NULL REFERENCES webhook_deliveries(id) ON DELETE CASCADE,
    attempt       int NOT NULL,
    at            timestamptz NOT NULL,
    -- status is the response's HTTP status, null when none came.
    status        int,
    latency_us    bigint NOT NULL,
    response_body text NOT NULL DEFAULT '',
    error         text NOT NULL DEFAULT ''
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, attempt);

-- New deliveries wake the deliverers (LISTEN tollgate_webhooks) when the
-- transaction that made them commits.
CREATE FUNCTION tollgate_notify_webhooks() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('tollgate_webhooks', '');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER webhook_deliveries_inserted AFTER INSERT ON webhook_deliveries
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_webhooks();
