package tenants_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

type fixture struct {
	db          *pgxpool.Pool
	ts          *tenants.Store
	free, pro   plans.Plan
	acme, other tenants.Tenant
}

func setup(t *testing.T) fixture {
	t.Helper()
	ctx := context.Background()
	db := testenv.DB(t)
	ps := plans.NewStore(db)
	f := fixture{db: db}
	var err error
	f.free, err = ps.Create(ctx, plans.Plan{Name: "free", Rules: []plans.Rule{{Name: "hourly", Limit: 100, PeriodUS: limiter.HourUS}}})
	testenv.Must(t, err)
	f.pro, err = ps.Create(ctx, plans.Plan{Name: "pro", Rules: []plans.Rule{{Name: "hourly", Limit: 5000, PeriodUS: limiter.HourUS}}})
	testenv.Must(t, err)
	f.ts = tenants.NewStore(db)
	f.acme, err = f.ts.Create(ctx, "Acme Corp", f.free.ID)
	testenv.Must(t, err)
	f.other, err = f.ts.Create(ctx, "Other_Inc", f.free.ID)
	testenv.Must(t, err)
	return f
}

// key issues acme a key as spec says, failing the test if it cannot.
func (f fixture) key(t *testing.T, spec tenants.KeySpec) tenants.Key {
	t.Helper()
	_, k, err := f.ts.CreateKey(context.Background(), f.acme.ID, spec)
	testenv.Must(t, err)
	return k
}

func TestListPageSearch(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	tests := []struct {
		q    string
		want []string
	}{
		{"", []string{"Acme Corp", "Other_Inc"}},
		{"acme", []string{"Acme Corp"}},
		{"_", []string{"Other_Inc"}}, // a literal underscore, not a wildcard
		{"%", nil},
		{f.other.ID, []string{"Other_Inc"}},
	}
	for _, tt := range tests {
		pg, err := f.ts.ListPage(ctx, tenants.Filter{Query: tt.q}, page.First(10))
		testenv.Must(t, err)
		var got []string
		for _, x := range pg.Items {
			got = append(got, x.Name)
		}
		if len(got) != len(tt.want) || (len(got) > 0 && got[0] != tt.want[0]) {
			t.Errorf("q=%q: got %v, want %v", tt.q, got, tt.want)
		}
	}
	pg, err := f.ts.ListPage(ctx, tenants.Filter{}, page.Request{Limit: 1})
	testenv.Must(t, err)
	if len(pg.Items) != 1 || pg.NextCursor == nil {
		t.Fatalf("first page = %d items, cursor %v", len(pg.Items), pg.NextCursor)
	}
	pg, err = f.ts.ListPage(ctx, tenants.Filter{}, page.Request{Limit: 1, Cursor: *pg.NextCursor})
	testenv.Must(t, err)
	if len(pg.Items) != 1 || pg.Items[0].Name != "Other_Inc" || pg.NextCursor != nil {
		t.Errorf("second page = %+v", pg)
	}
}

func TestSetPlanHistory(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	at := time.Now().Add(time.Minute).UTC().Truncate(time.Microsecond)
	testenv.Must(t, f.ts.SetPlan(ctx, f.acme.ID, f.pro.ID, at))
	if err := f.ts.SetPlan(ctx, f.acme.ID, f.pro.ID, at); testenv.Fields(err)["plan_id"] == "" {
		t.Errorf("SetPlan to the current plan = %v, want a problem with plan_id", err)
	}
	if err := f.ts.SetPlan(ctx, f.acme.ID, f.free.ID, at.Add(-time.Hour)); testenv.Fields(err)["effective_at"] == "" {
		t.Errorf("SetPlan before the latest change = %v, want a problem with effective_at", err)
	}
	if err := f.ts.SetPlan(ctx, "no-such-tenant", f.free.ID, at); tollgate.ErrorCode(err) != tollgate.ENOTFOUND {
		t.Errorf("SetPlan(unknown tenant) = %v, want not_found", err)
	}
	if err := f.ts.SetPlan(ctx, f.acme.ID, 999999, at); testenv.Fields(err)["plan_id"] == "" {
		t.Errorf("SetPlan(unknown plan) = %v, want a problem with plan_id", err)
	}
	h, err := f.ts.PlanHistory(ctx, f.acme.ID, page.First(10))
	testenv.Must(t, err)
	if len(h.Items) != 2 || h.Items[0].PlanName != "pro" || !h.Items[0].EffectiveAt.Equal(at) || h.Items[1].PlanName != "free" {
		t.Fatalf("history = %+v, want pro (at %v) then free", h.Items, at)
	}
	got, err := f.ts.Get(ctx, f.acme.ID)
	testenv.Must(t, err)
	if got.PlanID != f.pro.ID {
		t.Errorf("plan_id = %d, want %d", got.PlanID, f.pro.ID)
	}
}

