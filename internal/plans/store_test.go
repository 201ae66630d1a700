package plans_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

func hourly(limit int64) plans.Rule {
	return plans.Rule{Name: "hourly", Algorithm: limiter.GCRA, Limit: limit, PeriodUS: limiter.HourUS}
}

func TestValidateNamesFields(t *testing.T) {
	tests := []struct {
		name  string
		plan  plans.Plan
		field string
	}{
		{"bad name", plans.Plan{Name: "Not OK"}, "name"},
		{"negative fee", plans.Plan{Name: "p", BaseFeeMinor: -1}, "base_fee_minor"},
		{"negative tier price", plans.Plan{Name: "p", Tiers: []plans.PriceTier{{UnitMinor: -1}}}, "tiers[0].unit_minor"},
		{"unknown algorithm", plans.Plan{Name: "p", Rules: []plans.Rule{{Name: "r", Algorithm: "magic", Limit: 1, PeriodUS: 1}}}, "rules[0].algorithm"},
		{"zero period", plans.Plan{Name: "p", Rules: []plans.Rule{{Name: "r", Limit: 1}}}, "rules[0].period_us"},
		{"negative burst", plans.Plan{Name: "p", Rules: []plans.Rule{{Name: "r", Limit: 1, PeriodUS: 1, Burst: -1}}}, "rules[0].burst"},
		{"bad pattern", plans.Plan{Name: "p", Rules: []plans.Rule{{Name: "r", Limit: 1, PeriodUS: 1, Resource: "get /x"}}}, "rules[0].resource"},
		{"duplicate rule", plans.Plan{Name: "p", Rules: []plans.Rule{hourly(1), hourly(2)}}, "rules[1].name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.plan.Validate()
			if _, ok := testenv.Fields(err)[tt.field]; !ok {
				t.Fatalf("Validate() = %v, want a problem with %s", err, tt.field)
			}
		})
	}
}

func TestMergeRules(t *testing.T) {
	plan := []plans.Rule{hourly(100), {Name: "search", Limit: 10}}
	over := []plans.Rule{{Name: "extra", Limit: 1}, {Name: "hourly", Limit: 5}}
	got := plans.MergeRules(plan, over)
	want := []plans.Rule{{Name: "hourly", Limit: 5}, {Name: "search", Limit: 10}, {Name: "extra", Limit: 1}}
	if len(got) != len(want) {
		t.Fatalf("got %d rules, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].Limit != want[i].Limit {
			t.Errorf("rule %d = %s/%d, want %s/%d", i, got[i].Name, got[i].Limit, want[i].Name, want[i].Limit)
		}
	}
	if plan[0].Limit != 100 {
		t.Error("MergeRules modified the plan's rules")
	}
}

func TestStoreLifecycle(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	ps := plans.NewStore(db)

	p, err := ps.Create(ctx, plans.Plan{Name: "basic", BaseFeeMinor: 900, Rules: []plans.Rule{hourly(100)}})
	testenv.Must(t, err)
	if p.Rules[0].Burst != 100 || p.Rules[0].Scope != plans.ScopeKey {
		t.Errorf("defaults not filled: %+v", p.Rules[0])
	}
	if _, err := ps.Create(ctx, plans.Plan{Name: "basic"}); tollgate.ErrorCode(err) != tollgate.ECONFLICT {
		t.Fatalf("second Create = %v, want conflict", err)
	}

	p.Rules = append(p.Rules, plans.Rule{Name: "burst", Algorithm: limiter.TokenBucket, Limit: 10, PeriodUS: limiter.SecondUS})
	p.Rules[0].Limit = 200
	up, err := ps.Update(ctx, p.ID, p)
	testenv.Must(t, err)
	if len(up.Rules) != 2 || up.Rules[0].Limit != 200 || up.Rules[0].ID != p.Rules[0].ID {
		t.Errorf("Update rules = %+v; want hourly kept by name with limit 200, plus burst", up.Rules)
	}
	if _, err := ps.Update(ctx, 999999, p); tollgate.ErrorCode(err) != tollgate.ENOTFOUND {
		t.Errorf("Update(unknown) = %v, want not_found", err)
	}

	// In use: cannot be deleted, may be archived; archived cannot be assigned.
	ts := tenants.NewStore(db)
	_, err = ts.Create(ctx, "acme", p.ID)
	testenv.Must(t, err)
	if err := ps.Delete(ctx, p.ID); tollgate.ErrorCode(err) != tollgate.ECONFLICT {
		t.Fatalf("Delete(in use) = %v, want conflict", err)
	}
	arch, err := ps.SetArchived(ctx, p.ID, true)
	testenv.Must(t, err)
	if arch.ArchivedAt == nil {
		t.Fatal("archived_at not set")
	}
	_, err = ts.Create(ctx, "newcomer", p.ID)
	if _, ok := testenv.Fields(err)["plan_id"]; !ok {
		t.Fatalf("Create on an archived plan = %v, want a problem with plan_id", err)
	}
	restored, err := ps.SetArchived(ctx, p.ID, false)
	testenv.Must(t, err)
	if restored.ArchivedAt != nil {
		t.Fatal("archived_at still set after restore")
	}

	unused, err := ps.Create(ctx, plans.Plan{Name: "unused"})
	testenv.Must(t, err)
	testenv.Must(t, ps.Delete(ctx, unused.ID))
	if _, err := ps.Get(ctx, unused.ID); tollgate.ErrorCode(err) != tollgate.ENOTFOUND {
		t.Errorf("Get(deleted) = %v, want not_found", err)
	}
}

