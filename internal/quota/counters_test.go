package quota_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/metering/meteringtest"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/usage"
)

// counterRig is a plan with a hard monthly quota of 1,000 units and
// thresholds at 100 and 500 units, and the Redis (store, under prefix)
// its tenants' counters live in.
type counterRig struct {
	db     *pgxpool.Pool
	plan   plans.Plan
	store  *redisstore.Store
	prefix string
}

func newCounterRig(t *testing.T, db *pgxpool.Pool, client *redis.Client, prefix string) *counterRig {
	t.Helper()
	ctx := context.Background()
	plan, err := plans.NewStore(db).Put(ctx, plans.Plan{Name: "counted", IncludedUnits: 1000, QuotaMode: plans.QuotaHard})
	testenv.Must(t, err)
	_, err = quota.NewOps(db).SetPlan(ctx, audit.CLI, plan.ID,
		quota.PlanSettingsInput{Thresholds: []quota.Threshold{{Units: 100}, {Percent: 50}}})
	testenv.Must(t, err)
	return &counterRig{db: db, plan: plan, store: redisstore.New(client), prefix: prefix}
}

// tenant creates a tenant on the rig's plan.
func (r *counterRig) tenant(t *testing.T, name string) string {
	t.Helper()
	tn, err := tenants.NewStore(r.db).Create(context.Background(), name, r.plan.ID)
	testenv.Must(t, err)
	return tn.ID
}

// count admits units on tenantID's monthly quota counter at at (RFC
// 3339), as a check of the plan does, without any usage reaching
// Postgres: the check's batch is lost.
func (r *counterRig) count(t *testing.T, tenantID string, units int64, at string) {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, at)
	testenv.Must(t, err)
	rule, _ := r.plan.QuotaRule()
	out, err := r.store.Check(context.Background(), limiter.Batch{
		Requests: []limiter.Request{{Key: statekey.TenantMonthKey(r.prefix, tenantID, plans.QuotaRuleName), Params: rule.Params()}},
		Cost:     units, NowUS: tm.UnixMicro()})
	testenv.Must(t, err)
	if !out.Admitted {
		t.Fatalf("%d units at %s not admitted: %+v", units, at, out.Results)
	}
}

