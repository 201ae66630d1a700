package enforce

import (
	"fmt"
	"testing"

	"github.com/tollgate/tollgate/internal/plans"
)

// TestCrossed: a check crosses the points in (before, after] of the
// monthly quota's count, from its answer alone.
func TestCrossed(t *testing.T) {
	points := []int64{500, 900, 960}
	quota := func(remaining int64) []RuleResult {
		return []RuleResult{{Name: "hourly", Limit: 10, Remaining: 0}, {Name: plans.QuotaRuleName, Limit: 1000, Remaining: remaining, Allowed: true}}
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
