package billing

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/usage"
)

// These tests apply usage batches as the usage worker does, on an
// injected clock, and read the events the apply transactions emitted.

// clock is a settable clock for usage.StoreConfig.Now.
type clock struct{ us atomic.Int64 }

func (c *clock) set(t *testing.T, s string) { c.us.Store(mustTime(t, s).UnixMicro()) }
func (c *clock) now() time.Time             { return time.UnixMicro(c.us.Load()).UTC() }

// applier applies one-row batches of a tenant's usage under fresh IDs.
type applier struct {
	t     *testing.T
	store *usage.Store
	seq   atomic.Int64
}

func newApplier(t *testing.T, db *pgxpool.Pool, c *clock) *applier {
	return &applier{t: t, store: usage.NewStore(db, usage.StoreConfig{Now: c.now,
		Hooks: []usage.Hook{quota.NewIngest(db, quota.IngestConfig{})}})}
}

// apply applies rows as one batch.
func (a *applier) apply(rows ...metering.Row) {
	a.t.Helper()
	b := metering.Batch{Version: 1, ID: fmt.Sprintf("notices:%d", a.seq.Add(1)), Rows: rows}
	if _, err := a.store.Apply(context.Background(), b); err != nil {
		a.t.Fatal(err)
	}
}

// applyAtOnce applies eight batches of r, each under its own ID, from
// eight workers (stores) at once.
func applyAtOnce(t *testing.T, db *pgxpool.Pool, c *clock, name string, r metering.Row) {
	t.Helper()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := metering.Batch{Version: 1, ID: fmt.Sprintf("%s:%d", name, w), Rows: []metering.Row{r}}
			if _, err := newApplier(t, db, c).store.Apply(context.Background(), b); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// eventsOf returns the data of tenantID's events of typ, oldest first.
func eventsOf(t *testing.T, db *pgxpool.Pool, tenantID, typ string) []map[string]any {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT data FROM events WHERE tenant_id = $1 AND type = $2
		ORDER BY created_at, id`, tenantID, typ)
	testenv.Must(t, err)
	defer rows.Close()
	var out []map[string]any
	for rows.Next() {
		var raw []byte
		testenv.Must(t, rows.Scan(&raw))
		var m map[string]any
		testenv.Must(t, json.Unmarshal(raw, &m))
		out = append(out, m)
	}
	testenv.Must(t, rows.Err())
	return out
}

// days lists the events' field as strings.
func fieldOf(evs []map[string]any, field string) []string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprint(e[field]))
	}
	return out
}

// meteredTenant makes an overage plan including 3,000 units at 2 minor
// units each beyond, with a spend cap of 1,000 (500 units more), and a
// tenant on it since the month of since began.
func meteredTenant(t *testing.T, s *stores, db *pgxpool.Pool, name, since string) string {
	t.Helper()
	ctx := context.Background()
	p, err := plans.NewStore(db).Put(ctx, plans.Plan{Name: name, IncludedUnits: 3000, OverageUnitMinor: 2,
		QuotaMode: plans.QuotaOverage})
	testenv.Must(t, err)
	capMinor := int64(1000)
	_, err = quota.NewOps(db).SetPlan(ctx, audit.CLI, p.ID, quota.PlanSettingsInput{SpendCapDefaultMinor: &capMinor})
	testenv.Must(t, err)
	tn, err := s.tenants.Create(ctx, name, p.ID)
	testenv.Must(t, err)
	_, err = db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = $2 WHERE tenant_id = $1`, tn.ID, mustTime(t, since))
	testenv.Must(t, err)
	return tn.ID
}

