-- Schema v25: a plan's prices by month.
--
-- Each row holds the prices a plan bills from the start of month (UTC)
-- until the month of its next row: a change of a plan's prices records
-- them from the start of the month it is made in, so months before it
-- keep the prices they ran at. The plans row keeps the current prices
-- (what checks, the API and the console read); statements price each
-- month from the row in effect in it. Tiers are the plan_price_tiers of
-- the time, in order, as [{"up_to": n or null, "unit_minor": n}].
CREATE TABLE plan_prices (
    plan_id            bigint NOT NULL REFERENCES plans (id) ON DELETE CASCADE,
    month              date   NOT NULL CHECK (month = '-infinity' OR extract(day FROM month) = 1),
    base_fee_minor     bigint NOT NULL,
    included_units     bigint NOT NULL,
    overage_unit_minor bigint NOT NULL,
    tiers              jsonb  NOT NULL DEFAULT '[]',
    PRIMARY KEY (plan_id, month)
);

-- Plans as they are bill every month until their next change: from the
-- beginning of time.
INSERT INTO plan_prices (plan_id, month, base_fee_minor, included_units, overage_unit_minor, tiers)
SELECT p.id, '-infinity', p.base_fee_minor, p.included_units, p.overage_unit_minor,
    coalesce((SELECT jsonb_agg(jsonb_build_object('up_to', t.up_to, 'unit_minor', t.unit_minor) ORDER BY t.position)
        FROM plan_price_tiers t WHERE t.plan_id = p.id), '[]')
FROM plans p;
