package tenants_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestSetPlanNotInAClosedMonth: a plan change cannot take effect in a
// month closed for billing, nor before one.
func TestSetPlanNotInAClosedMonth(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	// acme has been on free since 2026-01; February and March are closed.
	_, err := f.db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-01-01T00:00:00Z' WHERE tenant_id = $1`, f.acme.ID)
	testenv.Must(t, err)
	_, err = f.db.Exec(ctx, `INSERT INTO usage_closed_months (month, statements) VALUES ('2026-02-01', 0), ('2026-03-01', 0)`)
	testenv.Must(t, err)
	for _, at := range []time.Time{
		time.Date(2026, 1, 20, 0, 0, 0, 0, time.UTC), // before a closed month
		time.Date(2026, 2, 10, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 31, 23, 59, 59, 0, time.UTC),
		time.Date(2026, 4, 1, 1, 59, 59, 0, time.FixedZone("CEST", 2*3600)), // still March in UTC
	} {
		err := f.ts.SetPlan(ctx, f.acme.ID, f.pro.ID, at)
		if tollgate.ErrorCode(err) != tollgate.ECONFLICT || testenv.Fields(err)["effective_at"] == "" {
			t.Errorf("SetPlan effective %v = %v, want a conflict naming effective_at", at, err)
		}
	}
	h, err := f.ts.PlanHistory(ctx, f.acme.ID, page.First(10))
	testenv.Must(t, err)
	if len(h.Items) != 1 {
		t.Fatalf("refused changes were recorded: %+v", h.Items)
	}
	april := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	testenv.Must(t, f.ts.SetPlan(ctx, f.acme.ID, f.pro.ID, april))
}