func TestProjectReach(t *testing.T) {
	start := mustTime(t, "2026-11-01T00:00:00Z")
	end := start.AddDate(0, 1, 0)
	for _, c := range []struct {
		now         string
		used, limit int64
		want        string // "" for none
	}{
		{"2026-11-11T00:00:00Z", 1000, 2000, "2026-11-21T00:00:00Z"},
		{"2026-11-11T00:00:00Z", 1000, 3000, ""}, // exactly the month's end: not before it
		{"2026-11-11T00:00:00Z", 1001, 3000, "2026-11-30T23:16:50.58941Z"},
		{"2026-11-11T00:00:00Z", 3000, 3000, ""}, // already there: the limit itself reports
		{"2026-11-11T00:00:00Z", 0, 3000, ""},    // no pace
		{"2026-11-01T23:59:59Z", 2900, 3000, ""}, // under ForecastMinElapsed
		{"2026-11-11T00:00:00Z", 1, 1 << 62, ""}, // far beyond, no overflow
		{"2026-11-15T00:00:00Z", 1 << 61, 1<<62 - 1, "2026-11-28T23:59:59.999999Z"},
	} {
		got, ok := quota.ProjectReach(start, end, mustTime(t, c.now), c.used, c.limit)
		s := ""
		if ok {
			s = got.UTC().Format(time.RFC3339Nano)
		}
		if s != c.want {
			t.Errorf("%s, %d of %d: reach %q, want %q", c.now, c.used, c.limit, s, c.want)
		}
	}
}

func TestForecastExceededOnceAndWhenEarlier(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	var c clock
	a := newApplier(t, db, &c)
	tenantID := meteredTenant(t, s, db, "pacer", "2026-11-01T00:00:00Z")
	units := func(minute string, n int64) metering.Row {
		return row(at(t, minute), tenantID, kA, "GET /x", metering.Counts{Allowed: n, AllowedUnits: n})
	}
	forecasts := func() []map[string]any { return eventsOf(t, db, tenantID, quota.EventForecastExceeded) }

	days := func(limit string) string {
		var out []string
		for _, e := range forecasts() {
			if e["limit"] == limit {
				out = append(out, fmt.Sprint(e["projected_day"]))
			}
		}
		return fmt.Sprint(out)
	}
	steps := []struct {
		now, minute        string
		units              int64
		included, spendCap string // projected days told so far
	}{
		// A first day's burst is no pace yet.
		{"2026-11-01T12:00:00Z", "2026-11-01T11:00", 1000, "[]", "[]"},
		// 1,010 units in 10 days: 3,000 on Nov 30; 3,500 (the cap's
		// units) not this month.
		{"2026-11-11T00:00:00Z", "2026-11-10T23:00", 10, "[2026-11-30]", "[]"},
		// The same day again: nothing new.
		{"2026-11-11T00:00:00Z", "2026-11-10T23:00", 1, "[2026-11-30]", "[]"},
		// 1,501 in 11 days: 3,000 on Nov 22, 3,500 on Nov 26.
		{"2026-11-12T00:00:00Z", "2026-11-11T23:00", 490, "[2026-11-30 2026-11-22]", "[2026-11-26]"},
		// Slower (1,502 in 19 days): no forecast; then 2,102, on Nov 28:
		// later than told, so nothing.
		{"2026-11-20T00:00:00Z", "2026-11-19T23:00", 1, "[2026-11-30 2026-11-22]", "[2026-11-26]"},
		{"2026-11-20T00:00:00Z", "2026-11-19T23:00", 600, "[2026-11-30 2026-11-22]", "[2026-11-26]"},
		// 2,802 in 20 days: 3,000 on Nov 22 (as told), 3,500 on Nov 25
		// (a day earlier).
		{"2026-11-21T00:00:00Z", "2026-11-20T23:00", 700, "[2026-11-30 2026-11-22]", "[2026-11-26 2026-11-25]"},
		// A new month counts from zero: 2,000 in 2 days reach both on
		// Dec 4.
		{"2026-12-03T00:00:00Z", "2026-12-01T10:00", 2000, "[2026-11-30 2026-11-22 2026-12-04]", "[2026-11-26 2026-11-25 2026-12-04]"},
	}
	for i, st := range steps {
		c.set(t, st.now)
		a.apply(units(st.minute, st.units))
		if got, got2 := days(quota.LimitIncluded), days(quota.LimitSpendCap); got != st.included || got2 != st.spendCap {
			t.Fatalf("step %d (%s, +%d): told %s and %s, want %s and %s", i, st.now, st.units, got, got2, st.included, st.spendCap)
		}
	}
	ev := forecasts()[2] // the first spend cap forecast
	if ev["limit"] != quota.LimitSpendCap || ev["limit_units"] != float64(3500) || ev["spend_cap_minor"] != float64(1000) ||
		ev["used_units"] != float64(1501) || ev["month"] != "2026-11" || ev["projected_at"] != "2026-11-26T15:35:22.584943Z" {
		t.Errorf("spend cap forecast payload %v", ev)
	}
}

