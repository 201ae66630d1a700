ALTER TABLE tenant_rule_overrides DROP COLUMN min_share, DROP COLUMN region_scope;
ALTER TABLE plan_rules DROP COLUMN min_share, DROP COLUMN region_scope;
