package plans_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/testenv"
)

func monthStart(year int, month time.Month) time.Time {
	return time.Date(year, month, 1, 0, 0, 0, 0, time.UTC)
}

func clockAt(t time.Time) func() time.Time { return func() time.Time { return t } }

func ptr[T any](v T) *T { return &v }

// pricesOf returns the plan named name as statements load it.
func pricesOf(t *testing.T, db postgres.Conn, name string) plans.Plan {
	t.Helper()
	list, err := plans.NewStore(db).ListPriced(context.Background())
	testenv.Must(t, err)
	for _, p := range list {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no plan %s", name)
	return plans.Plan{}
}

// TestPriceHistoryByMonth: every change of a plan's prices is recorded
// from the start of the month it is made in (UTC, by the store's clock);
// the last change of a month wins, a change that keeps the prices in
// effect records nothing, and a change of anything but prices neither.
// Plan.In gives a month the prices of the latest record not after it; a
// plan's first prices are from the beginning, so a month before the plan
// has them, whatever changes later.
func TestPriceHistoryByMonth(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	at := func(s string) *plans.Store {
		when, err := time.Parse(time.RFC3339, s)
		testenv.Must(t, err)
		return plans.NewStore(db).WithClock(clockAt(when))
	}
	priced := func(fee, included, unit int64, tiers ...plans.PriceTier) plans.Plan {
		return plans.Plan{Name: "pro", BaseFeeMinor: fee, IncludedUnits: included, OverageUnitMinor: unit, Tiers: tiers}
	}
	pro, err := at("2026-09-15T08:00:00Z").Create(ctx, priced(4900, 1000, 2))
	testenv.Must(t, err)
	// The clock is UTC's: 23:30 on 31 October in New York is November.
	_, err = at("2026-10-31T23:30:00-04:00").Update(ctx, pro.ID, priced(5900, 1000, 3))
	testenv.Must(t, err)
	tiered := priced(6900, 2000, 3, plans.PriceTier{UpTo: ptr(int64(100)), UnitMinor: 4}, plans.PriceTier{UnitMinor: 3})
	_, err = at("2026-11-29T10:00:00Z").Update(ctx, pro.ID, tiered)
	testenv.Must(t, err)
	// December: the same prices again, a rule and routes changed; then a
	// change back to September's in January and back again.
	_, err = at("2026-12-02T00:00:00Z").Put(ctx, tiered)
	testenv.Must(t, err)
	ops := plans.NewOps(db).WithClock(clockAt(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)))
	_, err = ops.PutRule(ctx, audit.CLI, pro.ID, hourly(100))
	testenv.Must(t, err)
	_, err = ops.SetRoutes(ctx, audit.CLI, pro.ID, []string{"GET /repos"})
	testenv.Must(t, err)
	_, err = at("2027-01-10T00:00:00Z").Update(ctx, pro.ID, priced(4900, 1000, 2))
	testenv.Must(t, err)
	_, err = at("2027-01-20T00:00:00Z").Update(ctx, pro.ID, tiered)
	testenv.Must(t, err)

	p := pricesOf(t, db, "pro")
	months := make([]time.Time, len(p.PriceHistory))
	for i, c := range p.PriceHistory {
		months[i] = c.Month
	}
	if want := []time.Time{{}, monthStart(2026, 11)}; !reflect.DeepEqual(months, want) {
		t.Errorf("price records from %v, want %v", months, want)
	}
	for _, c := range []struct {
		month               time.Time
		fee, included, unit int64
		tiers               int
	}{
		{monthStart(2026, 8), 4900, 1000, 2, 0}, // before the plan: its first prices
		{monthStart(2026, 9), 4900, 1000, 2, 0},
		{monthStart(2026, 10), 4900, 1000, 2, 0},
		{monthStart(2026, 11), 6900, 2000, 3, 2},
		{monthStart(2027, 3), 6900, 2000, 3, 2},
	} {
		got := p.In(c.month)
		if got.BaseFeeMinor != c.fee || got.IncludedUnits != c.included || got.OverageUnitMinor != c.unit || len(got.Tiers) != c.tiers {
			t.Errorf("%s: %d base, %d included, %d a unit, tiers %v; want %d, %d, %d, %d tiers", c.month.Format("2006-01"),
				got.BaseFeeMinor, got.IncludedUnits, got.OverageUnitMinor, got.Tiers, c.fee, c.included, c.unit, c.tiers)
		}
	}
	if got := p.In(monthStart(2026, 11)).Tiers; len(got) != 2 || *got[0].UpTo != 100 || got[0].UnitMinor != 4 || got[1].UpTo != nil {
		t.Errorf("November's tiers %+v", got)
	}
	// The plan as the API reads it has its current prices and no history.
	current, err := plans.NewStore(db).Get(ctx, pro.ID)
	testenv.Must(t, err)
	if current.BaseFeeMinor != 6900 || current.PriceHistory != nil || current.In(monthStart(2026, 10)).BaseFeeMinor != 6900 {
		t.Errorf("pro as read: base %d, history %v", current.BaseFeeMinor, current.PriceHistory)
	}
}

