package credits_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// keyed is a tenant on a credit plan and the credits operations on a
// clock the test moves.
type keyed struct {
	t        *testing.T
	db       *pgxpool.Pool
	ops      *credits.Ops
	now      time.Time
	planID   int64
	tenantID string
}

func newKeyed(t *testing.T) *keyed {
	t.Helper()
	ctx := context.Background()
	k := &keyed{t: t, db: testenv.DB(t), now: time.Date(2030, 3, 1, 12, 0, 0, 0, time.UTC)}
	k.ops = credits.NewOps(k.db, func() time.Time { return k.now })
	p, err := plans.NewStore(k.db).Put(ctx, plans.Plan{Name: "prepaid"})
	testenv.Must(t, err)
	_, err = k.ops.SetPlan(ctx, audit.CLI, p.ID, credits.PlanSettingsInput{Mode: credits.ModeDeny})
	testenv.Must(t, err)
	tn, err := tenants.NewStore(k.db).Create(ctx, "acme", p.ID)
	testenv.Must(t, err)
	k.planID, k.tenantID = p.ID, tn.ID
	return k
}

// count returns the number query (with the tenant's ID as $1) counts.
func (k *keyed) count(query string) int {
	k.t.Helper()
	var n int
	testenv.Must(k.t, k.db.QueryRow(context.Background(), query, k.tenantID).Scan(&n))
	return n
}

// made returns the tenant's grants, ledger rows and audit entries of the
// credits changes.
func (k *keyed) made() (grants, rows, audited int) {
	k.t.Helper()
	return k.count(`SELECT count(*) FROM credit_grants WHERE tenant_id = $1`),
		k.count(`SELECT count(*) FROM credit_ledger WHERE tenant_id = $1`),
		k.count(`SELECT count(*) FROM audit_log WHERE tenant_id = $1 AND action IN ('credits.grant', 'credits.adjust')`)
}

func (k *keyed) balance() int64 {
	k.t.Helper()
	a, err := credits.NewStore(k.db).Account(context.Background(), k.tenantID)
	testenv.Must(k.t, err)
	return a.Balance()
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	testenv.Must(t, err)
	return string(b)
}

// wantKeyProblem fails unless err is code naming the Idempotency-Key
// field.
func wantKeyProblem(t *testing.T, what string, err error, code string) {
	t.Helper()
	var e *tollgate.Error
	if tollgate.ErrorCode(err) != code || !errors.As(err, &e) || e.Fields[credits.IdempotencyKeyHeader] == "" {
		t.Errorf("%s: %v, want %s naming %s", what, err, code, credits.IdempotencyKeyHeader)
	}
}

// TestGrantOnceReplaysTheFirstGrant: a grant sent again with its
// idempotency key and the same values grants nothing and answers the
// first grant as it was made (no second ledger row, no second audit
// entry), a day and a year later, and after its expiry has passed; the
// same key of another tenant is that tenant's own; without a key, every
// request grants.
func TestGrantOnceReplaysTheFirstGrant(t *testing.T) {
	ctx := context.Background()
	k := newKeyed(t)
	expires := k.now.Add(time.Hour)
	in := credits.GrantInput{Amount: 500, ExpiresAt: &expires, Priority: 3, Cause: "March pack"}
	first, replayed, err := k.ops.GrantOnce(ctx, audit.CLI, k.tenantID, "order-4711", in)
	testenv.Must(t, err)
	if replayed || first.ID == "" || first.Amount != 500 {
		t.Fatalf("first grant %+v, replayed %v", first, replayed)
	}
	// The same values spelled otherwise: the expiry in another zone, the
	// cause with spaces around it.
	again := in
	at := expires.In(time.FixedZone("CET", 3600))
	again.ExpiresAt, again.Cause = &at, "  March pack "
	for _, later := range []time.Duration{0, 24 * time.Hour, 365 * 24 * time.Hour} {
		k.now = expires.Add(-time.Minute).Add(later)
		g, replayed, err := k.ops.GrantOnce(ctx, audit.CLI, k.tenantID, "order-4711", again)
		if err != nil || !replayed || asJSON(t, g) != asJSON(t, first) {
			t.Errorf("%v later: %+v, replayed %v, %v; want the first grant %+v replayed", later, g, replayed, err, first)
		}
	}
	if grants, rows, audited := k.made(); grants != 1 || rows != 1 || audited != 1 {
		t.Errorf("%d grants, %d ledger rows, %d audit entries; want 1 of each", grants, rows, audited)
	}
	if b := k.balance(); b != 500 {
		t.Errorf("balance %d, want 500", b)
	}

	// Another tenant's key of the same name is its own.
	other, err := tenants.NewStore(k.db).Create(ctx, "globex", k.planID)
	testenv.Must(t, err)
	in.ExpiresAt = nil
	if g, replayed, err := k.ops.GrantOnce(ctx, audit.CLI, other.ID, "order-4711", in); err != nil || replayed || g.ID == first.ID {
		t.Errorf("another tenant's key: %+v, replayed %v, %v; want a grant of its own", g, replayed, err)
	}

	// Without a key, every request grants.
	for range 2 {
		_, err := k.ops.Grant(ctx, audit.CLI, k.tenantID, credits.GrantInput{Amount: 10, Cause: "no key"})
		testenv.Must(t, err)
	}
	if grants, _, audited := k.made(); grants != 3 || audited != 3 {
		t.Errorf("after two grants without a key: %d grants, %d audit entries; want 3", grants, audited)
	}
}

