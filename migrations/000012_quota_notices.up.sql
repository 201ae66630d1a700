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
