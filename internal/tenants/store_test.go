package tenants_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
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
	_, k, err := f.ts.CreateKey(ctx, f.acme.ID, tenants.KeySpec{})
	testenv.Must(t, err)
	t1 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	testenv.Must(t, f.ts.TouchKeys(ctx, map[string]time.Time{k.ID: t1}))
	testenv.Must(t, f.ts.TouchKeys(ctx, map[string]time.Time{k.ID: t1.Add(-time.Hour)}))
	got, err := f.ts.GetKey(ctx, f.acme.ID, k.ID)
	testenv.Must(t, err)
	if got.LastUsedAt == nil || !got.LastUsedAt.Equal(t1) {
		t.Errorf("last_used_at = %v, want %v", got.LastUsedAt, t1)
	}
}
