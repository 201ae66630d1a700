package billing

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
	"github.com/tollgate/tollgate/internal/usage"
)

// TestPriceChangeKeepsEarlierMonths: pro costs 4900 a month (1000 units
// included, 2 per unit beyond) from September; on 29 November its prices
// are raised, twice. October, still open, keeps October's prices on its
// open statement, in its projection and at its close; November takes the
// last change of November. A plan created in November has its first
// prices from the beginning: a tenant moved back onto it in October is
// priced at them, whatever the plan's later changes.
func TestPriceChangeKeepsEarlierMonths(t *testing.T) {
	s, db := newStore(t, "2026-11-29T12:00:00Z")
	ctx := context.Background()
	september, november := fixedNow("2026-09-15T00:00:00Z"), fixedNow("2026-11-29T10:00:00Z")
	pro, err := plans.NewStore(db).WithClock(september).Create(ctx,
		plans.Plan{Name: "pro", BaseFeeMinor: 4900, IncludedUnits: 1000, OverageUnitMinor: 2})
	testenv.Must(t, err)
	acme := fixture.Tenant(t, db, "acme", pro.ID)
	_, key := fixture.Key(t, db, acme.ID, "main")
	_, err = db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-09-01T00:00:00Z'`)
	testenv.Must(t, err)
	_, err = s.Apply(ctx, metering.Batch{Version: 1, ID: "use:1", Rows: []metering.Row{
		row(at(t, "2026-10-05T10:00"), acme.ID, key.ID, "GET /repos", metering.Counts{Allowed: 1500, AllowedUnits: 1500}),
		row(at(t, "2026-11-05T10:00"), acme.ID, key.ID, "GET /repos", metering.Counts{Allowed: 1200, AllowedUnits: 1200}),
	}})
	testenv.Must(t, err)

	// As `admin plans apply` changes a plan: through plans.Ops, twice on
	// 29 November; the last change of the month wins.
	ops := plans.NewOps(db).WithClock(november)
	for _, in := range []plans.PlanInput{
		{Name: "pro", BaseFeeMinor: 5900, IncludedUnits: 1000, OverageUnitMinor: 3},
		{Name: "pro", BaseFeeMinor: 6900, IncludedUnits: 1000, OverageUnitMinor: 3,
			Tiers: []plans.PriceTier{{UpTo: ptr(int64(100)), UnitMinor: 4}, {UnitMinor: 3}}},
	} {
		_, err := ops.Update(ctx, audit.CLI, pro.ID, in)
		testenv.Must(t, err)
	}
	var records int
	testenv.Must(t, db.QueryRow(ctx, `SELECT count(*) FROM plan_prices WHERE plan_id = $1`, pro.ID).Scan(&records))
	if records != 2 {
		t.Errorf("pro has %d price records, want 2 (September's, November's last)", records)
	}
	current, err := plans.NewStore(db).Get(ctx, pro.ID)
	testenv.Must(t, err)
	if current.BaseFeeMinor != 6900 || len(current.Tiers) != 2 {
		t.Errorf("pro now: base %d, tiers %v; want 6900 and the two tiers", current.BaseFeeMinor, current.Tiers)
	}

	oct := october(t)
	nov, err := usage.ParseMonth("2026-11")
	testenv.Must(t, err)
	for _, c := range []struct {
		month               usage.Month
		base, overage, plan int64
	}{
		// 500 over at 2.
		{oct, 4900, 1000, 4900},
		// 200 over: 100 at 4, 100 at 3.
		{nov, 6900, 700, 6900},
	} {
		st, err := s.Statement(ctx, acme.ID, c.month)
		testenv.Must(t, err)
		if st.BaseFeeMinor != c.base || st.OverageMinor != c.overage || st.TotalMinor != c.base+c.overage ||
			len(st.Plans) != 1 || st.Plans[0].PlanBaseFeeMinor != c.plan {
			t.Errorf("%s: base %d, overage %d, total %d, spans %+v; want base %d, overage %d",
				c.month, st.BaseFeeMinor, st.OverageMinor, st.TotalMinor, st.Plans, c.base, c.overage)
		}
	}

	// The projection prices October as its statement does, with the
	// plans as statements load them.
	octSt, err := s.Statement(ctx, acme.ID, oct)
	testenv.Must(t, err)
	b, err := s.loadBilling(ctx, acme.ID)
	testenv.Must(t, err)
	for _, c := range []struct {
		now   string
		minor int64
	}{
		{"2026-11-29T12:00:00Z", octSt.OverageMinor},
		// Half of October gone: 3000 units at its end, 2000 over at 2.
		{"2026-10-16T12:00:00Z", 4000},
	} {
		if pr := Project(octSt, b.plans, mustTime(t, c.now)); pr.ProjectedOverageMinor != c.minor {
			t.Errorf("October projected at %s: overage %d, want %d", c.now, pr.ProjectedOverageMinor, c.minor)
		}
	}

	// A plan created in November, which a tenant is moved back onto in
	// October: priced at its first prices.
	late, err := plans.NewStore(db).WithClock(november).Create(ctx, plans.Plan{Name: "late", BaseFeeMinor: 3100})
	testenv.Must(t, err)
	globex := fixture.Tenant(t, db, "globex", late.ID)
	_, err = db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-10-21T00:00:00Z' WHERE tenant_id = $1`, globex.ID)
	testenv.Must(t, err)
	if st, err := s.Statement(ctx, globex.ID, oct); err != nil || st.BaseFeeMinor != 1100 {
		t.Errorf("globex's October on a plan of November: base %d, %v; want 3100 × 11/31 = 1100", st.BaseFeeMinor, err)
	}
	// A later change of that plan's prices does not reprice October:
	// a plan's first prices are from the beginning.
	_, err = plans.NewStore(db).WithClock(fixedNow("2026-12-02T00:00:00Z")).Update(ctx, late.ID, plans.Plan{Name: "late", BaseFeeMinor: 9300})
	testenv.Must(t, err)
	if st, err := s.Statement(ctx, globex.ID, oct); err != nil || st.BaseFeeMinor != 1100 {
		t.Errorf("globex's October after late's December price: base %d, %v; want still 1100", st.BaseFeeMinor, err)
	}

	res, err := s.CloseMonth(ctx, audit.CLI, oct, nil)
	testenv.Must(t, err)
	if res.Statements != 2 || res.TotalMinor["USD"] != 4900+1000+1100 {
		t.Errorf("close October: %+v; want 2 statements totalling %d", res, 4900+1000+1100)
	}
	frozen, err := s.Statement(ctx, acme.ID, oct)
	testenv.Must(t, err)
	if frozen.Status != "closed" || frozen.TotalMinor != 5900 {
		t.Errorf("closed October: %s, total %d; want closed at 5900", frozen.Status, frozen.TotalMinor)
	}
}

