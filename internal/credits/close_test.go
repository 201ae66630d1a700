package credits_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/usage"
)

// TestDrawsRecordedAfterTheCloseAreLate: a draw the drainer had not
// recorded when the month was closed (the drainer behind, Redis or a
// region cut off) is not added to the frozen statement's credits, nor
// lost: the close names the tenant as behind, and once recorded the
// draw is the closed statement's late credits.
func TestDrawsRecordedAfterTheCloseAreLate(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeOverage, 0, 0)
	r.topUp(20)
	r.check(30) // 20 drawn, 10 past the balance; not drained yet
	month := usage.MonthOf(time.Now())
	closer := billing.NewOps(r.db, func() time.Time { return month.End().Add(time.Hour) })
	res, err := closer.CloseMonth(ctx, audit.CLI, month, nil)
	testenv.Must(t, err)
	if !slices.Contains(res.CreditsBehind, r.tenantID) {
		t.Errorf("close: credits behind %v, want the tenant, whose drainer had not passed the month's end", res.CreditsBehind)
	}
	r.drainAt = month.End().Add(2 * time.Hour)
	r.agree()
	st, err := billing.NewStore(r.db, nil).Statement(ctx, r.tenantID, month)
	testenv.Must(t, err)
	if st.Status != "closed" || st.Credits == nil || st.Credits.Used != 0 || st.Credits.Overage != 0 || !st.CreditsBehind {
		t.Errorf("closed statement: %s, credits %+v, behind %v; want closed with nothing drawn, behind", st.Status, st.Credits, st.CreditsBehind)
	}
	want := credits.Late{Drawn: 20, Overage: 10}
	if st.LateCredits == nil || *st.LateCredits != want {
		t.Errorf("closed statement's late credits %+v, want %+v", st.LateCredits, want)
	}
	again, err := closer.CloseMonth(ctx, audit.CLI, month, nil)
	testenv.Must(t, err)
	if !again.AlreadyClosed || again.LateCredits != want || !slices.Contains(again.CreditsBehind, r.tenantID) {
		t.Errorf("closing again: %+v; want already closed, late credits %+v, the tenant behind", again, want)
	}
}

// TestCloseWaitsForADrainInFlight: a drain holds the close lock shared,
// so a close waits for it, and a drain that begins while a close holds
// it waits for the close: every draw is in the frozen statement or late.
func TestCloseWaitsForADrainInFlight(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 0, 0)
	r.topUp(50)
	r.check(5)
	tx, err := r.db.Begin(ctx)
	testenv.Must(t, err)
	defer tx.Rollback(ctx)
	// A close in progress.
	_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, usage.CloseLock)
	testenv.Must(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := r.drainer.Drain(ctx)
		done <- err
	}()
	// Postgres shows the drain waiting for the lock (its advisory lock
	// not granted, in this test's database); until the close ends it
	// cannot have finished.
	testenv.Eventually(t, time.Now(), 10*time.Second, "the drain waiting for the close lock", func() (bool, string) {
		var waiting int
		testenv.Must(t, r.db.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&waiting))
		select {
		case err := <-done:
			t.Fatalf("a drain finished (%v) while a close held the lock", err)
		default:
		}
		return waiting > 0, fmt.Sprintf("%d waiting", waiting)
	})
	select {
	case err := <-done:
		t.Fatalf("a drain finished (%v) while a close held the lock", err)
	default:
	}
	testenv.Must(t, tx.Rollback(ctx))
	testenv.Must(t, <-done)
	if acct := r.agree(); acct.Balance() != 45 {
		t.Errorf("balance %d, want 45", acct.Balance())
	}
}

