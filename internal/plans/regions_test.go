package plans_test

import (
	"context"
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/testenv"
)

var threeRegions = region.Config{Name: "eu", Names: []string{"us", "eu", "ap"}}

// TestRegionScopeValidation: an unknown scope, a split of a concurrency
// or IP rule, and a min_share out of place are refused naming the field.
func TestRegionScopeValidation(t *testing.T) {
	minute := func(scope region.Scope, minShare int64) plans.Rule {
		return plans.Rule{Name: "m", Algorithm: limiter.FixedWindow, Limit: 1000, PeriodUS: limiter.MinuteUS,
			RegionScope: scope, MinShare: minShare}
	}
	ip := minute(region.GlobalSplit, 0)
	ip.Scope = plans.ScopeIP
	conc := plans.Rule{Name: "c", Algorithm: limiter.Concurrency, Limit: 5, RegionScope: region.GlobalSplit}
	for _, tc := range []struct {
		name  string
		rule  plans.Rule
		field string // "": valid
	}{
		{"regional", minute(region.Regional, 0), ""},
		{"shared", minute(region.GlobalShared, 0), ""},
		{"split", minute(region.GlobalSplit, 100), ""},
		{"unknown", minute("everywhere", 0), "rules[0].region_scope"},
		{"split ip", ip, "rules[0].region_scope"},
		{"split concurrency", conc, "rules[0].region_scope"},
		{"min share not split", minute(region.GlobalShared, 10), "rules[0].min_share"},
		{"min share above limit", minute(region.GlobalSplit, 1001), "rules[0].min_share"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := plans.Plan{Name: "p", Rules: []plans.Rule{tc.rule}}.WithDefaults().Validate()
			if tc.field == "" {
				if err != nil {
					t.Errorf("got %v, want valid", err)
				}
				return
			}
			if _, ok := testenv.Fields(err)[tc.field]; !ok {
				t.Errorf("got %v, want a problem with %s", err, tc.field)
			}
		})
	}
}

// TestRegionScopeStored: a plan's scopes are stored and read back;
// without regions a global scope is refused naming the field, and the
// floors of a split may not exceed the limit.
func TestRegionScopeStored(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	in := plans.PlanInput{Name: "global", Rules: []plans.Rule{
		{Name: "minute", Algorithm: limiter.FixedWindow, Limit: 1000, PeriodUS: limiter.MinuteUS, RegionScope: region.GlobalShared},
		{Name: "day", Algorithm: limiter.FixedWindow, Limit: 9000, PeriodUS: limiter.DayUS, RegionScope: region.GlobalSplit, MinShare: 500},
		{Name: "second", Algorithm: limiter.GCRA, Limit: 10, PeriodUS: limiter.SecondUS, RegionScope: region.Regional},
	}}
	_, err := plans.NewOps(db).Create(ctx, audit.CLI, in)
	if tollgate.ErrorCode(err) != tollgate.EINVALID || testenv.Fields(err)["rules[0].region_scope"] == "" ||
		testenv.Fields(err)["rules[1].region_scope"] == "" {
		t.Fatalf("without regions: got %v, want rules[0] and rules[1].region_scope refused", err)
	}
	ops := plans.NewOps(db).InRegions(threeRegions)
	p, err := ops.Create(ctx, audit.CLI, in)
	testenv.Must(t, err)
	got, err := plans.NewStore(db).Get(ctx, p.ID)
	testenv.Must(t, err)
	if r := got.Rules; r[0].RegionScope != region.GlobalShared || r[1].RegionScope != region.GlobalSplit || r[1].MinShare != 500 ||
		r[2].RegionScope != "" || r[0].MinShare != 0 {
		t.Errorf("stored rules %+v", r)
	}
	rule := in.Rules[1]
	rule.MinShare = 3001
	if _, err := ops.PutRule(ctx, audit.CLI, p.ID, rule); testenv.Fields(err)["rules[1].min_share"] == "" {
		t.Errorf("floors above the limit: got %v, want rules[1].min_share refused", err)
	}
	rule.RegionScope, rule.MinShare = region.Regional, 0
	p, err = ops.PutRule(ctx, audit.CLI, p.ID, rule)
	testenv.Must(t, err)
	if p.Rules[1].RegionScope != "" {
		t.Errorf("back to regional: got %q", p.Rules[1].RegionScope)
	}
}
