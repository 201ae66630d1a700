UPDATE quota_crossings SET source = 'rollups' WHERE source = 'counter';
ALTER TABLE quota_crossings DROP CONSTRAINT quota_crossings_source_check;
ALTER TABLE quota_crossings ADD CONSTRAINT quota_crossings_source_check
    CHECK (source IN ('check', 'rollups'));
