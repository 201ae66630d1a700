-- Schema v7: route templates. A plan declares routes ("GET /items/{id}"),
-- and usage records a check under the route it matched, or '(other)',
-- never under the caller's raw path (see docs/usage.md). The worker also
-- folds a tenant's resources beyond a monthly cap into '(other)'.
ALTER TABLE plans ADD COLUMN routes text[] NOT NULL DEFAULT '{}';

-- Existing usage was recorded by raw path. Each row keeps its counts
-- under a mapped resource: the query string and fragment are cut off,
-- and of each tenant's (and the anonymous callers') resources of a month
-- the 200 with the most units stay, ranked on the month's rollup (ties
-- by name); the rest become '(other)'. Rows that map to the same
-- resource are summed, so every total per tenant and month, per key, per
-- tier and per reason stays exactly what it was.
CREATE TEMP TABLE route_map ON COMMIT DROP AS
WITH stripped AS (
    SELECT tenant_id, bucket_start AS month, split_part(split_part(resource, '?', 1), '#', 1) AS mapped,
        resource, allowed_units + denied_units AS units
    FROM usage_month
), ranked AS (
    SELECT tenant_id, month, mapped,
        rank() OVER (PARTITION BY tenant_id, month ORDER BY sum(units) DESC, mapped) AS place
    FROM stripped GROUP BY tenant_id, month, mapped
)
SELECT s.tenant_id, s.month, s.resource,
    CASE WHEN r.place > 200 THEN '(other)' ELSE s.mapped END AS mapped
FROM stripped s JOIN ranked r USING (tenant_id, month, mapped)
WHERE s.resource <> CASE WHEN r.place > 200 THEN '(other)' ELSE s.mapped END
GROUP BY 1, 2, 3, 4;
CREATE INDEX ON route_map (tenant_id, month, resource);

-- remap moves the rows of table whose resource route_map maps, summing
-- them into the rows of the mapped resource.
CREATE FUNCTION pg_temp.remap(tbl text) RETURNS void AS $$
BEGIN
    EXECUTE format($q$
        CREATE TEMP TABLE moved ON COMMIT DROP AS
        WITH gone AS (
            DELETE FROM %1$I u USING route_map m
            WHERE u.tenant_id = m.tenant_id AND u.resource = m.resource
              AND date_trunc('month', u.bucket_start AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' = m.month
            RETURNING u.*, m.mapped
        )
        SELECT tenant_id, bucket_start, key_id, tier, mapped AS resource, reason, denied_by,
            sum(allowed)::bigint AS allowed, sum(denied)::bigint AS denied,
            sum(allowed_units)::bigint AS allowed_units, sum(denied_units)::bigint AS denied_units
        FROM gone GROUP BY tenant_id, bucket_start, key_id, tier, mapped, reason, denied_by
    $q$, tbl);
    EXECUTE format($q$
        INSERT INTO %1$I AS u (tenant_id, bucket_start, key_id, tier, resource, reason, denied_by,
            allowed, denied, allowed_units, denied_units)
        SELECT * FROM moved
        ON CONFLICT (tenant_id, bucket_start, key_id, tier, resource, reason, denied_by) DO UPDATE SET
            allowed = u.allowed + EXCLUDED.allowed, denied = u.denied + EXCLUDED.denied,
            allowed_units = u.allowed_units + EXCLUDED.allowed_units,
            denied_units = u.denied_units + EXCLUDED.denied_units
    $q$, tbl);
    DROP TABLE moved;
END
$$ LANGUAGE plpgsql;

SELECT pg_temp.remap('usage_minute');
SELECT pg_temp.remap('usage_hour');
SELECT pg_temp.remap('usage_day');
SELECT pg_temp.remap('usage_month');
DROP FUNCTION pg_temp.remap(text);

-- Late usage is a list, not a sum: its resources only lose their query.
UPDATE usage_late SET resource = split_part(split_part(resource, '?', 1), '#', 1)
WHERE resource ~ '[?#]';
