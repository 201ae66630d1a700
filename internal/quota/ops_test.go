package quota_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestSpendCapAndCurrencyMoveTakeTurns: a tenant's own spend cap set
// while its move to a plan of another currency is under way waits for
// the move, and is then checked against the new plan (here: refused, past
// the yen plan's maximum), never against the plan the move left; set
// first, the move sees it and is refused. Without that, both went
// through: a cap of 5000 cents became one of 5000 yen.
func TestSpendCapAndCurrencyMoveTakeTurns(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	ps := plans.NewStore(db)
	dollars, err := ps.Create(ctx, plans.Plan{Name: "dollars", Currency: "USD"})
	testenv.Must(t, err)
	yen, err := ps.Create(ctx, plans.Plan{Name: "yen", Currency: "JPY"})
	testenv.Must(t, err)
	maxYen := int64(1000)
	_, err = quota.NewOps(db).SetPlan(ctx, audit.CLI, yen.ID, quota.PlanSettingsInput{SpendCapMaxMinor: &maxYen})
	testenv.Must(t, err)
	acme, err := tenants.NewStore(db).Create(ctx, "acme", dollars.ID)
	testenv.Must(t, err)
	_, err = db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-01-01T00:00:00Z' WHERE tenant_id = $1`, acme.ID)
	testenv.Must(t, err)

	// Hold the move after it has locked the tenant: it waits for the
	// closed months' lock, which this transaction holds.
	hold, err := db.Begin(ctx)
	testenv.Must(t, err)
	defer hold.Rollback(ctx)
	_, err = hold.Exec(ctx, `LOCK TABLE usage_closed_months IN EXCLUSIVE MODE`)
	testenv.Must(t, err)
	moved := make(chan error, 1)
	go func() {
		moved <- tenants.NewStore(db).SetPlan(ctx, acme.ID, yen.ID, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	}()
	testenv.WaitFor(t, 10*time.Second, "the move waiting for the closed months' lock", func() bool {
		var waiting int
		testenv.Must(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE c.relname = 'usage_closed_months' AND NOT l.granted`).Scan(&waiting))
		return waiting > 0
	})
	capped := make(chan error, 1)
	go func() {
		capMinor := int64(5000)
		_, err := quota.NewOps(db).SetTenantSpendCap(ctx, audit.CLI, acme.ID, &capMinor)
		capped <- err
	}()
	testenv.WaitFor(t, 10*time.Second, "the cap waiting for the tenant's row", func() bool {
		var waiting int
		testenv.Must(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'tuple' OR (locktype = 'transactionid' AND NOT granted)`).Scan(&waiting))
		return waiting > 0
	})
	testenv.Must(t, hold.Rollback(ctx))
	testenv.Must(t, <-moved)
	if err := <-capped; tollgate.ErrorCode(err) != tollgate.EINVALID || testenv.Fields(err)["spend_cap_minor"] == "" {
		t.Errorf("the cap set during the move: %v, want it refused against the yen plan's maximum", err)
	}
	var own *int64
	err = db.QueryRow(ctx, `SELECT spend_cap_minor FROM quota_tenant_settings WHERE tenant_id = $1`, acme.ID).Scan(&own)
	if err == nil && own != nil {
		t.Errorf("acme is on the yen plan with its own cap of %d, set against the dollar plan", *own)
	}
}
