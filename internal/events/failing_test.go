package events_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestFailingMeansFailingContinuously: an endpoint that failed for days,
// then had nothing to receive for weeks, is not disabled by one failed
// attempt when events come again: that failure starts its failing time
// afresh. The sweep ends the failing time of an endpoint with no failure
// for FailingGap, so that the notices no longer show it.
func TestFailingMeansFailingContinuously(t *testing.T) {
	db, acme, _ := setup(t)
	clk := newClock()
	start := clk.Now()
	back := start.Add(10 * 24 * time.Hour)
	var transient atomic.Int32
	flaky := testenv.NewReceiver(t, func() int {
		if clk.Now().Before(back) || transient.Add(1) == 1 {
			return 502 // down for 10 days; later, one transient failure
		}
		return 200
	})
	quiet := testenv.NewReceiver(t, func() int {
		if clk.Now().Before(back) {
			return 500
		}
		return 200
	})
	ops := events.NewOps(db, clk.Now, allowPrivate)
	a := endpoint(t, ops, acme.ID, flaky.URL, events.EndpointInput{EventTypes: []string{events.KeyRevoked}})
	b := endpoint(t, ops, acme.ID, quiet.URL, events.EndpointInput{EventTypes: []string{events.KeyRotated}})
	d := events.NewDeliverer(events.DelivererConfig{DB: db, Now: clk.Now, Guard: allowPrivate})
	es := events.NewStore(db)
	ctx := context.Background()

	// Down from the start: every attempt of the first events fails, the
	// last 3 days 15 hours in, before DisableAfter.
	emit(t, db, events.KeyRevoked, acme.ID, start)
	emit(t, db, events.KeyRotated, acme.ID, start)
	drain(t, db, d, clk, back)
	for _, id := range []string{a.Endpoint.ID, b.Endpoint.ID} {
		got, err := es.Endpoint(ctx, "", id)
		testenv.Must(t, err)
		if got.DisabledAt != nil || got.FailingSince == nil || !got.FailingSince.Equal(start) {
			t.Fatalf("endpoint %s after its deliveries failed: disabled_at %v failing_since %v, want enabled, failing since %v",
				id, got.DisabledAt, got.FailingSince, start)
		}
	}

	// Weeks later, one failed attempt: not disabled, failing from now.
	later := start.Add(28 * 24 * time.Hour)
	clk.Set(later)
	emit(t, db, events.KeyRevoked, acme.ID, later)
	n, err := d.DeliverDue(ctx)
	testenv.Must(t, err)
	if n != 1 || transient.Load() != 1 {
		t.Fatalf("made %d attempts, %d after the outage; want the one that fails", n, transient.Load())
	}
	got, err := es.Endpoint(ctx, "", a.Endpoint.ID)
	testenv.Must(t, err)
	if got.DisabledAt != nil {
		t.Fatalf("one failure weeks after the last: disabled at %v (%s), want enabled", got.DisabledAt, got.DisabledReason)
	}
	if got.FailingSince == nil || !got.FailingSince.Equal(later) {
		t.Errorf("failing_since after one failure weeks after the last: %v, want %v", got.FailingSince, later)
	}

	// The sweep ends b's failing time, weeks old, and keeps a's.
	s, err := events.Sweep(ctx, db, later, 0)
	testenv.Must(t, err)
	if s.Recovered != 1 {
		t.Errorf("sweep found %d endpoints no longer failing, want 1", s.Recovered)
	}
	list, err := es.Troubled(ctx, acme.ID)
	testenv.Must(t, err)
	if len(list) != 1 || list[0].ID != a.Endpoint.ID || list[0].DisablesAt == nil || !list[0].DisablesAt.Equal(later.Add(events.DisableAfter)) {
		t.Errorf("troubled endpoints: %+v, want %s alone, disabled at %v if it keeps failing", list, a.Endpoint.ID, later.Add(events.DisableAfter))
	}

	// Its retry succeeds: no longer failing.
	drain(t, db, d, clk, later.Add(time.Hour))
	got, err = es.Endpoint(ctx, "", a.Endpoint.ID)
	testenv.Must(t, err)
	if got.DisabledAt != nil || got.FailingSince != nil {
		t.Errorf("after the retry delivered: disabled_at %v failing_since %v, want neither", got.DisabledAt, got.FailingSince)
	}
}