func TestOverrides(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	rules, err := f.ts.SetOverrides(ctx, f.acme.ID, []plans.Rule{
		{Name: "hourly", Limit: 7, PeriodUS: limiter.HourUS},
		{Name: "daily", Algorithm: limiter.FixedWindow, Limit: 1000, PeriodUS: limiter.DayUS},
	})
	testenv.Must(t, err)
	if len(rules) != 2 || rules[0].Burst != 7 || rules[1].Algorithm != limiter.FixedWindow {
		t.Fatalf("stored overrides = %+v", rules)
	}
	if _, err := f.ts.SetOverrides(ctx, f.acme.ID, []plans.Rule{{Name: "x", Limit: 1}}); testenv.Fields(err)["rules[0].period_us"] == "" {
		t.Errorf("invalid override = %v, want a problem with rules[0].period_us", err)
	}
	rules, err = f.ts.SetOverrides(ctx, f.acme.ID, []plans.Rule{{Name: "daily", Algorithm: limiter.FixedWindow, Limit: 5, PeriodUS: limiter.DayUS}})
	testenv.Must(t, err)
	all, err := f.ts.AllOverrides(ctx)
	testenv.Must(t, err)
	if len(all) != 1 || len(all[f.acme.ID]) != 1 || all[f.acme.ID][0].Limit != 5 {
		t.Errorf("AllOverrides = %+v, want acme: daily 5", all)
	}
	none, err := f.ts.Overrides(ctx, f.other.ID)
	testenv.Must(t, err)
	if none == nil || len(none) != 0 {
		t.Errorf("Overrides(other) = %#v, want empty", none)
	}
}

