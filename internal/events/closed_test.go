package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/metering/meteringtest"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
	"github.com/tollgate/tollgate/internal/usage"
)

// TestStatementClosedOncePerTenant: closing a month emits one
// statement.closed per tenant with its frozen totals, delivered to the
// endpoints that want it; closing it again emits nothing.
func TestStatementClosedOncePerTenant(t *testing.T) {
	db := testenv.DB(t)
	ctx := context.Background()
	p := fixture.Plan(t, db, plans.Plan{Name: "metered", Currency: "EUR", BaseFeeMinor: 1000, IncludedUnits: 100,
		OverageUnitMinor: 2})
	acme, globex := fixture.Tenant(t, db, "acme", p.ID), fixture.Tenant(t, db, "globex", p.ID)
	_, err := db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-08-01T00:00:00Z'`)
	testenv.Must(t, err)
	// 150 units in September: 50 beyond the included 100, at 2 each.
	applier := usage.NewStore(db, usage.StoreConfig{Now: meteringtest.FixedNow("2026-09-20T12:00:00Z")})
	_, err = applier.Apply(ctx, metering.Batch{Version: 1, ID: "september", Rows: []metering.Row{
		meteringtest.Row(meteringtest.At(t, "2026-09-20T11:00"), acme.ID, meteringtest.ID(7), "GET /x",
			metering.Counts{Allowed: 150, AllowedUnits: 150})}})
	testenv.Must(t, err)
	rcv := testenv.NewReceiver(t, nil)
	clk := newClock()
	clk.Set(time.Now()) // the events are made at the database's time
	endpoint(t, events.NewOps(db, clk.Now, allowPrivate), "", rcv.URL, events.EndpointInput{EventTypes: []string{events.StatementClosed}})

	september, err := usage.ParseMonth("2026-09")
	testenv.Must(t, err)
	closer := billing.NewOps(db, meteringtest.FixedNow("2026-10-02T00:00:00Z"))
	for range 2 { // the second close finds the month closed
		_, err := closer.CloseMonth(ctx, audit.CLI, september, nil)
		testenv.Must(t, err)
	}
	drain(t, db, events.NewDeliverer(events.DelivererConfig{DB: db, Guard: allowPrivate, Now: clk.Now}), clk, clk.Now().Add(time.Hour))
	got := map[string]map[string]any{}
	for _, r := range rcv.Requests() {
		ev := eventOf(t, r.Body)
		if ev["type"] != events.StatementClosed {
			t.Errorf("received %v", ev["type"])
			continue
		}
		tenantID, _ := ev["tenant_id"].(string)
		if got[tenantID] != nil {
			t.Errorf("statement.closed of %s received twice", tenantID)
		}
		got[tenantID], _ = ev["data"].(map[string]any)
	}
	want := map[string]struct {
		units, overage, total float64
	}{acme.ID: {150, 100, 1100}, globex.ID: {0, 0, 1000}}
	if len(got) != len(want) {
		t.Fatalf("statement.closed for %d tenants, want %d: %v", len(got), len(want), got)
	}
	for id, w := range want {
		d := got[id]
		u, _ := d["usage"].(map[string]any)
		if d["month"] != "2026-09" || d["currency"] != "EUR" || d["base_fee_minor"] != float64(1000) ||
			d["overage_minor"] != w.overage || d["total_minor"] != w.total || u["allowed_units"] != w.units || d["closed_at"] == nil {
			t.Errorf("statement.closed of %s: %v, want %v units, overage %v, total %v", id, d, w.units, w.overage, w.total)
		}
	}
}
