package quota_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/metering/meteringtest"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/usage"
)

// These tests apply usage batches as the usage worker does (package usage, on
// an injected clock) and read the rate limiting events the apply
// transactions emitted: a key's alerts, and its tenant's as a whole.

// rateClock is a settable clock for usage.StoreConfig.Now.
type rateClock struct{ us atomic.Int64 }

func (c *rateClock) set(t *testing.T, s string) {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, s)
	testenv.Must(t, err)
	c.us.Store(tm.UnixMicro())
}

func (c *rateClock) now() time.Time { return time.UnixMicro(c.us.Load()).UTC() }

var batchSeq atomic.Int64

// applyRows applies rows as one batch under a fresh ID.
func applyRows(t *testing.T, s *usage.Store, rows ...metering.Row) {
	t.Helper()
	b := metering.Batch{Version: 1, ID: fmt.Sprintf("ratelimit:%d", batchSeq.Add(1)), Rows: rows}
	if _, err := s.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// usageStore returns a usage store on db with the clock now and quota's
// ingest, configured by cfg, plugged in, as the usage worker's.
func usageStore(db *pgxpool.Pool, now func() time.Time, cfg quota.IngestConfig) *usage.Store {
	return usage.NewStore(db, usage.StoreConfig{Now: now, Hooks: []usage.Hook{quota.NewIngest(db, cfg)}})
}

// separateWorkers returns n usage worker stores (usageStore) on one
// database, each with its own connection pool as separate processes would
// have; db is one of the pools, for the test's own queries.
func separateWorkers(t *testing.T, n int, now func() time.Time, cfg quota.IngestConfig) (workers []*usage.Store, db *pgxpool.Pool) {
	t.Helper()
	url := testenv.DatabaseURL(t)
	for range n {
		pool, err := postgres.Open(context.Background(), url)
		testenv.Must(t, err)
		t.Cleanup(pool.Close)
		db = pool
		workers = append(workers, usageStore(pool, now, cfg))
	}
	return workers, db
}

// atOnce runs do for every worker, all released at the same moment, and
// waits for them; an error of any fails the test.
func atOnce(t *testing.T, workers []*usage.Store, do func(i int, w *usage.Store) error) {
	t.Helper()
	testenv.AtOnce(len(workers), func(i int) {
		if err := do(i, workers[i]); err != nil {
			t.Error(err)
		}
	})
}

// rateTenant makes a tenant named name on a plan of its own.
func rateTenant(t *testing.T, db *pgxpool.Pool, name string) string {
	t.Helper()
	ctx := context.Background()
	p, err := plans.NewStore(db).Put(ctx, plans.Plan{Name: name, IncludedUnits: 1_000_000})
	testenv.Must(t, err)
	tn, err := tenants.NewStore(db).Create(ctx, name, p.ID)
	testenv.Must(t, err)
	return tn.ID
}

// denied is a row of n checks of key (quota.NoKey: without a key) denied
// in minute by the rules deniedBy.
func denied(t *testing.T, minute, tenantID, key, deniedBy string, n int64) metering.Row {
	r := meteringtest.Row(meteringtest.At(t, minute), tenantID, key, "GET /x", metering.Counts{Denied: n, DeniedUnits: n})
	r.Reason, r.DeniedBy = tollgate.ReasonRateLimited, deniedBy
	if key == quota.NoKey {
		r.KeyID = ""
	}
	return r
}

// rateEvent is one ratelimit.* event as the tests compare them.
type rateEvent struct {
	Type, Scope string
	KeyID       *string `json:"key_id"`
	Denials     int64
	Threshold   int64 `json:"threshold_denials"`
	At          string
	StartedAt   string `json:"started_at"`
}

func (e rateEvent) String() string {
	return fmt.Sprintf("%s %s %d@%s", strings.TrimPrefix(e.Type, "ratelimit."), e.Scope, e.Denials, e.At[11:19])
}

// rateEvents returns tenantID's ratelimit events of scope ("" for every
// scope), in the order they were emitted.
func rateEvents(t *testing.T, db *pgxpool.Pool, tenantID, scope string) []rateEvent {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT type, data FROM events
		WHERE tenant_id = $1 AND type IN ($2, $3) AND ($4 = '' OR data->>'scope' = $4) ORDER BY id`,
		tenantID, quota.EventRateLimitSustained, quota.EventRateLimitResolved, scope)
	testenv.Must(t, err)
	defer rows.Close()
	var out []rateEvent
	for rows.Next() {
		var e rateEvent
		var data []byte
		testenv.Must(t, rows.Scan(&e.Type, &data))
		testenv.Must(t, json.Unmarshal(data, &e))
		out = append(out, e)
	}
	testenv.Must(t, rows.Err())
	return out
}

// TestTenantRateLimitSustainedAndResolved: a tenant none of whose keys is
// denied often enough for its own alert, but all of whose keys (and its
// checks without a key) together are, gets ratelimit.sustained of scope
// tenant once, by the default threshold (more than 1,000 in 5 minutes);
// it resolves once the window holds at most 500, not while it hovers
// between 500 and 1,000, and opens again only after it resolved.
func TestTenantRateLimitSustainedAndResolved(t *testing.T) {
	db := testenv.DB(t)
	var c rateClock
	store := usageStore(db, c.now, quota.IngestConfig{}) // the default alerts
	tenantID := rateTenant(t, db, "swarm")
	key := func(i int) string { return meteringtest.ID(100 + i) }
	// spread is each denials by a rate rule in minute of keys keys, each
	// a key of its own: no key is denied often enough for its own alert.
	used := 0
	spread := func(minute string, keys, each int64) []metering.Row {
		var rows []metering.Row
		for range keys {
			rows = append(rows, denied(t, minute, tenantID, key(used), "hourly", each))
			used++
		}
		return rows
	}
	told := func() string { return fmt.Sprint(rateEvents(t, db, tenantID, "")) }
	steps := []struct {
		now  string
		rows []metering.Row // nil: the idle worker's sweep
		want string
	}{
		// 11 keys × 85 = 935 by a rate rule; 5,000 by the monthly quota
		// alone do not count.
		{"2026-11-22T10:00:20Z", append(spread("2026-11-22T10:00", 11, 85),
			denied(t, "2026-11-22T10:00", tenantID, key(0), plans.QuotaRuleName, 5000)), "[]"},
		// 66 without a key (by a rate rule and the quota): 1,001 > 1,000.
		{"2026-11-22T10:00:40Z", []metering.Row{denied(t, "2026-11-22T10:00", tenantID, quota.NoKey, "hourly,"+plans.QuotaRuleName, 66)},
			"[sustained tenant 1001@10:00:40]"},
		// More: the alert is open already.
		{"2026-11-22T10:01:10Z", spread("2026-11-22T10:01", 2, 5), "[sustained tenant 1001@10:00:40]"},
		{"2026-11-22T10:04:59Z", nil, "[sustained tenant 1001@10:00:40]"},
		// 10:01's 10 are at most half of 1,000: resolved, by the sweep.
		{"2026-11-22T10:05:00Z", nil, "[sustained tenant 1001@10:00:40 resolved tenant 10@10:05:00]"},
		{"2026-11-22T10:05:30Z", nil, "[sustained tenant 1001@10:00:40 resolved tenant 10@10:05:00]"},
		// 600 at 10:06, 450 at 10:07: 1,050.
		{"2026-11-22T10:06:10Z", spread("2026-11-22T10:06", 10, 60), "[sustained tenant 1001@10:00:40 resolved tenant 10@10:05:00]"},
		{"2026-11-22T10:07:10Z", spread("2026-11-22T10:07", 9, 50),
			"[sustained tenant 1001@10:00:40 resolved tenant 10@10:05:00 sustained tenant 1050@10:07:10]"},
		{"2026-11-22T10:08:10Z", spread("2026-11-22T10:08", 4, 25),
			"[sustained tenant 1001@10:00:40 resolved tenant 10@10:05:00 sustained tenant 1050@10:07:10]"},
		// 10:07 and 10:08 left, 550: between 500 and 1,000, no flapping,
		// whether swept or applied.
		{"2026-11-22T10:11:10Z", nil,
			"[sustained tenant 1001@10:00:40 resolved tenant 10@10:05:00 sustained tenant 1050@10:07:10]"},
		{"2026-11-22T10:11:20Z", spread("2026-11-22T10:11", 1, 1),
			"[sustained tenant 1001@10:00:40 resolved tenant 10@10:05:00 sustained tenant 1050@10:07:10]"},
		// 10:08 to 10:12: 101. Resolved by the next applied batch (of
		// allowed checks).
		{"2026-11-22T10:12:10Z", []metering.Row{meteringtest.Row(meteringtest.At(t, "2026-11-22T10:12"), tenantID, key(0), "GET /x",
			metering.Counts{Allowed: 1, AllowedUnits: 1})},
			"[sustained tenant 1001@10:00:40 resolved tenant 10@10:05:00 sustained tenant 1050@10:07:10 resolved tenant 101@10:12:10]"},
	}
	for i, st := range steps {
		c.set(t, st.now)
		if st.rows == nil {
			testenv.Must(t, store.Sweep(context.Background()))
		} else {
			applyRows(t, store, st.rows...)
		}
		if got := told(); got != st.want {
			t.Fatalf("step %d (%s): events %s, want %s", i, st.now, got, st.want)
		}
	}
	evs := rateEvents(t, db, tenantID, quota.RateScopeTenant)
	if e := evs[0]; e.KeyID != nil || e.Threshold != quota.DefaultTenantRateAlertDenials || e.StartedAt != e.At {
		t.Errorf("sustained payload %+v: want key_id null, threshold_denials %d", e, quota.DefaultTenantRateAlertDenials)
	}
	if e := evs[1]; e.KeyID != nil || e.StartedAt != evs[0].At {
		t.Errorf("resolved payload %+v: want key_id null, started_at %s", e, evs[0].At)
	}

	// A key denied more than 100 times opens its own alert; the tenant's,
	// at 150 of 1,000, stays shut.
	if n := len(rateEvents(t, db, tenantID, quota.RateScopeKey)); n != 0 {
		t.Fatalf("%d key events before any key passed 100", n)
	}
	c.set(t, "2026-11-22T11:00:10Z")
	applyRows(t, store, denied(t, "2026-11-22T11:00", tenantID, key(3), "hourly", 150))
	keyEvents := rateEvents(t, db, tenantID, quota.RateScopeKey)
	if len(keyEvents) != 1 || keyEvents[0].KeyID == nil || *keyEvents[0].KeyID != key(3) || keyEvents[0].Threshold != quota.DefaultRateAlertDenials {
		t.Errorf("key events %+v, want one sustained of key %s by 100", keyEvents, key(3))
	}
	if n := len(rateEvents(t, db, tenantID, quota.RateScopeTenant)); n != 4 {
		t.Errorf("%d tenant events after one key's 150 denials, want still 4", n)
	}
	if n := requireDocumented(t, db, tenantID); n < 5 {
		t.Errorf("%d events checked against openapi.yaml, want at least 5", n)
	}
}

// TestTenantRateAlertIsolatedPerTenant: one tenant's denials count for
// its own alert only, whatever keys its rows name.
func TestTenantRateAlertIsolatedPerTenant(t *testing.T) {
	db := testenv.DB(t)
	var c rateClock
	store := usageStore(db, c.now, quota.IngestConfig{RateAlert: quota.RateAlert{TenantDenials: 300}})
	loud, quiet := rateTenant(t, db, "loud"), rateTenant(t, db, "quiet")
	c.set(t, "2026-11-22T10:00:30Z")
	var rows []metering.Row
	for i := range 4 {
		// The same key IDs under both tenants: 4 × 80 each.
		rows = append(rows, denied(t, "2026-11-22T10:00", loud, meteringtest.ID(200+i), "hourly", 80),
			denied(t, "2026-11-22T10:00", quiet, meteringtest.ID(200+i), "hourly", 70))
	}
	applyRows(t, store, rows...)
	if got := fmt.Sprint(rateEvents(t, db, loud, "")); got != "[sustained tenant 320@10:00:30]" {
		t.Errorf("loud (320 > 300): %s", got)
	}
	if got := rateEvents(t, db, quiet, ""); len(got) != 0 {
		t.Errorf("quiet (280 of 300): %v, want none", got)
	}
	// The quiet tenant's calm does not resolve the loud one's alert, nor
	// its later denials open one for the loud tenant again.
	c.set(t, "2026-11-22T10:01:30Z")
	applyRows(t, store, denied(t, "2026-11-22T10:01", quiet, meteringtest.ID(200), "hourly", 30))
	if got := fmt.Sprint(rateEvents(t, db, quiet, "")); got != "[sustained tenant 310@10:01:30]" {
		t.Errorf("quiet (310 > 300): %s", got)
	}
	if got := fmt.Sprint(rateEvents(t, db, loud, "")); got != "[sustained tenant 320@10:00:30]" {
		t.Errorf("loud after quiet's alert: %s", got)
	}
}

// TestTenantRateAlertOnceAcrossWorkers: eight workers, each with its own
// connection pool as separate processes would have, apply batches of
// different keys of one tenant at once: one ratelimit.sustained of the
// tenant, however the batches interleave; and eight sweeping at once
// resolve it once.
func TestTenantRateAlertOnceAcrossWorkers(t *testing.T) {
	ctx := context.Background()
	var c rateClock
	workers, db := separateWorkers(t, 8, c.now, quota.IngestConfig{RateAlert: quota.RateAlert{TenantDenials: 500}})
	tenantID := rateTenant(t, db, "crowd")
	count := func(typ, scope string) int {
		n := 0
		for _, e := range rateEvents(t, db, tenantID, scope) {
			if e.Type == typ {
				n++
			}
		}
		return n
	}
	for round := range 3 {
		// Each worker: 90 denials of a key of its own (under the key's
		// 100); 720 together, over the tenant's 500.
		c.set(t, fmt.Sprintf("2026-11-22T1%d:00:30Z", round))
		atOnce(t, workers, func(i int, w *usage.Store) error {
			b := metering.Batch{Version: 1, ID: fmt.Sprintf("crowd:%d:%d", round, i),
				Rows: []metering.Row{denied(t, fmt.Sprintf("2026-11-22T1%d:00", round), tenantID, meteringtest.ID(300+i), "hourly", 90)}}
			_, err := w.Apply(ctx, b)
			return err
		})
		if n := count(quota.EventRateLimitSustained, quota.RateScopeTenant); n != round+1 {
			t.Fatalf("round %d: %d ratelimit.sustained of the tenant from 8 concurrent batches, want %d", round, n, round+1)
		}
		c.set(t, fmt.Sprintf("2026-11-22T1%d:06:00Z", round))
		atOnce(t, workers, func(int, *usage.Store) error { return workers[0].Sweep(ctx) })
		atOnce(t, workers, func(_ int, w *usage.Store) error { return w.Sweep(ctx) })
		if n := count(quota.EventRateLimitResolved, quota.RateScopeTenant); n != round+1 {
			t.Fatalf("round %d: %d ratelimit.resolved of the tenant from 16 concurrent sweeps, want %d", round, n, round+1)
		}
	}
	if n := len(rateEvents(t, db, tenantID, quota.RateScopeKey)); n != 0 {
		t.Errorf("%d key events, want none: no key passed 100", n)
	}
	var open int
	testenv.Must(t, db.QueryRow(ctx, `SELECT count(*) FROM ratelimit_alerts WHERE resolved_at IS NULL`).Scan(&open))
	if open != 0 {
		t.Errorf("%d alerts open after the sweeps, want 0", open)
	}
}
