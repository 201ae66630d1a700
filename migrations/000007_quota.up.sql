-- Schema v7: quota thresholds, spend caps and the crossings of thresholds.
--
-- A plan's settings are its tenants' defaults; a tenant's row overrides
-- them (thresholds NULL: the plan's; spend_cap_minor NULL: the plan's
-- default). Both tables announce changes on tollgate_changes, so API
-- processes reload the limits they enforce within a second.
CREATE TABLE quota_plan_settings (
    plan_id                  bigint PRIMARY KEY REFERENCES plans(id) ON DELETE CASCADE,
    thresholds               jsonb NOT NULL DEFAULT '[]',
    spend_cap_default_minor  bigint CHECK (spend_cap_default_minor >= 0),
    spend_cap_max_minor      bigint CHECK (spend_cap_max_minor >= 0),
    updated_at               timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE quota_tenant_settings (
    tenant_id        uuid PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    thresholds       jsonb,
    spend_cap_minor  bigint CHECK (spend_cap_minor >= 0),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TRIGGER quota_plan_settings_changed AFTER INSERT OR UPDATE OR DELETE ON quota_plan_settings
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_change();
CREATE TRIGGER quota_tenant_settings_changed AFTER INSERT OR UPDATE OR DELETE ON quota_tenant_settings
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_change();

-- One row per tenant, month, kind and point (in units of the month's
-- count) crossed: a threshold crossed, the spend cap reached, a hard
-- quota exhausted. The primary key is what makes each recorded exactly
-- once, however many API processes and workers see it. resolved_at is set
-- when a threshold no longer applies (a new month, more included units).
CREATE TABLE quota_crossings (
    tenant_id    uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    month        date NOT NULL,
    kind         text NOT NULL CHECK (kind IN ('threshold', 'spend_cap', 'exhausted')),
    units        bigint NOT NULL CHECK (units >= 0),
    crossed_at   timestamptz NOT NULL,
    source       text NOT NULL CHECK (source IN ('check', 'rollups')),
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    resolved_at  timestamptz,
    PRIMARY KEY (tenant_id, month, kind, units)
);
CREATE INDEX quota_crossings_unresolved ON quota_crossings (month) WHERE resolved_at IS NULL;
