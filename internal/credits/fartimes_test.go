package credits_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestGrantExpiringPastYear9999: a grant whose expiry in UTC lies past
// year 9999 is EINVALID naming expires_at, with an idempotency key or
// without, and grants nothing: the audit log could not write it.
func TestGrantExpiringPastYear9999(t *testing.T) {
	r := newRig(t, credits.ModeDeny, 0, 0)
	ctx := context.Background()
	far := time.Date(9999, 12, 31, 23, 59, 59, 0, time.FixedZone("", -3600))
	for _, key := range []string{"", "order-1"} {
		_, _, err := r.ops.GrantOnce(ctx, audit.CLI, r.tenantID, key, credits.GrantInput{Amount: 5, Cause: "far", ExpiresAt: &far})
		if tollgate.ErrorCode(err) != tollgate.EINVALID || testenv.Fields(err)["expires_at"] != tollgate.TimeRangeProblem {
			t.Errorf("key %q: %v, want EINVALID naming expires_at", key, err)
		}
	}
	var grants int
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT count(*) FROM credit_grants WHERE tenant_id = $1`, r.tenantID).Scan(&grants))
	if grants != 0 {
		t.Errorf("%d grants, want none", grants)
	}
}
