-- Schema v2: the admin server. Users and their sessions, per-tenant rule
-- overrides, and the audit log; archived plans cannot be assigned.

-- Admin users. Operators see everything; tenant users (tenant_admin,
-- tenant_viewer) belong to exactly one tenant. Emails are stored lower-case.
CREATE TABLE users (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    email          text NOT NULL UNIQUE CHECK (email = lower(email) AND length(email) BETWEEN 3 AND 254),
    -- PHC string, e.g. $argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>.
    password_hash  text NOT NULL,
    role           text NOT NULL CHECK (role IN ('operator', 'tenant_admin', 'tenant_viewer')),
    tenant_id      uuid REFERENCES tenants(id) ON DELETE CASCADE,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    disabled_at    timestamptz,
    CONSTRAINT users_tenant_role CHECK ((role = 'operator') = (tenant_id IS NULL))
);
CREATE INDEX users_tenant ON users (tenant_id);

-- One row per login. The session JWT carries the row's id (jti), so a
-- logout, a disabled user or a deleted user ends the session at once.
CREATE TABLE admin_sessions (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id     uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);
CREATE INDEX admin_sessions_user ON admin_sessions (user_id);

-- A tenant's own rules: one named like a plan rule replaces it for this
-- tenant, any other is added to the plan's rules.
CREATE TABLE tenant_rule_overrides (
    id             bigserial PRIMARY KEY,
    tenant_id      uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
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
    options        jsonb NOT NULL DEFAULT '{}'::jsonb,
    position       int NOT NULL DEFAULT 0,
    UNIQUE (tenant_id, name)
);

CREATE TRIGGER tenant_rule_overrides_changed AFTER INSERT OR UPDATE OR DELETE ON tenant_rule_overrides
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_change();

-- Every change made through the admin API or CLI. Rows outlive what they
-- describe, so nothing here is a foreign key. before/after hold only the
-- fields that changed (the whole object on create and delete) and never a
-- secret.
CREATE TABLE audit_log (
    id           bigserial PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT now(),
    actor_id     uuid,
    actor        text NOT NULL,
    action       text NOT NULL,
    target_type  text NOT NULL,
    target_id    text NOT NULL,
    tenant_id    uuid,
    before       jsonb,
    after        jsonb
);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_actor ON audit_log (actor, id);
CREATE INDEX audit_log_action ON audit_log (action, id);
CREATE INDEX audit_log_target ON audit_log (target_type, target_id, id);
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, id);

-- Archived plans keep their tenants but cannot be assigned to more.
CREATE FUNCTION tollgate_plan_assignable() RETURNS trigger AS $$
BEGIN
    IF (TG_OP = 'INSERT' OR NEW.plan_id IS DISTINCT FROM OLD.plan_id)
       AND EXISTS (SELECT 1 FROM plans WHERE id = NEW.plan_id AND archived_at IS NOT NULL) THEN
        RAISE EXCEPTION 'plan % is archived', NEW.plan_id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'tenants_plan_not_archived';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER tenants_plan_assignable BEFORE INSERT OR UPDATE OF plan_id ON tenants
    FOR EACH ROW EXECUTE FUNCTION tollgate_plan_assignable();
