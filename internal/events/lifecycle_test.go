package events_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestLifecycleEvents: the tenant and key changes emit their events in
// their own transaction, once per actual change, and a refused change
// emits none.
func TestLifecycleEvents(t *testing.T) {
	db, acme, _ := setup(t)
	ctx := context.Background()
	ops := tenants.NewOps(db, nil)
	_, k1, err := tenants.NewStore(db).CreateKey(ctx, acme.ID, tenants.KeySpec{Name: "one"})
	testenv.Must(t, err)
	_, k2, err := tenants.NewStore(db).CreateKey(ctx, acme.ID, tenants.KeySpec{Name: "two"})
	testenv.Must(t, err)
	_, err = ops.RevokeKey(ctx, audit.CLI, acme.ID, k1.ID)
	testenv.Must(t, err)
	_, err = ops.RevokeKey(ctx, audit.CLI, acme.ID, k1.ID) // already revoked: no second event
	testenv.Must(t, err)
	rotated, err := ops.RotateKey(ctx, audit.CLI, acme.ID, k2.ID, tenants.RotateKeyInput{})
	testenv.Must(t, err)
	if _, err := ops.RotateKey(ctx, audit.CLI, acme.ID, k2.ID, tenants.RotateKeyInput{}); err == nil {
		t.Fatal("a key rotated twice")
	}
	for _, f := range []func(context.Context, audit.Actor, string) (tenants.Tenant, error){ops.Suspend, ops.Suspend, ops.Resume} {
		_, err := f(ctx, audit.CLI, acme.ID)
		testenv.Must(t, err)
	}
	list, err := events.NewStore(db).Events(ctx, acme.ID, "", page.First(100))
	testenv.Must(t, err)
	var types []string
	for i := len(list.Items) - 1; i >= 0; i-- {
		types = append(types, list.Items[i].Type)
	}
	want := []string{events.KeyRevoked, events.KeyRotated, events.TenantSuspended, events.TenantResumed}
	if len(types) != len(want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Errorf("event %d is %s, want %s", i, types[i], want[i])
		}
	}
	var data tenants.KeyRotatedData
	testenv.Must(t, json.Unmarshal(list.Items[2].Data.(json.RawMessage), &data))
	if data.KeyID != k2.ID || data.NewKeyID != rotated.Key.ID {
		t.Errorf("key.rotated data %+v, want key %s replaced by %s", data, k2.ID, rotated.Key.ID)
	}
}