// TestRefundFromAnExpiredGrantExpires: units a hold drew on a grant that
// has expired since are not given back as units that never expire (which
// made expiring credits permanent: hold a grant's remaining units just
// before it expires, settle at 0 after): they expire at once.
func TestRefundFromAnExpiredGrantExpires(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 0, 0)
	soon := r.grant(10, time.Hour, 0)
	r.topUp(5)
	d, err := r.checker.Check(ctx, enforce.Request{Key: r.key, Cost: 10, Resource: "GET /x", Hold: true})
	testenv.Must(t, err)
	if !d.Allowed || d.Credits.Balance != 5 {
		t.Fatalf("hold of 10 on 15: %+v", d)
	}
	r.drainAt = soon.ExpiresAt.Add(time.Second)
	r.drain() // the hold's draw, then the grant's expiry with nothing left
	if _, err := r.checker.Settle(ctx, d.HoldID, 0); err != nil {
		t.Fatal(err)
	}
	acct, never := r.agree(), r.neverExpiring()
	if acct.Balance() != 5 || never != 5 {
		t.Errorf("after settling at 0 a hold drawn on a grant expired since: balance %d, %d units that never expire; want 5, 5",
			acct.Balance(), never)
	}
	var refunded, expired int64
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT coalesce(sum(units) FILTER (WHERE kind = 'refund'), 0),
		coalesce(-sum(units) FILTER (WHERE kind = 'expiry'), 0) FROM credit_ledger WHERE tenant_id = $1`, r.tenantID).Scan(&refunded, &expired))
	if refunded != 10 || expired != 10 {
		t.Errorf("ledger: %d refunded, %d expired; want 10 and 10", refunded, expired)
	}
}

// TestRefundPastTheBalanceFromAnExpiredGrantExpires: a hold of 10 drew 6
// from a grant and 4 past the balance (a debt, overdraft 5); the grant
// expires and the hold is settled at 0. The 10 given back repay the debt
// (its 4) and the grant's 6 expire at once: none becomes units that never
// expire.
func TestRefundPastTheBalanceFromAnExpiredGrantExpires(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 5, 0)
	soon := r.grant(6, time.Hour, 0)
	r.reload()
	d, err := r.checker.Check(ctx, enforce.Request{Key: r.key, Cost: 10, Resource: "GET /x", Hold: true})
	testenv.Must(t, err)
	if !d.Allowed {
		t.Fatalf("hold of 10 on 6 with an overdraft of 5: %+v", d)
	}
	r.drainAt = soon.ExpiresAt.Add(time.Second)
	r.drain()
	if _, err := r.checker.Settle(ctx, d.HoldID, 0); err != nil {
		t.Fatal(err)
	}
	acct, never := r.agree(), r.neverExpiring()
	if acct.Balance() != 0 || acct.Debt != 0 || never != 0 {
		t.Errorf("after settling at 0: balance %d, debt %d, %d units that never expire; want 0, 0, 0", acct.Balance(), acct.Debt, never)
	}
}

// TestARefundAfterBecomingRegionsLetsTheRegionDrain: a hold drawn while
// the deployment was one region and settled below its estimate once it
// is several gives units back on the new region's row (counted below 0).
// Its drains go on recording: the escrow taken back is never more than
// the escrow.
func TestARefundAfterBecomingRegionsLetsTheRegionDrain(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeOverage, 0, 0)
	r.topUp(100)
	d, err := r.checker.Check(ctx, enforce.Request{Key: r.key, Cost: 10, Resource: "GET /x", Hold: true})
	if err != nil || !d.Allowed {
		t.Fatalf("hold of 10 on 100: %+v, %v", d, err)
	}
	r.drain() // recorded by the drainer of one region
	if _, err := r.checker.Settle(ctx, d.HoldID, 2); err != nil {
		t.Fatal(err)
	}
	dr := credits.NewDrainer(r.db, redisstore.New(r.rdb), credits.DrainerConfig{Prefix: r.prefix, Region: "us", Regions: 2})
	for i := range 3 {
		if _, err := dr.Drain(ctx); err != nil {
			t.Fatalf("region drain %d: %v", i, err)
		}
	}
}

// neverExpiring returns the units left on the tenant's grants that never
// expire.
func (r *rig) neverExpiring() int64 {
	r.t.Helper()
	grants, err := credits.NewStore(r.db).Grants(context.Background(), r.tenantID)
	testenv.Must(r.t, err)
	var never int64
	for _, g := range grants {
		if g.ExpiresAt == nil {
			never += g.Remaining
		}
	}
	return never
}
