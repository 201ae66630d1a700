DROP TRIGGER IF EXISTS api_keys_inserted ON api_keys;
DROP TRIGGER IF EXISTS api_keys_updated ON api_keys;
DROP TRIGGER IF EXISTS api_keys_deleted ON api_keys;
DROP FUNCTION IF EXISTS tollgate_notify_keys();
CREATE TRIGGER api_keys_changed AFTER INSERT OR DELETE OR UPDATE OF tenant_id, hash, expires_at, revoked_at ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_change();