func TestKeys(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	secret, k, err := f.ts.CreateKey(ctx, f.acme.ID, tenants.KeySpec{Name: "ci", Metadata: map[string]string{"team": "build"}})
	testenv.Must(t, err)
	if !tenants.WellFormed(secret) || k.Prefix != tenants.DisplayPrefix(secret) || k.Metadata["team"] != "build" {
		t.Fatalf("CreateKey = %q, %+v", secret, k)
	}
	if _, _, err := f.ts.CreateKey(ctx, "nope", tenants.KeySpec{}); tollgate.ErrorCode(err) != tollgate.ENOTFOUND {
		t.Errorf("CreateKey(unknown tenant) = %v, want not_found", err)
	}
	if _, _, err := f.ts.CreateKey(ctx, f.acme.ID, tenants.KeySpec{Metadata: map[string]string{"": "x"}}); testenv.Fields(err)["metadata"] == "" {
		t.Errorf("empty metadata key = %v, want a problem with metadata", err)
	}

	// Another tenant's key is not found through this tenant.
	if _, err := f.ts.GetKey(ctx, f.other.ID, k.ID); tollgate.ErrorCode(err) != tollgate.ENOTFOUND {
		t.Errorf("GetKey(other tenant) = %v, want not_found", err)
	}
	if _, err := f.ts.RevokeTenantKey(ctx, f.other.ID, k.ID); tollgate.ErrorCode(err) != tollgate.ENOTFOUND {
		t.Errorf("RevokeTenantKey(other tenant) = %v, want not_found", err)
	}

	exp := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Microsecond)
	name := "deploy"
	expPtr := &exp
	up, err := f.ts.UpdateKey(ctx, f.acme.ID, k.ID, tenants.KeyChange{Name: &name, ExpiresAt: &expPtr}, time.Now())
	testenv.Must(t, err)
	if up.Name != "deploy" || up.ExpiresAt == nil || !up.ExpiresAt.Equal(exp) || up.Metadata["team"] != "build" {
		t.Errorf("UpdateKey = %+v", up)
	}
	var never *time.Time
	up, err = f.ts.UpdateKey(ctx, f.acme.ID, k.ID, tenants.KeyChange{ExpiresAt: &never}, time.Now())
	testenv.Must(t, err)
	if up.ExpiresAt != nil || up.Name != "deploy" {
		t.Errorf("UpdateKey(clear expiry) = %+v", up)
	}

	now := time.Now()
	newSecret, fresh, old, err := f.ts.RotateKey(ctx, f.acme.ID, k.ID, tenants.Rotation{Grace: time.Hour, Now: now})
	testenv.Must(t, err)
	if newSecret == secret || fresh.ID == k.ID || fresh.Name != "deploy" || fresh.Metadata["team"] != "build" {
		t.Errorf("rotated key = %+v", fresh)
	}
	if old.ExpiresAt == nil || old.ExpiresAt.Sub(now.Add(time.Hour)).Abs() > time.Millisecond {
		t.Errorf("old key expires %v, want now+1h", old.ExpiresAt)
	}
	if _, err := f.ts.RevokeTenantKey(ctx, f.acme.ID, old.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := f.ts.RotateKey(ctx, f.acme.ID, old.ID, tenants.Rotation{Grace: time.Hour, Now: now}); tollgate.ErrorCode(err) != tollgate.ECONFLICT {
		t.Errorf("RotateKey(revoked) = %v, want conflict", err)
	}

	pg, err := f.ts.ListKeysPage(ctx, f.acme.ID, page.Request{Limit: 1})
	testenv.Must(t, err)
	if len(pg.Items) != 1 || pg.Items[0].ID != fresh.ID || pg.NextCursor == nil {
		t.Fatalf("first page = %+v", pg)
	}
	pg, err = f.ts.ListKeysPage(ctx, f.acme.ID, page.Request{Limit: 1, Cursor: *pg.NextCursor})
	testenv.Must(t, err)
	if len(pg.Items) != 1 || pg.Items[0].ID != k.ID || pg.NextCursor != nil {
		t.Fatalf("second page = %+v", pg)
	}
	pg, err = f.ts.ListKeysPage(ctx, f.other.ID, page.First(10))
	testenv.Must(t, err)
	if len(pg.Items) != 0 {
		t.Errorf("other tenant lists %d keys, want 0", len(pg.Items))
	}
}

func TestTouchKeysOnlyMovesForward(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	k := f.key(t, tenants.KeySpec{})
	t1 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	testenv.Must(t, f.ts.TouchKeys(ctx, map[string]time.Time{k.ID: t1}))
	testenv.Must(t, f.ts.TouchKeys(ctx, map[string]time.Time{k.ID: t1.Add(-time.Hour)}))
	got, err := f.ts.GetKey(ctx, f.acme.ID, k.ID)
	testenv.Must(t, err)
	if got.LastUsedAt == nil || !got.LastUsedAt.Equal(t1) {
		t.Errorf("last_used_at = %v, want %v", got.LastUsedAt, t1)
	}
}

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

