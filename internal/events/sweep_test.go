package events_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestSweepKeepsTheRetention: a sweep deletes the deliveries finished
// longer ago than the retention, with their attempts, and the events
// older than it with no delivery left; an event with a pending delivery
// (to a disabled endpoint) is kept however old, and so is an old event
// replayed recently, until its new delivery is itself old. Thousands of
// rows go in batches.
func TestSweepKeepsTheRetention(t *testing.T) {
	db, acme, _ := setup(t)
	ctx := context.Background()
	clk := newClock()
	start := clk.Now()
	const retention = 30 * 24 * time.Hour
	up := testenv.NewReceiver(t, nil)
	down := testenv.NewReceiver(t, func() int { return 500 })
	ops := events.NewOps(db, clk.Now, allowPrivate)
	live := endpoint(t, ops, "", up.URL, events.EndpointInput{EventTypes: []string{events.KeyRevoked}})
	stuck := endpoint(t, ops, "", down.URL, events.EndpointInput{EventTypes: []string{events.KeyRotated}})
	endpoint(t, ops, "", down.URL, events.EndpointInput{EventTypes: []string{events.TenantSuspended}})
	d := events.NewDeliverer(events.DelivererConfig{DB: db, Now: clk.Now, Guard: allowPrivate})

	delivered := emit(t, db, events.KeyRevoked, acme.ID, start)
	replayed := emit(t, db, events.KeyRevoked, acme.ID, start)
	pending := emit(t, db, events.KeyRotated, acme.ID, start)
	gaveUp := emit(t, db, events.TenantSuspended, acme.ID, start)
	unwanted := emit(t, db, events.TenantResumed, acme.ID, start)
	_, err := ops.Disable(ctx, audit.CLI, "", stuck.Endpoint.ID) // its delivery waits
	testenv.Must(t, err)
	// Thousands more: old events nobody wanted, and old events waiting
	// for the disabled endpoint, interleaved.
	_, err = db.Exec(ctx, `INSERT INTO events (id, type, tenant_id, created_at, data)
		SELECT 'evt_bulk_' || lpad(i::text, 5, '0'), CASE WHEN i % 3 = 0 THEN 'key.rotated' ELSE 'tenant.resumed' END,
			$1::uuid, $2::timestamptz + i * interval '1 second', '{}'
		FROM generate_series(1, 3600) i`, acme.ID, start)
	testenv.Must(t, err)
	_, err = db.Exec(ctx, `INSERT INTO webhook_deliveries (event_id, endpoint_id, created_at, next_attempt_at)
		SELECT id, $1, created_at, created_at FROM events WHERE id LIKE 'evt_bulk_%' AND type = 'key.rotated'`, stuck.Endpoint.ID)
	testenv.Must(t, err)
	drain(t, db, d, clk, start.Add(10*24*time.Hour)) // delivered at once; gaveUp failed after 3 days 15 hours

	recentAt := start.Add(35 * 24 * time.Hour)
	clk.Set(recentAt)
	recent := emit(t, db, events.KeyRevoked, acme.ID, recentAt)
	_, err = ops.Replay(ctx, audit.CLI, "", live.Endpoint.ID, events.ReplayInput{EventID: replayed.ID})
	testenv.Must(t, err)
	drain(t, db, d, clk, recentAt.Add(time.Hour))

	now := start.Add(40 * 24 * time.Hour)
	s, err := events.Sweep(ctx, db, now, retention)
	testenv.Must(t, err)
	if s.Deliveries != 3 || s.Events != 3+2400 {
		t.Errorf("swept %+v, want 3 deliveries (delivered, replayed's first, gaveUp) and %d events", s, 3+2400)
	}
	exists := func(query string, args ...any) bool {
		t.Helper()
		var ok bool
		testenv.Must(t, db.QueryRow(ctx, `SELECT EXISTS (`+query+`)`, args...).Scan(&ok))
		return ok
	}
	for _, c := range []struct {
		name string
		id   string
		kept bool
	}{
		{"delivered 40 days ago", delivered.ID, false},
		{"replayed 5 days ago", replayed.ID, true},
		{"pending for a disabled endpoint", pending.ID, true},
		{"failed 36 days ago", gaveUp.ID, false},
		{"wanted by no endpoint", unwanted.ID, false},
		{"recent", recent.ID, true},
	} {
		if got := exists(`SELECT 1 FROM events WHERE id = $1`, c.id); got != c.kept {
			t.Errorf("event %s: kept %v, want %v", c.name, got, c.kept)
		}
	}
	var deliveries, attempts, bulk, waiting int
	testenv.Must(t, db.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_deliveries), (SELECT count(*) FROM webhook_attempts),
		(SELECT count(*) FROM events WHERE id LIKE 'evt_bulk_%'),
		(SELECT count(*) FROM webhook_deliveries WHERE state = 'pending' AND endpoint_id = $1)`, stuck.Endpoint.ID).
		Scan(&deliveries, &attempts, &bulk, &waiting))
	// Left: the replay's and recent's deliveries (one attempt each), and
	// the disabled endpoint's 1 + 1200 pending ones.
	if deliveries != 2+1201 || attempts != 2 || bulk != 1200 || waiting != 1201 {
		t.Errorf("left %d deliveries, %d attempts, %d bulk events, %d pending; want %d, 2, 1200, 1201",
			deliveries, attempts, bulk, waiting, 2+1201)
	}
	if exists(`SELECT 1 FROM webhook_attempts a LEFT JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.id IS NULL`) {
		t.Error("attempts of deleted deliveries are left")
	}
	s, err = events.Sweep(ctx, db, now, retention)
	testenv.Must(t, err)
	if s != (events.Swept{}) {
		t.Errorf("a second sweep: %+v, want nothing", s)
	}
	// A retention of 0 keeps everything.
	s, err = events.Sweep(ctx, db, now.Add(365*24*time.Hour), 0)
	testenv.Must(t, err)
	if s.Deliveries != 0 || s.Events != 0 {
		t.Errorf("sweep without retention: %+v, want nothing deleted", s)
	}
}

// failingCounts is a database on which the events' count fails (as a
// query over a huge outbox times out) and the rest works.
type failingCounts struct{ postgres.Conn }

func (f failingCounts) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if strings.Contains(sql, "FROM events") {
		return nil, errors.New("canceling statement due to statement timeout")
	}
	return f.Conn.Query(ctx, sql, args...)
}

// TestOutboxGaugesSurviveAFailingQuery: when counting the events fails,
// the pending deliveries' gauges are still reported, and a scrape with
// promhttp.ContinueOnError (as both admin /metrics have) answers them.
func TestOutboxGaugesSurviveAFailingQuery(t *testing.T) {
	db, acme, _ := setup(t)
	clk := newClock()
	ops := events.NewOps(db, clk.Now, allowPrivate)
	endpoint(t, ops, "", "http://127.0.0.1:9/", events.EndpointInput{})
	emit(t, db, events.KeyRevoked, acme.ID, time.Now().Add(-time.Hour))

	reg := prometheus.NewRegistry()
	reg.MustRegister(events.NewMetrics(failingCounts{db}).Collectors()...)
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).
		ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	if rec.Code != 200 {
		t.Fatalf("scrape: %d, want 200:\n%s", rec.Code, body)
	}
	for _, want := range []string{"tollgate_webhook_deliveries_pending 1\n", "tollgate_webhook_oldest_pending_seconds "} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q:\n%s", want, body)
		}
	}
	if _, err := reg.Gather(); err == nil || !strings.Contains(err.Error(), "statement timeout") {
		t.Errorf("gather: %v, want the count's error", err)
	}
}

// TestSweepLeavesAnEventBeingReplayed: an old event with no delivery
// left, whose replay is writing its new delivery when the sweep comes
// (the delivery not committed yet), is passed over, not waited for and
// then deleted with the new delivery; and an event's delete never takes
// a delivery with it.
func TestSweepLeavesAnEventBeingReplayed(t *testing.T) {
	db, acme, _ := setup(t)
	ctx := context.Background()
	clk := newClock()
	start := clk.Now()
	up := testenv.NewReceiver(t, nil)
	ops := events.NewOps(db, clk.Now, allowPrivate)
	live := endpoint(t, ops, "", up.URL, events.EndpointInput{EventTypes: []string{events.KeyRevoked}})
	old := emit(t, db, events.KeyRevoked, acme.ID, start)
	_, err := db.Exec(ctx, `DELETE FROM webhook_deliveries WHERE event_id = $1`, old.ID) // delivered and swept
	testenv.Must(t, err)

	replay, err := db.Begin(ctx)
	testenv.Must(t, err)
	defer replay.Rollback(ctx) //nolint:errcheck
	_, err = replay.Exec(ctx, `INSERT INTO webhook_deliveries (event_id, endpoint_id, created_at, next_attempt_at)
		VALUES ($1, $2, now(), now())`, old.ID, live.Endpoint.ID)
	testenv.Must(t, err)
	swept := make(chan error, 1)
	go func() {
		_, err := events.Sweep(ctx, db, start.Add(60*24*time.Hour), 30*24*time.Hour)
		swept <- err
	}()
	testenv.WaitFor(t, 10*time.Second, "the sweep to finish or wait for the replay", func() bool {
		var waiting bool
		testenv.Must(t, db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting))
		return waiting || len(swept) == 1
	})
	testenv.Must(t, replay.Commit(ctx))
	testenv.Must(t, <-swept)
	var deliveries int
	testenv.Must(t, db.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE event_id = $1`, old.ID).Scan(&deliveries))
	if deliveries != 1 {
		t.Errorf("the replayed event has %d deliveries after the sweep, want its new one", deliveries)
	}

	_, err = db.Exec(ctx, `DELETE FROM events WHERE id = $1`, old.ID)
	if !postgres.Is(err, postgres.ForeignKeyViolation) {
		t.Errorf("deleting an event with a delivery: %v, want a foreign key violation", err)
	}
}
