-- Rules may limit requests in flight: algorithm 'concurrency' (limit: at
-- most that many at once; period_us: a lease's time to live).
ALTER TABLE plan_rules DROP CONSTRAINT plan_rules_algorithm_check;
ALTER TABLE plan_rules ADD CONSTRAINT plan_rules_algorithm_check CHECK (algorithm IN ('gcra',
    'token_bucket', 'leaky_bucket', 'fixed_window', 'sliding_window_log', 'sliding_window_counter',
    'concurrency'));
ALTER TABLE tenant_rule_overrides DROP CONSTRAINT tenant_rule_overrides_algorithm_check;
ALTER TABLE tenant_rule_overrides ADD CONSTRAINT tenant_rule_overrides_algorithm_check CHECK (algorithm IN ('gcra',
    'token_bucket', 'leaky_bucket', 'fixed_window', 'sliding_window_log', 'sliding_window_counter',
    'concurrency'));