// TestSetPlanCurrencyAtAMonthStart: a month is billed in one currency,
// so a move to a plan of another currency takes effect at the start of a
// month (00:00 UTC on the 1st) or is refused naming effective_at; a move
// between plans of one currency takes effect at any time.
func TestSetPlanCurrencyAtAMonthStart(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	euro, err := plans.NewStore(f.db).Create(ctx, plans.Plan{Name: "euro", Currency: "EUR"})
	testenv.Must(t, err)
	// acme and other have been on free (USD) since 2026-01.
	_, err = f.db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-01-01T00:00:00Z' WHERE tenant_id IN ($1, $2)`,
		f.acme.ID, f.other.ID)
	testenv.Must(t, err)
	for _, at := range []time.Time{
		time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 1, 0, 0, 0, 1000, time.UTC),                      // a microsecond late
		time.Date(2026, 3, 1, 0, 0, 0, 0, time.FixedZone("CET", 3600)),      // 28 February, 23:00 UTC
		time.Date(2026, 4, 1, 1, 59, 59, 0, time.FixedZone("CEST", 2*3600)), // still March in UTC
	} {
		err := f.ts.SetPlan(ctx, f.acme.ID, euro.ID, at)
		if tollgate.ErrorCode(err) != tollgate.EINVALID || testenv.Fields(err)["effective_at"] == "" ||
			!strings.Contains(tollgate.ErrorMessage(err), "EUR") || !strings.Contains(tollgate.ErrorMessage(err), "USD") {
			t.Errorf("SetPlan to EUR effective %v = %v, want a problem naming effective_at and both currencies", at, err)
		}
	}
	// Between plans of one currency, any time will do.
	testenv.Must(t, f.ts.SetPlan(ctx, f.acme.ID, f.pro.ID, time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)))
	// The start of April in another zone is the start of April in UTC.
	april := time.Date(2026, 4, 1, 2, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	testenv.Must(t, f.ts.SetPlan(ctx, f.acme.ID, euro.ID, april))
	h, err := f.ts.PlanHistory(ctx, f.acme.ID, page.First(10))
	testenv.Must(t, err)
	if len(h.Items) != 3 || h.Items[0].PlanName != "euro" || !h.Items[0].EffectiveAt.Equal(april) || h.Items[1].PlanName != "pro" {
		t.Fatalf("history = %+v, want euro from April, pro from 15 March, free", h.Items)
	}
	// Through the operation, which defaults to now: the problem suggests
	// a month's start.
	ops := tenants.NewOps(f.db, func() time.Time { return time.Date(2026, 5, 20, 9, 0, 0, 0, time.UTC) })
	_, err = ops.SetPlan(ctx, audit.CLI, f.other.ID, tenants.SetPlanInput{PlanID: euro.ID})
	if got := testenv.Fields(err)["effective_at"]; !strings.Contains(got, "2026-05-01T00:00:00Z") {
		t.Errorf("SetPlan to EUR now = %v, want effective_at to suggest 2026-05-01T00:00:00Z", err)
	}
	may := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	if _, err := ops.SetPlan(ctx, audit.CLI, f.other.ID, tenants.SetPlanInput{PlanID: euro.ID, EffectiveAt: &may}); err != nil {
		t.Errorf("SetPlan to EUR from the start of May: %v", err)
	}
}

// TestUpdateKeyShortenOnly: with ShortenOnly an expiry may be set on a key
// without one, or brought forward; nothing else.
func TestUpdateKeyShortenOnly(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	at := func(d time.Duration) *time.Time {
		t := now.Add(d)
		return &t
	}
	tests := []struct {
		name          string
		current, next *time.Time
		ok            bool
	}{
		{"set on a key without one", nil, at(time.Hour), true},
		{"set in the past on a key without one", nil, at(-time.Hour), true},
		{"clear nothing", nil, nil, true},
		{"bring forward", at(2 * time.Hour), at(time.Hour), true},
		{"end now", at(2 * time.Hour), at(0), true},
		{"keep", at(2 * time.Hour), at(2 * time.Hour), true},
		{"clear", at(2 * time.Hour), nil, false},
		{"extend", at(2 * time.Hour), at(3 * time.Hour), false},
		{"revive an expired key", at(-time.Hour), at(time.Hour), false},
		{"clear an expired key", at(-time.Hour), nil, false},
		{"move an expired key's expiry back", at(-time.Hour), at(-2 * time.Hour), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := f.key(t, tenants.KeySpec{Name: "k", ExpiresAt: tt.current})
			next := tt.next
			got, err := f.ts.UpdateKey(ctx, f.acme.ID, k.ID, tenants.KeyChange{ExpiresAt: &next, ShortenOnly: true}, now)
			if !tt.ok {
				if tollgate.ErrorCode(err) != tollgate.EFORBIDDEN {
					t.Fatalf("UpdateKey = %v, want forbidden", err)
				}
				got, err = f.ts.GetKey(ctx, f.acme.ID, k.ID)
				testenv.Must(t, err)
				if !sameTime(got.ExpiresAt, tt.current) {
					t.Errorf("after a refused change expires_at = %v, want %v", got.ExpiresAt, tt.current)
				}
				return
			}
			testenv.Must(t, err)
			if !sameTime(got.ExpiresAt, tt.next) {
				t.Errorf("expires_at = %v, want %v", got.ExpiresAt, tt.next)
			}
			// Without ShortenOnly (operators), anything goes.
			_, err = f.ts.UpdateKey(ctx, f.acme.ID, k.ID, tenants.KeyChange{ExpiresAt: &tt.current}, now)
			testenv.Must(t, err)
		})
	}
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

