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

-- Holds that expired unsettled, counted apart in the tenant rollups (their
-- units are in allowed_units under the reason hold_expired).
ALTER TABLE usage_minute ADD COLUMN expired_holds bigint NOT NULL DEFAULT 0 CHECK (expired_holds >= 0);
ALTER TABLE usage_hour ADD COLUMN expired_holds bigint NOT NULL DEFAULT 0 CHECK (expired_holds >= 0);
ALTER TABLE usage_day ADD COLUMN expired_holds bigint NOT NULL DEFAULT 0 CHECK (expired_holds >= 0);
ALTER TABLE usage_month ADD COLUMN expired_holds bigint NOT NULL DEFAULT 0 CHECK (expired_holds >= 0);
