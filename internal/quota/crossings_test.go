package quota_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/metering/meteringtest"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/usage"
)

// thresholdEvents returns tenantID's quota.threshold.* events, oldest
// first, as "crossed 500" and "resolved 500 new_month".
func thresholdEvents(t *testing.T, db *pgxpool.Pool, tenantID string) string {
	t.Helper()
	return queryText(t, db, func(row pgx.CollectableRow) (string, error) {
		var typ, units, reason string
		if err := row.Scan(&typ, &units, &reason); err != nil {
			return "", err
		}
		s := typ[len("quota.threshold."):] + " " + units
		if reason != "" {
			s += " " + reason
		}
		return s, nil
	}, `SELECT type, data->>'threshold_units', coalesce(data->>'reason', '')
		FROM events WHERE tenant_id = $1 AND type IN ($2, $3) ORDER BY id`,
		tenantID, quota.EventThresholdCrossed, quota.EventThresholdResolved)
}

// queryText runs query and returns its rows, each made a string by line,
// as fmt.Sprint prints a []string.
func queryText(t *testing.T, db *pgxpool.Pool, line func(pgx.CollectableRow) (string, error), query string, args ...any) string {
	t.Helper()
	rows, err := db.Query(context.Background(), query, args...)
	testenv.Must(t, err)
	out, err := pgx.CollectRows(rows, line)
	testenv.Must(t, err)
	return fmt.Sprint(out)
}

// TestSweepResolvesCrossingsWithoutUsage: a crossed threshold of a tenant
// with no further usage is resolved by the usage worker's sweep, once,
// when the month ends (new_month) and when its threshold moved
// (threshold_changed: the tenant's own settings, or a plan upgrade);
// a tenant whose settings did not change keeps its crossing.
func TestSweepResolvesCrossingsWithoutUsage(t *testing.T) {
	ctx := context.Background()
	var c rateClock
	workers, db := separateWorkers(t, 4, c.now, quota.IngestConfig{})
	ps, ts := plans.NewStore(db), tenants.NewStore(db)
	plan, err := ps.Put(ctx, plans.Plan{Name: "watched", IncludedUnits: 1000, QuotaMode: plans.QuotaOverage})
	testenv.Must(t, err)
	_, err = quota.NewOps(db).SetPlan(ctx, audit.CLI, plan.ID, quota.PlanSettingsInput{Thresholds: []quota.Threshold{{Percent: 50}}})
	testenv.Must(t, err)
	bigger, err := ps.Put(ctx, plans.Plan{Name: "bigger", IncludedUnits: 5000, QuotaMode: plans.QuotaOverage})
	testenv.Must(t, err)
	_, err = quota.NewOps(db).SetPlan(ctx, audit.CLI, bigger.ID, quota.PlanSettingsInput{Thresholds: []quota.Threshold{{Percent: 50}}})
	testenv.Must(t, err)
	names := []string{"steady", "own", "upgraded"}
	ids := map[string]string{}
	for _, name := range names {
		tn, err := ts.Create(ctx, name, plan.ID)
		testenv.Must(t, err)
		ids[name] = tn.ID
	}
	// 600 units each on November 10th: 500 (50 %) crossed, from the rollups.
	c.set(t, "2026-11-10T12:00:30Z")
	var rows []metering.Row
	for i, name := range names {
		rows = append(rows, meteringtest.Row(meteringtest.At(t, "2026-11-10T12:00"), ids[name], meteringtest.ID(400+i), "GET /x",
			metering.Counts{Allowed: 600, AllowedUnits: 600}))
	}
	applyRows(t, workers[0], rows...)
	sweepAll := func(now string) {
		t.Helper()
		c.set(t, now)
		atOnce(t, workers, func(_ int, w *usage.Store) error { return w.Sweep(ctx) })
	}
	want := func(step string, ev map[string]string) {
		t.Helper()
		for _, name := range names {
			if got := thresholdEvents(t, db, ids[name]); got != ev[name] {
				t.Errorf("%s: %s's events %s, want %s", step, name, got, ev[name])
			}
		}
	}
	sweepAll("2026-11-12T00:00:00Z")
	want("swept, nothing changed", map[string]string{"steady": "[crossed 500]", "own": "[crossed 500]", "upgraded": "[crossed 500]"})

	// Without usage: own's threshold moves to 80 % (800, not reached),
	// upgraded moves to a plan including 5,000 (its 50 % is 2,500).
	_, err = quota.NewOps(db).SetTenantThresholds(ctx, audit.CLI, ids["own"], []quota.Threshold{{Percent: 80}})
	testenv.Must(t, err)
	testenv.Must(t, ts.SetPlan(ctx, ids["upgraded"], bigger.ID, time.Now()))
	sweepAll("2026-11-20T00:00:00Z")
	sweepAll("2026-11-21T00:00:00Z")
	want("settings changed", map[string]string{"steady": "[crossed 500]", "own": "[crossed 500 resolved 500 threshold_changed]",
		"upgraded": "[crossed 500 resolved 500 threshold_changed]"})

	// December, with no usage at all: the last crossing open resolves.
	sweepAll("2026-12-01T00:00:30Z")
	sweepAll("2026-12-01T00:01:00Z")
	want("a new month", map[string]string{"steady": "[crossed 500 resolved 500 new_month]",
		"own": "[crossed 500 resolved 500 threshold_changed]", "upgraded": "[crossed 500 resolved 500 threshold_changed]"})
	var open int
	testenv.Must(t, db.QueryRow(ctx, `SELECT count(*) FROM quota_crossings WHERE resolved_at IS NULL`).Scan(&open))
	if open != 0 {
		t.Errorf("%d crossings open after the sweeps, want 0", open)
	}
	for _, name := range names {
		requireDocumented(t, db, ids[name])
	}
}

