-- Schema v4: a key is rotated at most once. rotated_at and replaced_by
-- record its rotation; rotating a key that has been rotated is a conflict,
-- so that one key cannot be turned into any number of live keys.
ALTER TABLE api_keys
    ADD COLUMN rotated_at   timestamptz,
    -- The key that replaced this one; NULL again if that key is deleted
    -- (rotated_at still says this one was rotated).
    ADD COLUMN replaced_by  uuid REFERENCES api_keys(id) ON DELETE SET NULL;
