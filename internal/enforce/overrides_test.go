package enforce_test

import (
	"context"
	"testing"

	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestOverridesApplyToChecks stores a plan and a tenant override in
// Postgres and checks through the snapshot the check API serves from: the
// override replaces the plan rule of its name for its tenant only, and an
// override with a new name adds a rule.
func TestOverridesApplyToChecks(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	plan, err := plans.NewStore(db).Create(ctx, plans.Plan{Name: "pro", Rules: []plans.Rule{
		{Name: "hourly", Algorithm: limiter.GCRA, Limit: 100, PeriodUS: limiter.HourUS},
	}})
	testenv.Must(t, err)
	ts := tenants.NewStore(db)
	small, err := ts.Create(ctx, "small", plan.ID)
	testenv.Must(t, err)
	plain, err := ts.Create(ctx, "plain", plan.ID)
	testenv.Must(t, err)
	smallKey, _, err := ts.IssueKey(ctx, small.ID, "", nil)
	testenv.Must(t, err)
	plainKey, _, err := ts.IssueKey(ctx, plain.ID, "", nil)
	testenv.Must(t, err)
	_, err = ts.SetOverrides(ctx, small.ID, []plans.Rule{
		{Name: "hourly", Algorithm: limiter.GCRA, Limit: 2, PeriodUS: limiter.HourUS},
		{Name: "search", Algorithm: limiter.TokenBucket, Limit: 1, PeriodUS: limiter.MinuteUS, Resource: "POST /v1/search"},
	})
	testenv.Must(t, err)

	holder := snapshot.NewHolder(snapshot.NewPostgresSource(db), nil)
	testenv.Must(t, holder.Reload(ctx))
	checker := enforce.NewChecker(holder, limiter.NewMemoryStore(nil), enforce.CheckerConfig{})
	check := func(key, resource string) enforce.Decision {
		t.Helper()
		d, err := checker.Check(ctx, enforce.Request{Key: key, Resource: resource, Cost: 1})
		testenv.Must(t, err)
		return d
	}

	for i, want := range []bool{true, true, false} {
		d := check(smallKey, "GET /repos")
		if d.Allowed != want || *d.Limit != 2 || d.Policy != "hourly" {
			t.Fatalf("small check %d: allowed %v limit %d policy %s; want allowed %v limit 2 hourly",
				i+1, d.Allowed, *d.Limit, d.Policy, want)
		}
	}
	if d := check(plainKey, "GET /repos"); !d.Allowed || *d.Limit != 100 || len(d.Rules) != 1 {
		t.Errorf("plain tenant: allowed %v limit %d rules %d; want the plan's hourly 100 only", d.Allowed, *d.Limit, len(d.Rules))
	}
	// An override with a new name adds a rule for its resource, next to the
	// plan's rules; the plan's rules keep their state.
	_, err = ts.SetOverrides(ctx, plain.ID, []plans.Rule{
		{Name: "search", Algorithm: limiter.TokenBucket, Limit: 1, PeriodUS: limiter.MinuteUS, Resource: "POST /v1/search"},
	})
	testenv.Must(t, err)
	testenv.Must(t, holder.Reload(ctx))
	if d := check(plainKey, "GET /repos"); len(d.Rules) != 1 || d.Rules[0].Remaining != 98 {
		t.Errorf("plain GET after the override: %+v; want only hourly, 98 remaining", d.Rules)
	}
	d := check(plainKey, "POST /v1/search")
	if !d.Allowed || len(d.Rules) != 2 || d.Rules[0].Name != "hourly" || d.Rules[0].Limit != 100 || d.Rules[1].Name != "search" {
		t.Fatalf("plain search: %+v; want hourly 100 and search", d.Rules)
	}
	if d := check(plainKey, "POST /v1/search"); d.Allowed || d.Policy != "search" {
		t.Errorf("second search: allowed %v policy %s; want denied by search", d.Allowed, d.Policy)
	}
	// The small tenant is untouched by the plain tenant's override.
	if d := check(smallKey, "POST /v1/search"); d.Allowed || len(d.Rules) != 2 || d.Policy != "hourly" {
		t.Errorf("small search: %+v; want its own hourly (2, spent) and search", d.Rules)
	}
}