// TestLateUsageReconcilesItsOwnMonth: usage of October 31st applied by a
// worker already in November (the batch held up, the worker catching
// up) takes October's month to-date count past a threshold: the
// crossing is October's, found from October's rollups, whatever the
// worker's clock says; November's usage then resolves it (new_month) and
// crosses nothing of November's own.
func TestLateUsageReconcilesItsOwnMonth(t *testing.T) {
	ctx := context.Background()
	var c rateClock
	workers, db := separateWorkers(t, 1, c.now, quota.IngestConfig{})
	plan, err := plans.NewStore(db).Put(ctx, plans.Plan{Name: "late", IncludedUnits: 1000})
	testenv.Must(t, err)
	_, err = quota.NewOps(db).SetPlan(ctx, audit.CLI, plan.ID, quota.PlanSettingsInput{Thresholds: []quota.Threshold{{Percent: 50}}})
	testenv.Must(t, err)
	tn, err := tenants.NewStore(db).Create(ctx, "late", plan.ID)
	testenv.Must(t, err)
	use := func(now, minute string, units int64) {
		t.Helper()
		c.set(t, now)
		applyRows(t, workers[0], meteringtest.Row(meteringtest.At(t, minute), tn.ID, meteringtest.ID(500), "GET /x",
			metering.Counts{Allowed: units, AllowedUnits: units}))
	}
	crossed := func() string {
		t.Helper()
		rows, err := db.Query(ctx, `SELECT to_char(month, 'YYYY-MM'), units, source, resolved_at IS NOT NULL
			FROM quota_crossings WHERE tenant_id = $1 ORDER BY month, units`, tn.ID)
		testenv.Must(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var month, source string
			var units int64
			var resolved bool
			testenv.Must(t, rows.Scan(&month, &units, &source, &resolved))
			out = append(out, fmt.Sprintf("%s %d %s resolved=%v", month, units, source, resolved))
		}
		testenv.Must(t, rows.Err())
		return fmt.Sprint(out)
	}

	use("2026-10-31T23:59:40Z", "2026-10-31T23:59", 400)
	use("2026-11-01T00:00:05Z", "2026-10-31T23:59", 200) // late: 600 of October's 1,000
	if got, want := crossed(), "[2026-10 500 rollups resolved=false]"; got != want {
		t.Errorf("after October's late usage: crossings %s, want %s", got, want)
	}
	if got, want := thresholdEvents(t, db, tn.ID), "[crossed 500]"; got != want {
		t.Errorf("after October's late usage: events %s, want %s", got, want)
	}
	var month string
	testenv.Must(t, db.QueryRow(ctx, `SELECT data->>'month' FROM events WHERE tenant_id = $1 AND type = $2`,
		tn.ID, quota.EventThresholdCrossed).Scan(&month))
	if month != "2026-10" {
		t.Errorf("the crossing's event names month %s, want 2026-10", month)
	}

	use("2026-11-01T00:01:05Z", "2026-11-01T00:01", 100)
	if got, want := crossed(), "[2026-10 500 rollups resolved=true]"; got != want {
		t.Errorf("after November's usage: crossings %s, want %s", got, want)
	}
	if got, want := thresholdEvents(t, db, tn.ID), "[crossed 500 resolved 500 new_month]"; got != want {
		t.Errorf("after November's usage: events %s, want %s", got, want)
	}
	requireDocumented(t, db, tn.ID)
}

// monthCrossings returns tenantID's threshold crossings as "2026-10 50
// resolved=false", by month and units.
func monthCrossings(t *testing.T, db *pgxpool.Pool, tenantID string) string {
	t.Helper()
	return queryText(t, db, func(row pgx.CollectableRow) (string, error) {
		var month string
		var units int64
		var resolved bool
		err := row.Scan(&month, &units, &resolved)
		return fmt.Sprintf("%s %d resolved=%v", month, units, resolved), err
	}, `SELECT to_char(month, 'YYYY-MM'), units, resolved_at IS NOT NULL
		FROM quota_crossings WHERE tenant_id = $1 AND kind = 'threshold' ORDER BY month, units`, tenantID)
}

