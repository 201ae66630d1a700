-- Schema v19: a rule's scope across regions (docs/regions.md).
--
-- region_scope is NULL for a regional rule (the default: each region
-- enforces it on its own), or global_shared / global_split. min_share is
-- the floor of a region's allotment of a global_split rule, in units (0:
-- the default, the limit / (4 × regions)).

ALTER TABLE plan_rules
    ADD COLUMN region_scope text CHECK (region_scope IN ('global_shared', 'global_split')),
    ADD COLUMN min_share    bigint NOT NULL DEFAULT 0 CHECK (min_share >= 0);

ALTER TABLE tenant_rule_overrides
    ADD COLUMN region_scope text CHECK (region_scope IN ('global_shared', 'global_split')),
    ADD COLUMN min_share    bigint NOT NULL DEFAULT 0 CHECK (min_share >= 0);