func TestMaxLiveKeys(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	capped := tenants.KeySpec{Name: "k", MaxLive: 3}
	var keys []tenants.Key
	for range 3 {
		keys = append(keys, f.key(t, capped))
	}
	if _, _, err := f.ts.CreateKey(ctx, f.acme.ID, capped); tollgate.ErrorCode(err) != tollgate.ECONFLICT {
		t.Fatalf("a 4th key with MaxLive 3 = %v, want conflict", err)
	}
	if _, _, err := f.ts.CreateKey(ctx, f.other.ID, capped); err != nil {
		t.Errorf("another tenant's key: %v", err)
	}
	if _, _, err := f.ts.CreateKey(ctx, f.acme.ID, tenants.KeySpec{Name: "cli"}); err != nil {
		t.Errorf("a key without a limit: %v", err)
	}
	if _, _, err := f.ts.CreateKey(ctx, "0b9f3d5e-8a44-4c1e-9d3a-5f6e7a8b9c0d", capped); tollgate.ErrorCode(err) != tollgate.ENOTFOUND {
		t.Errorf("unknown tenant = %v, want not_found", err)
	}

	// Rotating makes one more live key, unless the old one stops at once.
	now := time.Now()
	rotation := tenants.Rotation{Grace: time.Hour, Now: now, MaxLive: 4}
	if _, _, _, err := f.ts.RotateKey(ctx, f.acme.ID, keys[0].ID, rotation); tollgate.ErrorCode(err) != tollgate.ECONFLICT {
		t.Errorf("rotation at the limit = %v, want conflict", err)
	}
	rotation.Grace = 0
	if _, _, _, err := f.ts.RotateKey(ctx, f.acme.ID, keys[0].ID, rotation); err != nil {
		t.Fatalf("rotation at the limit without grace: %v", err)
	}

	// Revoked and expired keys do not count.
	_, err := f.ts.RevokeTenantKey(ctx, f.acme.ID, keys[1].ID)
	testenv.Must(t, err)
	past := time.Now().Add(-time.Minute)
	pastPtr := &past
	_, err = f.ts.UpdateKey(ctx, f.acme.ID, keys[2].ID, tenants.KeyChange{ExpiresAt: &pastPtr}, time.Now())
	testenv.Must(t, err)
	for range 2 {
		if _, _, err := f.ts.CreateKey(ctx, f.acme.ID, tenants.KeySpec{MaxLive: 4}); err != nil {
			t.Fatalf("a key after revoking and expiring: %v", err)
		}
	}
	if _, _, err := f.ts.CreateKey(ctx, f.acme.ID, tenants.KeySpec{MaxLive: 4}); tollgate.ErrorCode(err) != tollgate.ECONFLICT {
		t.Errorf("a 5th live key with MaxLive 4 = %v, want conflict", err)
	}
}

// TestMaxLiveKeysUnderConcurrency: keys made at the same time are counted
// one after another.
func TestMaxLiveKeysUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	const n, max = 12, 5
	made := atOnce(t, n, func() error {
		_, _, err := f.ts.CreateKey(ctx, f.acme.ID, tenants.KeySpec{MaxLive: max})
		return err
	})
	if made != max {
		t.Errorf("%d of %d concurrent keys made with MaxLive %d, want %d", made, n, max, max)
	}
}