// TestPriceHistoryMigration: a plan that existed before schema 25 has
// its prices then, tiers included, from the beginning of time.
func TestPriceHistoryMigration(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	testenv.Must(t, postgres.MigrateDownTo(db, 24)) // the last before plan_prices
	var id int64
	testenv.Must(t, db.QueryRow(ctx, `INSERT INTO plans (name, base_fee_minor, included_units, overage_unit_minor)
		VALUES ('old', 4900, 1000, 2) RETURNING id`).Scan(&id))
	_, err := db.Exec(ctx, `INSERT INTO plan_price_tiers (plan_id, up_to, unit_minor, position)
		VALUES ($1, NULL, 1, 1), ($1, 100, 3, 0)`, id)
	testenv.Must(t, err)
	testenv.Must(t, postgres.MigrateUp(db))

	p := pricesOf(t, db, "old")
	want := []plans.PriceChange{{BaseFeeMinor: 4900, IncludedUnits: 1000, OverageUnitMinor: 2,
		Tiers: []plans.PriceTier{{UpTo: ptr(int64(100)), UnitMinor: 3}, {UnitMinor: 1}}}}
	if !reflect.DeepEqual(p.PriceHistory, want) {
		t.Errorf("history after the migration %+v, want %+v", p.PriceHistory, want)
	}
	// Its next change is recorded from its month; earlier months keep
	// the migrated prices.
	_, err = plans.NewStore(db).WithClock(clockAt(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))).Update(ctx, id,
		plans.Plan{Name: "old", BaseFeeMinor: 5900})
	testenv.Must(t, err)
	p = pricesOf(t, db, "old")
	if oct, nov := p.In(monthStart(2026, 10)), p.In(monthStart(2026, 11)); oct.BaseFeeMinor != 4900 || len(oct.Tiers) != 2 ||
		nov.BaseFeeMinor != 5900 || len(nov.Tiers) != 0 {
		t.Errorf("October %d (%d tiers), November %d (%d tiers); want 4900 (2), 5900 (0)",
			oct.BaseFeeMinor, len(oct.Tiers), nov.BaseFeeMinor, len(nov.Tiers))
	}
}

// TestPriceHistoryRestartsWithACurrency: a plan moved to another currency
// (allowed only while no month still open bills it) starts its price
// history again from the beginning, in the new currency: a tenant moved
// onto it with an earlier effective_at is never billed the old amounts
// in the new currency.
func TestPriceHistoryRestartsWithACurrency(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	sept := plans.NewStore(db).WithClock(clockAt(time.Date(2026, 9, 15, 0, 0, 0, 0, time.UTC)))
	yen, err := sept.Create(ctx, plans.Plan{Name: "yen", Currency: "USD", BaseFeeMinor: 1000})
	testenv.Must(t, err)
	oct := plans.NewStore(db).WithClock(clockAt(time.Date(2026, 10, 15, 0, 0, 0, 0, time.UTC)))
	_, err = oct.Update(ctx, yen.ID, plans.Plan{Name: "yen", Currency: "USD", BaseFeeMinor: 1200})
	testenv.Must(t, err)
	nov := plans.NewStore(db).WithClock(clockAt(time.Date(2026, 11, 10, 0, 0, 0, 0, time.UTC)))
	_, err = nov.Update(ctx, yen.ID, plans.Plan{Name: "yen", Currency: "JPY", BaseFeeMinor: 150000})
	testenv.Must(t, err)
	p := pricesOf(t, db, "yen")
	if len(p.PriceHistory) != 1 || !p.PriceHistory[0].Month.IsZero() || p.PriceHistory[0].BaseFeeMinor != 150000 {
		t.Errorf("yen's history after the move to JPY: %+v; want one record of 150000 from the beginning", p.PriceHistory)
	}
	for _, m := range []time.Month{time.September, time.October, time.November} {
		if got := p.In(monthStart(2026, m)); got.BaseFeeMinor != 150000 || got.Currency != "JPY" {
			t.Errorf("%s: %d %s, want 150000 JPY", m, got.BaseFeeMinor, got.Currency)
		}
	}
}