func TestListPage(t *testing.T) {
	ctx := context.Background()
	ps := plans.NewStore(testenv.DB(t))
	for _, name := range []string{"e", "a", "d", "c", "b"} {
		_, err := ps.Create(ctx, plans.Plan{Name: name, Rules: []plans.Rule{hourly(1)}})
		testenv.Must(t, err)
	}
	_, err := ps.SetArchived(ctx, mustGet(t, ps, "c").ID, true)
	testenv.Must(t, err)

	var names []string
	pr := page.Request{Limit: 2}
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		pg, err := ps.ListPage(ctx, plans.Filter{}, pr)
		testenv.Must(t, err)
		for _, p := range pg.Items {
			names = append(names, p.Name)
			if len(p.Rules) != 1 {
				t.Errorf("plan %s has %d rules, want 1", p.Name, len(p.Rules))
			}
		}
		if pg.NextCursor == nil {
			break
		}
		pr.Cursor = *pg.NextCursor
	}
	if want := []string{"a", "b", "c", "d", "e"}; !reflect.DeepEqual(names, want) {
		t.Errorf("pages = %v, want %v", names, want)
	}
	archived := true
	pg, err := ps.ListPage(ctx, plans.Filter{Archived: &archived}, page.First(10))
	testenv.Must(t, err)
	if len(pg.Items) != 1 || pg.Items[0].Name != "c" {
		t.Errorf("archived = %v, want only c", pg.Items)
	}
	if _, err := ps.ListPage(ctx, plans.Filter{}, page.Request{Limit: 2, Cursor: "!!"}); testenv.Fields(err)["cursor"] == "" {
		t.Errorf("bad cursor = %v, want a problem with cursor", err)
	}
}

func mustGet(t *testing.T, ps *plans.Store, name string) plans.Plan {
	t.Helper()
	p, err := ps.GetByName(context.Background(), name)
	testenv.Must(t, err)
	return p
}

// TestCurrencyFixedWhileBilling: a plan's currency can change while no
// month that is not closed is billed on it; once a tenant is on it, or
// was in a month not yet closed, the change is refused naming currency,
// through Update, Put and the audited operation alike, and the plan's
// other fields still change.
func TestCurrencyFixedWhileBilling(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	ps, ts := plans.NewStore(db), tenants.NewStore(db)
	pro, err := ps.Create(ctx, plans.Plan{Name: "pro", BaseFeeMinor: 4900})
	testenv.Must(t, err)
	other, err := ps.Create(ctx, plans.Plan{Name: "other"})
	testenv.Must(t, err)
	in := func(currency string, fee int64) plans.Plan {
		return plans.Plan{Name: "pro", Currency: currency, BaseFeeMinor: fee}
	}
	refused := func(what string, err error) {
		t.Helper()
		if tollgate.ErrorCode(err) != tollgate.EINVALID || testenv.Fields(err)["currency"] == "" {
			t.Errorf("%s = %v, want a problem naming currency", what, err)
		}
	}
	// Nobody on it: anything goes.
	pro, err = ps.Update(ctx, pro.ID, in("CHF", 4900))
	if err != nil || pro.Currency != "CHF" {
		t.Fatalf("currency of an unused plan: %+v, %v", pro, err)
	}
	// acme on it, since 2026-01.
	acme, err := ts.Create(ctx, "acme", pro.ID)
	testenv.Must(t, err)
	_, err = db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-01-01T00:00:00Z' WHERE tenant_id = $1`, acme.ID)
	testenv.Must(t, err)
	_, err = ps.Update(ctx, pro.ID, in("EUR", 4900))
	refused("Update to EUR with a tenant on the plan", err)
	_, err = ps.Put(ctx, in("EUR", 4900))
	refused("Put in EUR with a tenant on the plan", err)
	_, err = plans.NewOps(db).Update(ctx, audit.CLI, pro.ID, plans.PlanInput{Name: "pro", Currency: "EUR"})
	refused("Ops.Update to EUR with a tenant on the plan", err)
	if pro, err = ps.Update(ctx, pro.ID, in("CHF", 5900)); err != nil || pro.BaseFeeMinor != 5900 {
		t.Errorf("a new price in the same currency: %+v, %v", pro, err)
	}

	// acme left it on 1 March: January and February are billed on it
	// until both are closed.
	testenv.Must(t, ts.SetPlan(ctx, acme.ID, other.ID, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)))
	_, err = ps.Update(ctx, pro.ID, in("EUR", 5900))
	refused("Update to EUR with January and February open", err)
	_, err = db.Exec(ctx, `INSERT INTO usage_closed_months (month, statements) VALUES ('2026-01-01', 0)`)
	testenv.Must(t, err)
	_, err = ps.Update(ctx, pro.ID, in("EUR", 5900))
	refused("Update to EUR with February open", err)
	_, err = db.Exec(ctx, `INSERT INTO usage_closed_months (month, statements) VALUES ('2026-02-01', 0)`)
	testenv.Must(t, err)
	if pro, err = ps.Update(ctx, pro.ID, in("EUR", 5900)); err != nil || pro.Currency != "EUR" {
		t.Errorf("currency with every month billed on the plan closed: %+v, %v", pro, err)
	}
}

