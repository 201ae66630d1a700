-- Schema v6: a change to api_keys names the keys it changed, so that API
-- processes reload those keys rather than every key (a million keys take
-- seconds to load). The payload on tollgate_changes is "api_keys:" and a
-- comma-separated list of the IDs of keys inserted or changed in a column
-- the check path reads, and of "-" and the hex SHA-256 of each key gone
-- (deleted, or its hash replaced); past 100 items it is "api_keys" alone,
-- and API processes then load every key. Other tables still send their
-- name only. Updates of other columns (last_used_at above all, written
-- every few seconds) send nothing.
DROP TRIGGER api_keys_changed ON api_keys;

CREATE FUNCTION tollgate_notify_keys() RETURNS trigger AS $$
DECLARE
    n int;
    items text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT count(*), string_agg(item, ',') INTO n, items
        FROM (SELECT id::text AS item FROM new_keys LIMIT 101) changed;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT count(*), string_agg(item, ',') INTO n, items
        FROM (SELECT '-' || encode(hash, 'hex') AS item FROM old_keys LIMIT 101) changed;
    ELSE
        SELECT count(*), string_agg(item, ',') INTO n, items FROM (
            SELECT nk.id::text AS item FROM new_keys nk JOIN old_keys ok ON ok.id = nk.id
            WHERE (nk.tenant_id, nk.hash, nk.expires_at, nk.revoked_at)
                IS DISTINCT FROM (ok.tenant_id, ok.hash, ok.expires_at, ok.revoked_at)
            UNION ALL
            SELECT '-' || encode(ok.hash, 'hex') FROM new_keys nk JOIN old_keys ok ON ok.id = nk.id
            WHERE nk.hash <> ok.hash
            LIMIT 101) changed;
    END IF;
    IF n > 100 THEN
        PERFORM pg_notify('tollgate_changes', 'api_keys');
    ELSIF n > 0 THEN
        PERFORM pg_notify('tollgate_changes', 'api_keys:' || items);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER api_keys_inserted AFTER INSERT ON api_keys
    REFERENCING NEW TABLE AS new_keys
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_keys();
CREATE TRIGGER api_keys_updated AFTER UPDATE ON api_keys
    REFERENCING OLD TABLE AS old_keys NEW TABLE AS new_keys
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_keys();
CREATE TRIGGER api_keys_deleted AFTER DELETE ON api_keys
    REFERENCING OLD TABLE AS old_keys
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_keys();