// TestKeyUsedForAnotherRequestIsRefused: a key sent again with another
// amount, expiry, priority or cause, or with an adjustment, is a conflict
// naming the key, and changes nothing.
func TestKeyUsedForAnotherRequestIsRefused(t *testing.T) {
	ctx := context.Background()
	k := newKeyed(t)
	in := credits.GrantInput{Amount: 100, Cause: "pack"}
	_, _, err := k.ops.GrantOnce(ctx, audit.CLI, k.tenantID, "k1", in)
	testenv.Must(t, err)
	expires := k.now.Add(time.Hour)
	for name, other := range map[string]credits.GrantInput{
		"amount":   {Amount: 101, Cause: "pack"},
		"expiry":   {Amount: 100, Cause: "pack", ExpiresAt: &expires},
		"priority": {Amount: 100, Cause: "pack", Priority: 1},
		"cause":    {Amount: 100, Cause: "another pack"},
	} {
		_, _, err := k.ops.GrantOnce(ctx, audit.CLI, k.tenantID, "k1", other)
		wantKeyProblem(t, "another "+name, err, tollgate.ECONFLICT)
	}
	_, _, err = k.ops.AdjustOnce(ctx, audit.CLI, k.tenantID, "k1", credits.AdjustInput{Units: 100, Cause: "pack"})
	wantKeyProblem(t, "an adjustment with a grant's key", err, tollgate.ECONFLICT)

	_, _, err = k.ops.AdjustOnce(ctx, audit.CLI, k.tenantID, "k2", credits.AdjustInput{Units: -30, Cause: "correction"})
	testenv.Must(t, err)
	_, _, err = k.ops.AdjustOnce(ctx, audit.CLI, k.tenantID, "k2", credits.AdjustInput{Units: -31, Cause: "correction"})
	wantKeyProblem(t, "another adjustment", err, tollgate.ECONFLICT)
	_, _, err = k.ops.GrantOnce(ctx, audit.CLI, k.tenantID, "k2", in)
	wantKeyProblem(t, "a grant with an adjustment's key", err, tollgate.ECONFLICT)

	if grants, _, audited := k.made(); grants != 1 || audited != 2 {
		t.Errorf("%d grants, %d audit entries; want the first grant and adjustment only", grants, audited)
	}
	if b := k.balance(); b != 70 {
		t.Errorf("balance %d, want 70", b)
	}
}

// TestAdjustOnceReplaysTheFirstAdjustment: an adjustment sent again with
// its key answers the first one, with the balance it left, however the
// balance has moved since.
func TestAdjustOnceReplaysTheFirstAdjustment(t *testing.T) {
	ctx := context.Background()
	k := newKeyed(t)
	_, err := k.ops.Grant(ctx, audit.CLI, k.tenantID, credits.GrantInput{Amount: 100, Cause: "pack"})
	testenv.Must(t, err)
	in := credits.AdjustInput{Units: -40, Cause: "double top-up reversed"}
	first, replayed, err := k.ops.AdjustOnce(ctx, audit.CLI, k.tenantID, "fix-1", in)
	testenv.Must(t, err)
	if replayed || first.Balance != 60 {
		t.Fatalf("first adjustment %+v, replayed %v; want a balance of 60", first, replayed)
	}
	_, err = k.ops.Grant(ctx, audit.CLI, k.tenantID, credits.GrantInput{Amount: 5, Cause: "pack"})
	testenv.Must(t, err)
	a, replayed, err := k.ops.AdjustOnce(ctx, audit.CLI, k.tenantID, "fix-1", in)
	if err != nil || !replayed || a != first {
		t.Errorf("replay: %+v, replayed %v, %v; want %+v replayed", a, replayed, err, first)
	}
	if b := k.balance(); b != 65 {
		t.Errorf("balance %d, want 65: the adjustment made once", b)
	}
	if _, rows, audited := k.made(); rows != 3 || audited != 3 {
		t.Errorf("%d ledger rows, %d audit entries; want 3 of each", rows, audited)
	}
}

