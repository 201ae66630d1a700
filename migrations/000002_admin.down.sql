DROP TRIGGER IF EXISTS tenants_plan_assignable ON tenants;
DROP FUNCTION IF EXISTS tollgate_plan_assignable();
DROP TABLE IF EXISTS audit_log;
DROP TABLE IF EXISTS tenant_rule_overrides;
DROP TABLE IF EXISTS admin_sessions;
DROP TABLE IF EXISTS users;
