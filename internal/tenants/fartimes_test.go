package tenants_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestKeyAndPlanTimesOutsideTheYears0To9999: a key's expiry, made or
// changed, and a plan change's effective time whose instant in UTC lies
// past year 9999 or before year 0 are EINVALID naming the field, for
// every caller of Ops (the API, the console, the CLI): the audit log
// could not write them.
func TestKeyAndPlanTimesOutsideTheYears0To9999(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	ops := tenants.NewOps(f.db, nil)
	pastYear9999 := time.Date(9999, 12, 31, 23, 59, 59, 0, time.FixedZone("", -3600))
	beforeYear0 := time.Date(0, 1, 1, 0, 0, 0, 0, time.FixedZone("", 3600))
	named := func(what string, err error, field string) {
		t.Helper()
		if tollgate.ErrorCode(err) != tollgate.EINVALID || testenv.Fields(err)[field] != tollgate.TimeRangeProblem {
			t.Errorf("%s: %v, want EINVALID naming %s", what, err, field)
		}
	}
	_, err := ops.CreateKey(ctx, audit.CLI, f.acme.ID, tenants.CreateKeyInput{Name: "far", ExpiresAt: &pastYear9999})
	named("create a key expiring past 9999", err, "expires_at")
	made, err := ops.CreateKey(ctx, audit.CLI, f.acme.ID, tenants.CreateKeyInput{Name: "near"})
	testenv.Must(t, err)
	for _, at := range []time.Time{pastYear9999, beforeYear0} {
		expiry := &at
		_, err = ops.UpdateKey(ctx, audit.CLI, f.acme.ID, made.Key.ID, tenants.KeyChange{ExpiresAt: &expiry})
		named("change a key's expiry to "+at.Format(time.RFC3339), err, "expires_at")
	}
	_, err = ops.SetPlan(ctx, audit.CLI, f.acme.ID, tenants.SetPlanInput{PlanID: f.pro.ID, EffectiveAt: &beforeYear0})
	named("a plan change effective before year 0", err, "effective_at")
	if k, err := f.ts.GetKey(ctx, f.acme.ID, made.Key.ID); err != nil || k.ExpiresAt != nil {
		t.Errorf("key after refused changes: %+v, %v; want it unchanged, without an expiry", k, err)
	}
}
