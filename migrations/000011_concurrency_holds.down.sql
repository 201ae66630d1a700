ALTER TABLE usage_minute DROP COLUMN expired_holds;
ALTER TABLE usage_hour DROP COLUMN expired_holds;
ALTER TABLE usage_day DROP COLUMN expired_holds;
ALTER TABLE usage_month DROP COLUMN expired_holds;

-- The older schema knows no concurrency rules: they are removed.
DELETE FROM plan_rules WHERE algorithm = 'concurrency';
DELETE FROM tenant_rule_overrides WHERE algorithm = 'concurrency';
ALTER TABLE plan_rules DROP CONSTRAINT plan_rules_algorithm_check;
ALTER TABLE plan_rules ADD CONSTRAINT plan_rules_algorithm_check CHECK (algorithm IN ('gcra',
    'token_bucket', 'leaky_bucket', 'fixed_window', 'sliding_window_log', 'sliding_window_counter'));
ALTER TABLE tenant_rule_overrides DROP CONSTRAINT tenant_rule_overrides_algorithm_check;
ALTER TABLE tenant_rule_overrides ADD CONSTRAINT tenant_rule_overrides_algorithm_check CHECK (algorithm IN ('gcra',
    'token_bucket', 'leaky_bucket', 'fixed_window', 'sliding_window_log', 'sliding_window_counter'));
