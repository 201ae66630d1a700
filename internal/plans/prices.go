package plans

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PriceChange is a plan's prices from the start of a month (UTC) until the
// month of the plan's next PriceChange: what statements of those months
// price the plan's spans with.
type PriceChange struct {
	// Month is the first instant of the month the prices are in effect
	// from (UTC); the zero Time for prices in effect from the beginning
	// (those a plan had when price history began).
	Month            time.Time
	BaseFeeMinor     int64
	IncludedUnits    int64
	OverageUnitMinor int64
	Tiers            []PriceTier
}

// In returns p with the prices in effect in the month starting at month
// (UTC): those of the latest of p.PriceHistory whose Month is not after
// month, or of its first for a month before them all (a plan's first
// prices are from the beginning: recordPrices). A plan without history
// loaded (List loads none) keeps its current prices. In neither copies
// nor changes p's slices.
func (p Plan) In(month time.Time) Plan {
	if len(p.PriceHistory) == 0 {
		return p
	}
	c := p.PriceHistory[0]
	for i := len(p.PriceHistory) - 1; i > 0; i-- {
		if !p.PriceHistory[i].Month.After(month) {
			c = p.PriceHistory[i]
			break
		}
	}
	p.BaseFeeMinor, p.IncludedUnits, p.OverageUnitMinor, p.Tiers = c.BaseFeeMinor, c.IncludedUnits, c.OverageUnitMinor, c.Tiers
	return p
}

// WithClock returns a Store on the same database whose changes of a
// plan's prices take effect from the month now returns a time in (UTC),
// instead of the database's clock: tests set a change's month with it.
func (s *Store) WithClock(now func() time.Time) *Store {
	c := *s
	c.now = now
	return &c
}

// ListPriced returns List's plans, each with its PriceHistory (oldest
// first): what statements are priced from. It reads the history in one
// query.
func (s *Store) ListPriced(ctx context.Context) ([]Plan, error) {
	list, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	byID := make(map[int64]*Plan, len(list))
	for i := range list {
		byID[list[i].ID] = &list[i]
	}
	rows, err := s.db.Query(ctx, `SELECT plan_id, nullif(month, '-infinity'::date), base_fee_minor, included_units,
		overage_unit_minor, tiers FROM plan_prices ORDER BY plan_id, month`)
	if err != nil {
		return nil, fmt.Errorf("plans: price history: %w", err)
	}
	var planID int64
	var month *time.Time
	var c PriceChange
	var tiers []byte
	_, err = pgx.ForEachRow(rows, []any{&planID, &month, &c.BaseFeeMinor, &c.IncludedUnits, &c.OverageUnitMinor, &tiers}, func() error {
		p, ok := byID[planID]
		if !ok { // created after List read the plans
			return nil
		}
		v := c
		if month != nil {
			v.Month = time.Date(month.Year(), month.Month(), 1, 0, 0, 0, 0, time.UTC)
		}
		if err := json.Unmarshal(tiers, &v.Tiers); err != nil {
			return fmt.Errorf("plan %d's tiers: %w", planID, err)
		}
		p.PriceHistory = append(p.PriceHistory, v)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("plans: price history: %w", err)
	}
	return list, nil
}

// recordPrices records p's prices as plan id's from the start of the
// current month (UTC, by s's clock), on tx, the transaction that wrote
// them: they replace the month's earlier record of the plan (the last
// change of a month wins), and prices equal to those in effect before
// the month record nothing. A plan's first prices (a new plan's), and
// the prices of a plan moved to another currency (moved: the history's
// amounts are of the old one, and no month still open bills the plan,
// checkCurrencyChange saw to that), are its prices from the beginning:
// a month before them, which a tenant moved onto the plan with an
// earlier effective_at may be billed for, is priced with them, and no
// later change reprices it.
func (s *Store) recordPrices(ctx context.Context, tx pgx.Tx, id int64, p Plan, moved bool) error {
	tiers := p.Tiers
	if tiers == nil {
		tiers = []PriceTier{}
	}
	tiersJSON, err := json.Marshal(tiers)
	if err != nil {
		return fmt.Errorf("plans: record prices: %w", err)
	}
	var now *time.Time
	if s.now != nil {
		t := s.now()
		now = &t
	}
	if moved {
		if _, err := tx.Exec(ctx, `DELETE FROM plan_prices WHERE plan_id = $1`, id); err != nil {
			return fmt.Errorf("plans: record prices: %w", err)
		}
	}
	tag, err := tx.Exec(ctx, `INSERT INTO plan_prices (plan_id, month, base_fee_minor, included_units, overage_unit_minor, tiers)
		SELECT $1, '-infinity', $2, $3, $4, $5::jsonb WHERE NOT EXISTS (SELECT 1 FROM plan_prices WHERE plan_id = $1)`,
		id, p.BaseFeeMinor, p.IncludedUnits, p.OverageUnitMinor, string(tiersJSON))
	if err != nil {
		return fmt.Errorf("plans: record prices: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	// SHARE conflicts with a month's close inserting its row: a close in
	// progress commits first, one not yet begun waits for this change
	// (and its statements see it).
	if _, err := tx.Exec(ctx, `LOCK TABLE usage_closed_months IN SHARE MODE`); err != nil {
		return fmt.Errorf("plans: record prices: lock closed months: %w", err)
	}
	// The month starts at 00:00 UTC: now() is the transaction's start. A
	// change begun in a month that has closed since (begun before
	// midnight, committed after the close) takes effect from the month
	// after the latest closed one: a closed month's statements are
	// frozen, and its price record stays the one they were priced with.
	const month = `greatest(date_trunc('month', coalesce($2::timestamptz, now()) AT TIME ZONE 'UTC')::date,
		(SELECT (max(month) + interval '1 month')::date FROM usage_closed_months))`
	if _, err := tx.Exec(ctx, `DELETE FROM plan_prices WHERE plan_id = $1 AND month = `+month, id, now); err != nil {
		return fmt.Errorf("plans: record prices: %w", err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO plan_prices (plan_id, month, base_fee_minor, included_units, overage_unit_minor, tiers)
		SELECT $1, `+month+`, $3, $4, $5, $6::jsonb
		WHERE NOT EXISTS (SELECT 1 FROM (SELECT c.base_fee_minor, c.included_units, c.overage_unit_minor, c.tiers
				FROM plan_prices c WHERE c.plan_id = $1 AND c.month < `+month+` ORDER BY c.month DESC LIMIT 1) AS before
			WHERE (before.base_fee_minor, before.included_units, before.overage_unit_minor, before.tiers) = ($3, $4, $5, $6::jsonb))`,
		id, now, p.BaseFeeMinor, p.IncludedUnits, p.OverageUnitMinor, string(tiersJSON))
	if err != nil {
		return fmt.Errorf("plans: record prices: %w", err)
	}
	return nil
}