// atOnce makes n calls of do at the same moment and returns how many
// succeeded; an error other than a conflict fails the test.
func atOnce(t *testing.T, n int, do func() error) (succeeded int) {
	t.Helper()
	errs := make([]error, n)
	testenv.AtOnce(n, func(i int) { errs[i] = do() })
	for _, err := range errs {
		switch tollgate.ErrorCode(err) {
		case "":
			succeeded++
		case tollgate.ECONFLICT:
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	return succeeded
}

// TestRotateKeyOnce: a key is rotated once; its replacement may be rotated
// in turn.
func TestRotateKeyOnce(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	k := f.key(t, tenants.KeySpec{Name: "ci"})
	now := time.Now().UTC().Truncate(time.Microsecond)
	_, fresh, old, err := f.ts.RotateKey(ctx, f.acme.ID, k.ID, tenants.Rotation{Grace: time.Hour, Now: now})
	testenv.Must(t, err)
	if old.RotatedAt == nil || !old.RotatedAt.Equal(now) || old.ReplacedBy != fresh.ID {
		t.Errorf("rotated key: rotated_at %v, replaced_by %q; want %v, %q", old.RotatedAt, old.ReplacedBy, now, fresh.ID)
	}
	if fresh.RotatedAt != nil || fresh.ReplacedBy != "" {
		t.Errorf("new key: rotated_at %v, replaced_by %q; want neither", fresh.RotatedAt, fresh.ReplacedBy)
	}
	_, _, _, err = f.ts.RotateKey(ctx, f.acme.ID, k.ID, tenants.Rotation{Grace: time.Hour, Now: now.Add(time.Second)})
	if tollgate.ErrorCode(err) != tollgate.ECONFLICT {
		t.Errorf("second rotation = %v, want conflict", err)
	}
	got, err := f.ts.GetKey(ctx, f.acme.ID, k.ID)
	testenv.Must(t, err)
	if !got.ExpiresAt.Equal(*old.ExpiresAt) || got.ReplacedBy != fresh.ID {
		t.Errorf("after a refused rotation: %+v, want it as the first rotation left it", got)
	}
	if _, _, _, err := f.ts.RotateKey(ctx, f.acme.ID, fresh.ID, tenants.Rotation{Grace: time.Hour, Now: now}); err != nil {
		t.Errorf("rotating the replacement: %v", err)
	}
	keys, err := f.ts.ListKeys(ctx, f.acme.ID)
	testenv.Must(t, err)
	if len(keys) != 3 {
		t.Errorf("%d keys, want 3 (the key, its replacement, and that one's)", len(keys))
	}
}

// TestConcurrentRotationsOneWins: of many rotations of one key at once,
// one makes a new key and the others are conflicts.
func TestConcurrentRotationsOneWins(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	k := f.key(t, tenants.KeySpec{Name: "ci"})
	won := atOnce(t, 8, func() error {
		_, _, _, err := f.ts.RotateKey(ctx, f.acme.ID, k.ID, tenants.Rotation{Grace: time.Hour, Now: time.Now()})
		return err
	})
	keys, err := f.ts.ListKeys(ctx, f.acme.ID)
	testenv.Must(t, err)
	if won != 1 || len(keys) != 2 {
		t.Errorf("%d rotations succeeded and left %d keys; want 1 and 2", won, len(keys))
	}
}

// TestRotationKeepsTheExpiry: the replacement of a key with an expiry
// expires when the old key would have.
func TestRotationKeepsTheExpiry(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	expires := now.Add(72 * time.Hour)
	k := f.key(t, tenants.KeySpec{Name: "ci", ExpiresAt: &expires})
	_, fresh, _, err := f.ts.RotateKey(ctx, f.acme.ID, k.ID, tenants.Rotation{Grace: time.Hour, Now: now})
	testenv.Must(t, err)
	if fresh.ExpiresAt == nil || !fresh.ExpiresAt.Equal(expires) {
		t.Errorf("replacement expires at %v, want %v (the old key's expiry)", fresh.ExpiresAt, expires)
	}
}

// TestMapsByID: the by-ID maps hold the rows the valid IDs name, ignore
// IDs that cannot name one, and ask nothing when none can.
func TestMapsByID(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	k := f.key(t, tenants.KeySpec{Name: "k"})
	revoked := f.key(t, tenants.KeySpec{Name: "r"})
	testenv.Must(t, f.ts.RevokeKey(ctx, revoked.ID))
	ids := []string{f.acme.ID, f.other.ID, "nope", testenv.GoodID}

	names, err := f.ts.Names(ctx, ids)
	testenv.Must(t, err)
	if want := map[string]string{f.acme.ID: "Acme Corp", f.other.ID: "Other_Inc"}; !reflect.DeepEqual(names, want) {
		t.Errorf("Names = %v, want %v", names, want)
	}
	counts, err := f.ts.KeyCounts(ctx, ids, time.Now())
	testenv.Must(t, err)
	if want := map[string]tenants.KeyCount{f.acme.ID: {Live: 1, Total: 2}}; !reflect.DeepEqual(counts, want) {
		t.Errorf("KeyCounts = %v, want %v", counts, want)
	}
	keys, err := f.ts.KeysByID(ctx, []string{k.ID, "nope", testenv.GoodID})
	testenv.Must(t, err)
	if len(keys) != 1 || keys[k.ID].Name != "k" {
		t.Errorf("KeysByID = %v, want only key %s", keys, k.ID)
	}
	none, err := tenants.NewStore(testenv.NoQueries(t)).Names(ctx, []string{"nope", ""})
	if err != nil || len(none) != 0 {
		t.Errorf("Names(no valid ID) = %v, %v; want an empty map and no query", none, err)
	}
}

// TestSetPlanCurrencyRefusesTheTenantsOwnSpendCap: a tenant's own spend
// cap is an amount of its plan's currency; a move to a plan of another
// currency is refused while it has one (5000 cents would be read as 5000
// of the new currency's minor units), and goes through once it is removed.
func TestSetPlanCurrencyRefusesTheTenantsOwnSpendCap(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	yen, err := plans.NewStore(f.db).Create(ctx, plans.Plan{Name: "yen", Currency: "JPY"})
	testenv.Must(t, err)
	_, err = f.db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-01-01T00:00:00Z' WHERE tenant_id = $1`, f.acme.ID)
	testenv.Must(t, err)
	_, err = f.db.Exec(ctx, `INSERT INTO quota_tenant_settings (tenant_id, spend_cap_minor) VALUES ($1, 5000)`, f.acme.ID)
	testenv.Must(t, err)
	march := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	err = f.ts.SetPlan(ctx, f.acme.ID, yen.ID, march)
	if got := testenv.Fields(err)["plan_id"]; tollgate.ErrorCode(err) != tollgate.EINVALID || !strings.Contains(got, "spend cap") ||
		!strings.Contains(tollgate.ErrorMessage(err), "5000 minor units of USD") {
		t.Errorf("SetPlan to JPY with the tenant's own cap = %v (plan_id: %q), want a problem naming plan_id and the cap", err, got)
	}
	// Within one currency the cap means the same: the move goes through.
	testenv.Must(t, f.ts.SetPlan(ctx, f.acme.ID, f.pro.ID, time.Date(2026, 2, 10, 0, 0, 0, 0, time.UTC)))
	// The cap removed (the plan's default), the move to JPY goes through.
	_, err = f.db.Exec(ctx, `UPDATE quota_tenant_settings SET spend_cap_minor = NULL WHERE tenant_id = $1`, f.acme.ID)
	testenv.Must(t, err)
	testenv.Must(t, f.ts.SetPlan(ctx, f.acme.ID, yen.ID, march))
}

// TestSetPlanCurrencySuggestsAMonthThatHasCome: when the tenant's latest
// change is later than this month's start, the month's start to give is
// the next one, which has not come yet: the problem says to wait for it.
func TestSetPlanCurrencySuggestsAMonthThatHasCome(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	euro, err := plans.NewStore(f.db).Create(ctx, plans.Plan{Name: "euro", Currency: "EUR"})
	testenv.Must(t, err)
	_, err = f.db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-03-10T00:00:00Z' WHERE tenant_id = $1`, f.acme.ID)
	testenv.Must(t, err)
	err = f.ts.SetPlan(ctx, f.acme.ID, euro.ID, time.Date(2026, 3, 20, 0, 0, 0, 0, time.UTC))
	if got := testenv.Fields(err)["effective_at"]; !strings.Contains(got, "2026-04-01T00:00:00Z, once it has come") {
		t.Errorf("SetPlan to EUR after a change on 10 March = %v (effective_at: %q), want April's start, once it has come", err, got)
	}
}