// sources returns tenantID's threshold crossings as units → source.
func sources(t *testing.T, db *pgxpool.Pool, tenantID string) string {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT units, source FROM quota_crossings
		WHERE tenant_id = $1 AND kind = 'threshold' ORDER BY month, units`, tenantID)
	testenv.Must(t, err)
	defer rows.Close()
	got := map[int64]string{}
	for rows.Next() {
		var units int64
		var source string
		testenv.Must(t, rows.Scan(&units, &source))
		got[units] = source
	}
	testenv.Must(t, rows.Err())
	return fmt.Sprint(got)
}

// TestSweepRecordsCrossingsFromTheCounter: a tenant whose counter went
// past a threshold while the rollups did not (its check's batch was lost)
// gets the crossing from the usage worker's sweep, once however many
// workers sweep and however often (source counter); a counter of an
// earlier month, one under every threshold, and one whose crossing the
// check's batch brought record nothing.
func TestSweepRecordsCrossingsFromTheCounter(t *testing.T) {
	ctx := context.Background()
	client, prefix := testenv.Redis(t)
	var c rateClock
	c.set(t, "2026-11-10T12:00:30Z")
	workers, db := separateWorkers(t, 3, c.now, quota.IngestConfig{Counters: redisstore.New(client), KeyPrefix: prefix})
	r := newCounterRig(t, db, client, prefix)
	// The pages of the sweep hold two tenants each.
	quota.SetCounterPage(t, 2)

	ids := map[string]string{}
	names := []string{"lost", "old", "checked", "under", "idle"}
	for _, name := range names {
		ids[name] = r.tenant(t, name)
	}
	// 90 units of each but idle's reached the rollups.
	var rows []metering.Row
	for i, name := range names[:4] {
		rows = append(rows, meteringtest.Row(meteringtest.At(t, "2026-11-10T11:00"), ids[name], meteringtest.ID(700+i), "GET /x",
			metering.Counts{Allowed: 90, AllowedUnits: 90}))
	}
	applyRows(t, workers[0], rows...)
	// lost: 30 more units, whose batch (crossing 100) was lost.
	r.count(t, ids["lost"], 120, "2026-11-10T11:30:00Z")
	// old: 700 units counted in October; November's counter is missing.
	r.count(t, ids["old"], 700, "2026-10-20T08:00:00Z")
	// checked: the check's batch brought the crossing of 100.
	r.count(t, ids["checked"], 150, "2026-11-10T11:40:00Z")
	b := metering.Batch{Version: 1, ID: "counter:checked", Rows: []metering.Row{meteringtest.Row(meteringtest.At(t, "2026-11-10T11:40"),
		ids["checked"], meteringtest.ID(710), "GET /x", metering.Counts{Allowed: 60, AllowedUnits: 60})},
		Crossings: []metering.Crossing{{TenantID: ids["checked"], Units: 100, AtUS: meteringtest.At(t, "2026-11-10T11:40") * 1_000_000}}}
	_, err := workers[0].Apply(ctx, b)
	testenv.Must(t, err)
	// under: its 90 units, in the rollups and the counter alike.
	r.count(t, ids["under"], 90, "2026-11-10T11:00:00Z")

	for range 2 {
		atOnce(t, workers, func(_ int, w *usage.Store) error { return w.Sweep(ctx) })
	}
	want := map[string][2]string{
		"lost":    {"[crossed 100]", "map[100:counter]"},
		"old":     {"[]", "map[]"},
		"checked": {"[crossed 100]", "map[100:check]"},
		"under":   {"[]", "map[]"},
		"idle":    {"[]", "map[]"},
	}
	for _, name := range names {
		if got := thresholdEvents(t, db, ids[name]); got != want[name][0] {
			t.Errorf("%s: events %s, want %s", name, got, want[name][0])
		}
		if got := sources(t, db, ids[name]); got != want[name][1] {
			t.Errorf("%s: crossings %s, want %s", name, got, want[name][1])
		}
		requireDocumented(t, db, ids[name])
	}

	// The counter goes on to 520: 500 is recorded, 100 not again.
	r.count(t, ids["lost"], 400, "2026-11-10T12:00:00Z")
	atOnce(t, workers, func(_ int, w *usage.Store) error { return w.Sweep(ctx) })
	if got, want := thresholdEvents(t, db, ids["lost"]), "[crossed 100 crossed 500]"; got != want {
		t.Errorf("lost, at 520: events %s, want %s", got, want)
	}
	if got, want := sources(t, db, ids["lost"]), "map[100:counter 500:counter]"; got != want {
		t.Errorf("lost, at 520: crossings %s, want %s", got, want)
	}
}

// TestSweepGoesOnWithoutTheCounters: while the counters cannot be read
// (Redis down), the sweep returns the error after resolving what it
// resolves without them; once they can, the crossing is recorded.
func TestSweepGoesOnWithoutTheCounters(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	client, prefix := testenv.Redis(t)
	r := newCounterRig(t, db, client, prefix)
	var c rateClock
	down := redis.NewClient(&redis.Options{Addr: testenv.FreeAddr(t), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { down.Close() })
	broken := usageStore(db, c.now, quota.IngestConfig{Counters: redisstore.New(down), KeyPrefix: r.prefix})
	working := usageStore(db, c.now, quota.IngestConfig{Counters: r.store, KeyPrefix: r.prefix})
	tenantID := r.tenant(t, "watched")

	// October: 150 units, crossing 100 from the rollups.
	c.set(t, "2026-10-20T08:00:30Z")
	applyRows(t, broken, meteringtest.Row(meteringtest.At(t, "2026-10-20T08:00"), tenantID, meteringtest.ID(720), "GET /x",
		metering.Counts{Allowed: 150, AllowedUnits: 150}))
	// November: 110 units counted, none of them in the rollups.
	r.count(t, tenantID, 110, "2026-11-02T09:00:00Z")
	c.set(t, "2026-11-02T09:00:30Z")
	if err := broken.Sweep(ctx); err == nil {
		t.Error("sweep with Redis down: no error")
	}
	if got, want := thresholdEvents(t, db, tenantID), "[crossed 100 resolved 100 new_month]"; got != want {
		t.Errorf("with Redis down: events %s, want %s", got, want)
	}
	testenv.Must(t, working.Sweep(ctx))
	if got, want := thresholdEvents(t, db, tenantID), "[crossed 100 resolved 100 new_month crossed 100]"; got != want {
		t.Errorf("with Redis back: events %s, want %s", got, want)
	}
	var source string
	testenv.Must(t, db.QueryRow(ctx, `SELECT source FROM quota_crossings WHERE tenant_id = $1 AND month = '2026-11-01'`,
		tenantID).Scan(&source))
	if source != quota.SourceCounter {
		t.Errorf("November's crossing from %q, want %q", source, quota.SourceCounter)
	}
	requireDocumented(t, db, tenantID)
}

// TestSweepCountersGoesOnWhereItStopped: a sweep out of time stops after
// a page and says where the next goes on; the next pass starts over.
func TestSweepCountersGoesOnWhereItStopped(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	client, prefix := testenv.Redis(t)
	r := newCounterRig(t, db, client, prefix)
	quota.SetCounterPage(t, 2)
	var ids []string
	for i := range 5 {
		id := r.tenant(t, fmt.Sprintf("t%d", i))
		r.count(t, id, 120, "2026-11-10T11:30:00Z")
		ids = append(ids, id)
	}
	recorded := func() int {
		var n int
		testenv.Must(t, db.QueryRow(ctx, `SELECT count(*) FROM quota_crossings WHERE tenant_id = ANY($1::uuid[])`, ids).Scan(&n))
		return n
	}
	now := time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)
	from, calls := "", 0
	for {
		next, err := quota.SweepCounters(ctx, db, r.store, prefix, now, from, 0)
		testenv.Must(t, err)
		calls++
		if got, want := recorded(), min(2*calls, 5); got != want {
			t.Fatalf("after %d sweeps of one page: %d crossings, want %d", calls, got, want)
		}
		if next == "" {
			break
		}
		from = next
	}
	if calls != 3 {
		t.Errorf("%d sweeps for 5 tenants in pages of 2, want 3", calls)
	}
	// With time to spare one sweep makes the whole pass.
	quota.SetCounterPage(t, 1)
	if next, err := quota.SweepCounters(ctx, db, r.store, prefix, now, "", time.Minute); err != nil || next != "" {
		t.Errorf("a sweep with time: next %q, %v; want the pass done", next, err)
	}
}