// TestConcurrentRequestsWithOneKeyGrantOnce: many requests with one key
// at once make one grant; every one answers it, one of them as its maker.
func TestConcurrentRequestsWithOneKeyGrantOnce(t *testing.T) {
	ctx := context.Background()
	k := newKeyed(t)
	const n = 16
	var (
		ids      [n]string
		replayed [n]bool
		errs     [n]error
	)
	testenv.AtOnce(n, func(i int) {
		var g credits.Grant
		g, replayed[i], errs[i] = k.ops.GrantOnce(ctx, audit.CLI, k.tenantID, "retry-storm", credits.GrantInput{Amount: 250, Cause: "pack"})
		ids[i] = g.ID
	})
	made := 0
	for i := range n {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Errorf("request %d: grant %q, %v; want grant %q", i, ids[i], errs[i], ids[0])
		}
		if !replayed[i] {
			made++
		}
	}
	if made != 1 {
		t.Errorf("%d requests made the grant, want 1", made)
	}
	if grants, rows, audited := k.made(); grants != 1 || rows != 1 || audited != 1 {
		t.Errorf("%d grants, %d ledger rows, %d audit entries; want 1 of each", grants, rows, audited)
	}
	if b := k.balance(); b != 250 {
		t.Errorf("balance %d, want 250", b)
	}
}

// TestFailedRequestClaimsNoKey: a request refused (an expiry already
// past, an unknown tenant) leaves its key unclaimed, so the corrected
// request with the same key grants; a key that is not one is refused
// before anything, naming the field.
func TestFailedRequestClaimsNoKey(t *testing.T) {
	ctx := context.Background()
	k := newKeyed(t)
	past := k.now.Add(-time.Minute)
	_, _, err := k.ops.GrantOnce(ctx, audit.CLI, k.tenantID, "k", credits.GrantInput{Amount: 10, Cause: "pack", ExpiresAt: &past})
	if tollgate.ErrorCode(err) != tollgate.EINVALID {
		t.Errorf("an expiry in the past: %v, want invalid", err)
	}
	_, _, err = k.ops.GrantOnce(ctx, audit.CLI, "00000000-0000-4000-8000-000000000000", "k", credits.GrantInput{Amount: 10, Cause: "pack"})
	if tollgate.ErrorCode(err) != tollgate.ENOTFOUND {
		t.Errorf("an unknown tenant: %v, want not found", err)
	}
	if g, replayed, err := k.ops.GrantOnce(ctx, audit.CLI, k.tenantID, "k", credits.GrantInput{Amount: 20, Cause: "pack"}); err != nil || replayed || g.Amount != 20 {
		t.Errorf("the corrected request: %+v, replayed %v, %v; want a grant of 20", g, replayed, err)
	}
	for _, key := range []string{strings.Repeat("k", credits.MaxIdempotencyKeyLen+1), "tab\there", "clé", "\x7f"} {
		_, _, err := k.ops.GrantOnce(ctx, audit.CLI, k.tenantID, key, credits.GrantInput{Amount: 10, Cause: "pack"})
		wantKeyProblem(t, "grant with key "+key, err, tollgate.EINVALID)
		_, _, err = k.ops.AdjustOnce(ctx, audit.CLI, k.tenantID, key, credits.AdjustInput{Units: 10, Cause: "pack"})
		wantKeyProblem(t, "adjustment with key "+key, err, tollgate.EINVALID)
	}
	if _, _, err := k.ops.GrantOnce(ctx, audit.CLI, k.tenantID, strings.Repeat("~", credits.MaxIdempotencyKeyLen), credits.GrantInput{Amount: 1, Cause: "pack"}); err != nil {
		t.Errorf("a key of %d characters: %v", credits.MaxIdempotencyKeyLen, err)
	}
	if grants, _, _ := k.made(); grants != 2 {
		t.Errorf("%d grants, want 2", grants)
	}
}