// TestCurrencyFixedWhileAmountsOutside: a plan's currency cannot change
// while it has an amount of money kept beside it without a currency of
// its own, which the new currency would read as its own: its self-serve
// top-up price (2 cents a unit would be 2 won) and its tenants' spend
// caps. The change is refused naming currency, and the message says what
// to clear; once cleared, the currency changes.
func TestCurrencyFixedWhileAmountsOutside(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	ops := plans.NewOps(db)
	inv := billing.NewInvoicing(db, billing.InvoicingConfig{}, nil)
	pro, err := ops.Create(ctx, audit.CLI, plans.PlanInput{Name: "pro", Currency: "USD", BaseFeeMinor: 4900})
	testenv.Must(t, err)
	two, grace := int64(2), int64(3600)
	_, err = inv.SetPlanBilling(ctx, audit.CLI, pro.ID, billing.PlanBillingInput{DunningGraceS: &grace, TopUpUnitMinor: &two})
	testenv.Must(t, err)
	in := plans.PlanInput{Name: "pro", Currency: "KRW", BaseFeeMinor: 4900}
	refused := func(what string, err error, parts ...string) {
		t.Helper()
		f := testenv.Fields(err)["currency"]
		if tollgate.ErrorCode(err) != tollgate.EINVALID || f == "" {
			t.Fatalf("%s = %v, want a problem naming currency", what, err)
		}
		for _, part := range parts {
			if !strings.Contains(f, part) || !strings.Contains(err.Error(), part) {
				t.Errorf("%s: %q (%v), want it to say %q", what, f, err, part)
			}
		}
		got, err := plans.NewStore(db).Get(ctx, pro.ID)
		if err != nil || got.Currency != "USD" {
			t.Errorf("%s: the plan is %+v, %v; want it still in USD", what, got, err)
		}
	}
	_, err = ops.Update(ctx, audit.CLI, pro.ID, in)
	refused("Ops.Update to KRW with a top-up price", err, "top_up_unit_minor 2", "--top-up-unit-minor none")
	_, err = plans.NewStore(db).Put(ctx, plans.Plan{Name: "pro", Currency: "KRW", BaseFeeMinor: 4900})
	refused("Put in KRW with a top-up price", err, "top_up_unit_minor 2")

	// The top-up price cleared, the dunning grace kept: the spend caps
	// are in cents too.
	_, err = inv.SetPlanBilling(ctx, audit.CLI, pro.ID, billing.PlanBillingInput{DunningGraceS: &grace})
	testenv.Must(t, err)
	capMax := int64(50000)
	_, err = quota.NewOps(db).SetPlan(ctx, audit.CLI, pro.ID, quota.PlanSettingsInput{SpendCapMaxMinor: &capMax})
	testenv.Must(t, err)
	_, err = ops.Update(ctx, audit.CLI, pro.ID, in)
	refused("Ops.Update to KRW with a largest spend cap", err, "spend_cap_max_minor 50000", "admin plans quota")

	// Thresholds alone are units, not money.
	_, err = quota.NewOps(db).SetPlan(ctx, audit.CLI, pro.ID, quota.PlanSettingsInput{
		Thresholds: []quota.Threshold{{Percent: 80}}})
	testenv.Must(t, err)
	got, err := ops.Update(ctx, audit.CLI, pro.ID, in)
	if err != nil || got.Currency != "KRW" {
		t.Fatalf("Ops.Update to KRW with nothing in USD left: %+v, %v", got, err)
	}
	pb, err := inv.PlanBilling(ctx, pro.ID)
	if err != nil || pb.TopUpUnitMinor != nil || pb.DunningGraceS == nil || *pb.DunningGraceS != grace {
		t.Errorf("billing settings after the move: %+v, %v; want no top-up price and the grace kept", pb, err)
	}
}
