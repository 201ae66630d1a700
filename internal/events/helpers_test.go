package events_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// newClock returns a test's clock, moved by hand.
func newClock() *testenv.Clock { return testenv.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) }

// setup is a database with two tenants.
func setup(t *testing.T) (db *pgxpool.Pool, acme, globex tenants.Tenant) {
	t.Helper()
	db = testenv.DB(t)
	ctx := context.Background()
	p, err := plans.NewStore(db).Create(ctx, plans.Plan{Name: "basic"})
	testenv.Must(t, err)
	acme, err = tenants.NewStore(db).Create(ctx, "acme", p.ID)
	testenv.Must(t, err)
	globex, err = tenants.NewStore(db).Create(ctx, "globex", p.ID)
	testenv.Must(t, err)
	return db, acme, globex
}

// allowPrivate lets endpoints point to the tests' loopback receivers.
var allowPrivate = events.Guard{AllowPrivate: true}

// endpoint makes an endpoint to url owned by owner ("" an operator).
func endpoint(t *testing.T, ops *events.Ops, owner, url string, in events.EndpointInput) events.IssuedEndpoint {
	t.Helper()
	in.URL = url
	e, err := ops.CreateEndpoint(context.Background(), audit.CLI, owner, in)
	testenv.Must(t, err)
	return e
}

// emit commits one event of type typ for tenant in its own transaction.
func emit(t testing.TB, db *pgxpool.Pool, typ, tenant string, at time.Time) events.Event {
	t.Helper()
	var ev events.Event
	err := postgres.Tx(context.Background(), db, func(tx pgx.Tx) error {
		var err error
		ev, err = events.Emit(context.Background(), tx, events.Event{Type: typ, TenantID: tenant, CreatedAt: at,
			Data: map[string]any{"n": 1}})
		return err
	})
	testenv.Must(t, err)
	return ev
}

// drain runs deliverer d, moving clk to each next due time, until no
// delivery is pending or clk passes until.
func drain(t *testing.T, db *pgxpool.Pool, d *events.Deliverer, clk *testenv.Clock, until time.Time) {
	t.Helper()
	ctx := context.Background()
	for clk.Now().Before(until) {
		for {
			n, err := d.DeliverDue(ctx)
			testenv.Must(t, err)
			if n == 0 {
				break
			}
		}
		var next *time.Time
		testenv.Must(t, db.QueryRow(ctx, `SELECT min(d.next_attempt_at) FROM webhook_deliveries d
			JOIN webhook_endpoints w ON w.id = d.endpoint_id WHERE d.state = 'pending' AND w.disabled_at IS NULL`).Scan(&next))
		if next == nil || !next.After(clk.Now()) {
			return // nothing pending, or only leased deliveries
		}
		clk.Set(*next)
	}
}

// eventOf decodes a request's body.
func eventOf(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	testenv.Must(t, json.Unmarshal(body, &m))
	return m
}

// httpHandlerFunc wraps next: around runs for each request with its
// webhook-id and a function serving it with next.
func httpHandlerFunc(around func(id string, serve func()), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		around(r.Header.Get("webhook-id"), func() { next.ServeHTTP(w, r) })
	})
}