// TestLateUsageCrossesItsMonthsPlan: usage of October applied in
// November is reconciled against the plan the tenant was on at October's
// end, not the one it is on now. Plans big (1,000 included) and small
// (100) both warn at 50 %: 500 and 50. Each tenant moves plan at
// November's start (as a move between currencies must) after 50 or 45
// units on October 31st, then a late batch of 10 October units arrives at
// 00:00:05 on November 1st. A tenant down from big never came near 500 in
// October, so nothing is crossed; one up from small did pass 50 in
// October, which is crossed, in October. A change within October counts
// from its instant: the plan at October's end is the one that was in
// force last. November's own usage (55) is then judged on the current
// plan as ever.
func TestLateUsageCrossesItsMonthsPlan(t *testing.T) {
	ctx := context.Background()
	var c rateClock
	workers, db := separateWorkers(t, 1, c.now, quota.IngestConfig{})
	ps, ts := plans.NewStore(db), tenants.NewStore(db)
	byName := map[string]plans.Plan{}
	for _, p := range []plans.Plan{{Name: "big", IncludedUnits: 1000}, {Name: "small", IncludedUnits: 100}} {
		p, err := ps.Put(ctx, p)
		testenv.Must(t, err)
		_, err = quota.NewOps(db).SetPlan(ctx, audit.CLI, p.ID, quota.PlanSettingsInput{Thresholds: []quota.Threshold{{Percent: 50}}})
		testenv.Must(t, err)
		byName[p.Name] = p
	}
	at := func(s string) time.Time {
		t.Helper()
		tm, err := time.Parse(time.RFC3339, s)
		testenv.Must(t, err)
		return tm
	}
	type move struct {
		plan      string
		effective string
	}
	tests := []struct {
		name          string
		from          string // the plan since September 1st
		october       []move // changes before the first October usage
		october31     int64  // units used on time on October 31st
		november      string // the plan from November 1st
		afterLate     string // crossings after the late batch
		lateEvents    string
		afterNovember string // crossings after November's 55 units
		events        string
	}{
		{name: "down from big", from: "big", october31: 50, november: "small",
			afterLate: "[]", lateEvents: "[]",
			afterNovember: "[2026-11 50 resolved=false]", events: "[crossed 50]"},
		{name: "up from small", from: "small", october31: 45, november: "big",
			afterLate: "[2026-10 50 resolved=false]", lateEvents: "[crossed 50]",
			afterNovember: "[2026-10 50 resolved=true]", events: "[crossed 50 resolved 50 new_month]"},
		{name: "big from October 20th", from: "small", october: []move{{"big", "2026-10-20T00:00:00Z"}}, october31: 50, november: "small",
			afterLate: "[]", lateEvents: "[]",
			afterNovember: "[2026-11 50 resolved=false]", events: "[crossed 50]"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tn, err := ts.Create(ctx, fmt.Sprintf("mover-%d", i), byName[tt.from].ID)
			testenv.Must(t, err)
			_, err = db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-09-01T00:00:00Z' WHERE tenant_id = $1`, tn.ID)
			testenv.Must(t, err)
			for _, m := range tt.october {
				testenv.Must(t, ts.SetPlan(ctx, tn.ID, byName[m.plan].ID, at(m.effective)))
			}
			use := func(now, minute string, units int64) {
				t.Helper()
				c.set(t, now)
				applyRows(t, workers[0], meteringtest.Row(meteringtest.At(t, minute), tn.ID, meteringtest.ID(500+i), "GET /x",
					metering.Counts{Allowed: units, AllowedUnits: units}))
			}
			use("2026-10-31T23:59:40Z", "2026-10-31T23:59", tt.october31)
			if got := monthCrossings(t, db, tn.ID); got != "[]" {
				t.Fatalf("after October's usage on time: crossings %s, want none", got)
			}
			testenv.Must(t, ts.SetPlan(ctx, tn.ID, byName[tt.november].ID, at("2026-11-01T00:00:00Z")))

			use("2026-11-01T00:00:05Z", "2026-10-31T23:59", 10) // late
			if got := monthCrossings(t, db, tn.ID); got != tt.afterLate {
				t.Errorf("after October's late usage: crossings %s, want %s", got, tt.afterLate)
			}
			if got := thresholdEvents(t, db, tn.ID); got != tt.lateEvents {
				t.Errorf("after October's late usage: events %s, want %s", got, tt.lateEvents)
			}

			use("2026-11-01T00:01:05Z", "2026-11-01T00:01", 55)
			if got := monthCrossings(t, db, tn.ID); got != tt.afterNovember {
				t.Errorf("after November's usage: crossings %s, want %s", got, tt.afterNovember)
			}
			if got := thresholdEvents(t, db, tn.ID); got != tt.events {
				t.Errorf("after November's usage: events %s, want %s", got, tt.events)
			}
			requireDocumented(t, db, tn.ID)
		})
	}
}
