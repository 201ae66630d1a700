package enforce

import (
	"fmt"
	"testing"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
)

// TestCrossed: a check crosses the points in (before, after] of the
// monthly quota's count, from its answer alone.
func TestCrossed(t *testing.T) {
	points := []int64{500, 900, 960}
	rule := &snapshot.Rule{Rule: plans.Rule{Name: plans.QuotaRuleName, Limit: 1000}, After: snapshot.After{Crossings: true}}
	quota := func(remaining int64) []RuleResult {
		return []RuleResult{{Name: "hourly", Limit: 10, Remaining: 0}, {Name: plans.QuotaRuleName, Limit: 1000, Remaining: remaining, Allowed: true, rule: rule}}
	}
	cases := []struct {
		remaining, cost int64
		want            string
	}{
		{remaining: 501, cost: 1, want: "[]"},    // 498 → 499
		{remaining: 500, cost: 1, want: "[500]"}, // 499 → 500
		{remaining: 499, cost: 1, want: "[]"},    // 500 → 501
		{remaining: 40, cost: 100, want: "[900 960]"},
		{remaining: 40, cost: 0, want: "[]"},
	}
	for _, c := range cases {
		if got := fmt.Sprint(crossed(quota(c.remaining), points, c.cost)); got != c.want {
			t.Errorf("remaining %d cost %d: crossed %s, want %s", c.remaining, c.cost, got, c.want)
		}
	}
	shadowDenied := quota(0)
	shadowDenied[1].WouldDeny = true
	if got := crossed(shadowDenied, points, 5); got != nil {
		t.Errorf("a would-deny quota crossed %v", got)
	}
}

// TestCrossedPastTheIncludedUnits: an overage plan's quota is a tally of
// the whole month, so its points past the included units are crossed on
// the check path too, would-deny or not.
func TestCrossedPastTheIncludedUnits(t *testing.T) {
	rule := &snapshot.Rule{Rule: plans.Rule{Name: plans.QuotaRuleName, Limit: 1000}, Params: limiter.Params{Limit: snapshot.TallyLimit}, Tally: true,
		After: snapshot.After{Crossings: true}}
	points := []int64{900, 1000, 1500}
	for _, c := range []struct {
		count, cost int64
		want        string
	}{
		{count: 1001, cost: 2, want: "[1000]"},
		{count: 1500, cost: 1, want: "[1500]"},
		{count: 1700, cost: 1, want: "[]"},
		{count: 1600, cost: 700, want: "[1000 1500]"},
	} {
		res, count := rule.Reported(limiter.Result{Allowed: true, Remaining: snapshot.TallyLimit - c.count}, c.cost)
		rr := ruleResult(rule, res)
		rr.count, rr.WouldDeny = count, !res.Allowed
		if got := fmt.Sprint(crossed([]RuleResult{rr}, points, c.cost)); got != c.want {
			t.Errorf("count %d after a check of %d: crossed %s, want %s", c.count, c.cost, got, c.want)
		}
	}
}
