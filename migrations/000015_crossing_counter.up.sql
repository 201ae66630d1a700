-- Schema v15: a threshold crossing may be found from the tenant's monthly
-- quota counter in Redis (source 'counter'): the usage worker's sweep
-- records the thresholds the counter reached that no usage batch brought,
-- such as one whose batch was lost with an API process killed before it
-- published.
ALTER TABLE quota_crossings DROP CONSTRAINT quota_crossings_source_check;
ALTER TABLE quota_crossings ADD CONSTRAINT quota_crossings_source_check
    CHECK (source IN ('check', 'rollups', 'counter'));
