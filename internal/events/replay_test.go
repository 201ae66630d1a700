package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestReplaySentEvent: an event an endpoint was sent can be replayed to
// it, one by one or in a range, though its filters would not pick it (a
// test event, to an endpoint of one type); another endpoint's test event
// cannot.
func TestReplaySentEvent(t *testing.T) {
	db, acme, _ := setup(t)
	ctx := context.Background()
	clk := newClock()
	rcv := testenv.NewReceiver(t, nil)
	ops := events.NewOps(db, clk.Now, allowPrivate)
	ep := endpoint(t, ops, "", rcv.URL, events.EndpointInput{EventTypes: []string{events.KeyRevoked}, TenantIDs: []string{acme.ID}})
	other := endpoint(t, ops, "", rcv.URL+"/other", events.EndpointInput{})
	test, err := ops.SendTest(ctx, audit.CLI, "", ep.Endpoint.ID)
	if err != nil {
		t.Fatal(err)
	}
	otherTest, err := ops.SendTest(ctx, audit.CLI, "", other.Endpoint.ID)
	if err != nil {
		t.Fatal(err)
	}
	drain(t, db, events.NewDeliverer(events.DelivererConfig{DB: db, Now: clk.Now, Guard: allowPrivate}), clk, clk.Now().Add(time.Hour))

	res, err := ops.Replay(ctx, audit.CLI, "", ep.Endpoint.ID, events.ReplayInput{EventID: test.ID})
	if err != nil || res.Deliveries != 1 {
		t.Fatalf("replaying its test event: %+v %v, want 1 delivery", res, err)
	}
	if _, err := ops.Replay(ctx, audit.CLI, "", ep.Endpoint.ID, events.ReplayInput{EventID: otherTest.ID}); err == nil {
		t.Error("replayed another endpoint's test event")
	}
	res, err = ops.Replay(ctx, audit.CLI, "", ep.Endpoint.ID,
		events.ReplayInput{From: ptr(clk.Now().Add(-time.Hour)), To: ptr(clk.Now().Add(time.Hour))})
	if err != nil || res.Deliveries != 1 {
		t.Fatalf("replaying the range: %+v %v, want 1 delivery (its test event)", res, err)
	}
}