// TestPriceChangeBegunBeforeAClose: a price change whose transaction
// began on 31 October, before midnight, but commits once October has
// closed takes effect from November: October's record stays the one its
// frozen statements were priced with. One that meets a close in flight
// waits for it to commit, and then records from the month after it.
func TestPriceChangeBegunBeforeAClose(t *testing.T) {
	s, db := newStore(t, "2026-11-02T08:00:00Z")
	ctx := context.Background()
	pro, err := plans.NewStore(db).WithClock(fixedNow("2026-09-15T00:00:00Z")).Create(ctx,
		plans.Plan{Name: "pro", BaseFeeMinor: 4900})
	testenv.Must(t, err)
	acme := fixture.Tenant(t, db, "acme", pro.ID)
	_, err = db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-09-01T00:00:00Z'`)
	testenv.Must(t, err)
	_, err = s.CloseMonth(ctx, audit.CLI, october(t), nil)
	testenv.Must(t, err)

	months := func() string {
		t.Helper()
		var got string
		testenv.Must(t, db.QueryRow(ctx, `SELECT string_agg(month::text || '=' || base_fee_minor, ' ' ORDER BY month)
			FROM plan_prices WHERE plan_id = $1`, pro.ID).Scan(&got))
		return got
	}
	_, err = plans.NewOps(db).WithClock(fixedNow("2026-10-31T23:59:59Z")).Update(ctx, audit.CLI, pro.ID,
		plans.PlanInput{Name: "pro", BaseFeeMinor: 5900})
	testenv.Must(t, err)
	if got, want := months(), "-infinity=4900 2026-11-01=5900"; got != want {
		t.Errorf("prices after a change begun in closed October: %s, want %s", got, want)
	}
	if st, err := s.Statement(ctx, acme.ID, october(t)); err != nil || st.TotalMinor != 4900 {
		t.Errorf("October after the change: total %d, %v; want 4900", st.TotalMinor, err)
	}

	// November's close in flight (its row inserted, not committed) when a
	// change begun on 30 November reaches its record.
	tx, err := db.Begin(ctx)
	testenv.Must(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `INSERT INTO usage_closed_months (month, closed_at, statements) VALUES ('2026-11-01', '2026-12-01T08:00:00Z', 0)`)
	testenv.Must(t, err)
	changed := make(chan error, 1)
	go func() {
		_, err := plans.NewOps(db).WithClock(fixedNow("2026-11-30T23:59:59Z")).Update(ctx, audit.CLI, pro.ID,
			plans.PlanInput{Name: "pro", BaseFeeMinor: 6900})
		changed <- err
	}()
	testenv.WaitFor(t, 10*time.Second, "the change to wait for the close in flight", func() bool {
		var waiting bool
		testenv.Must(t, db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE c.relname = 'usage_closed_months' AND NOT l.granted)`).Scan(&waiting))
		if !waiting {
			select {
			case err := <-changed:
				t.Fatalf("the change finished (%v) while November's close was in flight", err)
			default:
			}
		}
		return waiting
	})
	testenv.Must(t, tx.Commit(ctx))
	testenv.Must(t, <-changed)
	if got, want := months(), "-infinity=4900 2026-11-01=5900 2026-12-01=6900"; got != want {
		t.Errorf("prices after a change that met November's close: %s, want %s", got, want)
	}
}