// TestForecastExceededOnceWithConcurrentWorkers applies batches that each
// project the same day from eight goroutines at once (workers): one event.
func TestForecastExceededOnceWithConcurrentWorkers(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	var c clock
	tenantID := meteredTenant(t, s, db, "crowd", "2026-11-01T00:00:00Z")
	c.set(t, "2026-11-01T12:00:00Z")
	newApplier(t, db, &c).apply(row(at(t, "2026-11-01T11:00"), tenantID, kA, "GET /x", metering.Counts{Allowed: 1, AllowedUnits: 1000}))
	c.set(t, "2026-11-11T00:00:00Z")
	applyAtOnce(t, db, &c, "crowd", row(at(t, "2026-11-10T23:00"), tenantID, kA, "GET /x", metering.Counts{Allowed: 1, AllowedUnits: 1}))
	if got := fieldOf(eventsOf(t, db, tenantID, quota.EventForecastExceeded), "projected_day"); fmt.Sprint(got) != "[2026-11-30]" {
		t.Errorf("forecasts from 8 concurrent workers: %v, want one for 2026-11-30", got)
	}
}

func TestRateLimitSustainedAndResolved(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	var c clock
	a := newApplier(t, db, &c) // the default alert: more than 100 denials in 5 minutes
	tenantID := meteredTenant(t, s, db, "hammered", "2026-11-01T00:00:00Z")
	denied := func(minute, by string, n int64) metering.Row {
		r := row(at(t, minute), tenantID, kA, "GET /x", metering.Counts{Denied: n, DeniedUnits: n})
		r.Reason, r.DeniedBy = tollgate.ReasonRateLimited, by
		return r
	}
	told := func() string {
		var out []string
		for _, typ := range []string{quota.EventRateLimitSustained, quota.EventRateLimitResolved} {
			for _, e := range eventsOf(t, db, tenantID, typ) {
				out = append(out, fmt.Sprintf("%s %v@%v", typ[len("ratelimit."):], e["denials"], e["at"]))
			}
		}
		return fmt.Sprint(out)
	}
	sweep := func() { testenv.Must(t, a.store.Sweep(context.Background())) }
	steps := []struct {
		now  string
		rows []metering.Row // nil: the idle worker's sweep
		want string
	}{
		// 60 by a rate rule; 500 by the monthly quota alone do not count.
		{"2026-11-22T10:00:30Z", []metering.Row{denied("2026-11-22T10:00", "hourly", 60),
			denied("2026-11-22T10:00", plans.QuotaRuleName, 500)}, "[]"},
		// 41 more (by a rate rule and the quota): 101 > 100.
		{"2026-11-22T10:00:40Z", []metering.Row{denied("2026-11-22T10:00", "hourly,"+plans.QuotaRuleName, 41)},
			"[sustained 101@2026-11-22T10:00:40Z]"},
		{"2026-11-22T10:01:10Z", []metering.Row{denied("2026-11-22T10:01", "hourly", 50)},
			"[sustained 101@2026-11-22T10:00:40Z]"},
		// Still within 5 minutes of 10:00.
		{"2026-11-22T10:04:59Z", nil, "[sustained 101@2026-11-22T10:00:40Z]"},
		// 10:01's 50 are at most half of 100: resolved, by the sweep.
		{"2026-11-22T10:05:00Z", nil, "[sustained 101@2026-11-22T10:00:40Z resolved 50@2026-11-22T10:05:00Z]"},
		{"2026-11-22T10:05:30Z", nil, "[sustained 101@2026-11-22T10:00:40Z resolved 50@2026-11-22T10:05:00Z]"},
		// Again: 101 at 10:06, 60 at 10:07.
		{"2026-11-22T10:07:10Z", []metering.Row{denied("2026-11-22T10:06", "hourly", 101), denied("2026-11-22T10:07", "hourly", 60)},
			"[sustained 101@2026-11-22T10:00:40Z sustained 161@2026-11-22T10:07:10Z resolved 50@2026-11-22T10:05:00Z]"},
		// 60 left in the window: between 50 and 100, no flapping.
		{"2026-11-22T10:11:10Z", nil,
			"[sustained 101@2026-11-22T10:00:40Z sustained 161@2026-11-22T10:07:10Z resolved 50@2026-11-22T10:05:00Z]"},
		// Resolved by the next applied batch (of allowed checks).
		{"2026-11-22T10:12:10Z", []metering.Row{row(at(t, "2026-11-22T10:12"), tenantID, kA, "GET /x", metering.Counts{Allowed: 1, AllowedUnits: 1})},
			"[sustained 101@2026-11-22T10:00:40Z sustained 161@2026-11-22T10:07:10Z resolved 50@2026-11-22T10:05:00Z resolved 0@2026-11-22T10:12:10Z]"},
	}
	for i, st := range steps {
		c.set(t, st.now)
		if st.rows == nil {
			sweep()
		} else {
			a.apply(st.rows...)
		}
		if got := told(); got != st.want {
			t.Fatalf("step %d (%s): events %s, want %s", i, st.now, got, st.want)
		}
	}
	ev := eventsOf(t, db, tenantID, quota.EventRateLimitSustained)[0]
	if ev["key_id"] != kA || ev["window_seconds"] != float64(300) || ev["threshold_denials"] != float64(100) {
		t.Errorf("sustained payload %v", ev)
	}

	// Eight workers applying 30 denials each at once: one alert.
	c.set(t, "2026-11-22T11:00:10Z")
	r := denied("2026-11-22T11:00", "hourly", 30)
	r.KeyID = kB
	applyAtOnce(t, db, &c, "hammer", r)
	var n int
	testenv.Must(t, db.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE type = $1 AND data->>'key_id' = $2`,
		quota.EventRateLimitSustained, kB).Scan(&n))
	if n != 1 {
		t.Errorf("%d ratelimit.sustained events for 8 concurrent batches, want 1", n)
	}
}

// idleConsumer has nothing to fetch: its first Fetch says so on fetched,
// and every Fetch waits for ctx.
type idleConsumer struct{ fetched chan struct{} }

func (c idleConsumer) Fetch(ctx context.Context, _ int) ([]usage.Message, error) {
	select {
	case c.fetched <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, nil
}

func (idleConsumer) Ack(context.Context, ...string) error { return nil }

// TestIdleWorkerResolvesRateAlerts: a worker with no batches to apply
// still resolves an alert whose key's callers stopped, before it first
// waits for batches.
func TestIdleWorkerResolvesRateAlerts(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	var c clock
	a := newApplier(t, db, &c)
	tenantID := meteredTenant(t, s, db, "stopped", "2026-11-01T00:00:00Z")
	r := row(at(t, "2026-11-22T10:00"), tenantID, kA, "GET /x", metering.Counts{Denied: 150, DeniedUnits: 150})
	r.Reason, r.DeniedBy = tollgate.ReasonRateLimited, "hourly"
	c.set(t, "2026-11-22T10:00:30Z")
	a.apply(r)
	if n := len(eventsOf(t, db, tenantID, quota.EventRateLimitSustained)); n != 1 {
		t.Fatalf("%d ratelimit.sustained events, want 1", n)
	}
	c.set(t, "2026-11-22T10:06:00Z")
	ctx, cancel := context.WithCancel(context.Background())
	consumer := idleConsumer{fetched: make(chan struct{}, 1)}
	done := make(chan error, 1)
	go func() { done <- (&usage.Worker{Consumer: consumer, Store: a.store}).Run(ctx) }()
	<-consumer.fetched
	cancel()
	testenv.Must(t, <-done)
	if got := eventsOf(t, db, tenantID, quota.EventRateLimitResolved); len(got) != 1 || got[0]["denials"] != float64(0) {
		t.Errorf("ratelimit.resolved events %v, want one with no denials left in the window", got)
	}
}
