package snapshot

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/tenants"
)

// TestASplitOverrideWithItsOwnLimitHasItsOwnState: the regions' rebalancer
// moves a global_split state's units by the plan's rule. A tenant's
// override of it that splits another limit (or period, or least share)
// gets a state of its own, never moved (equal shares), rather than be
// judged on its own share plus units moved for the plan's; one that keeps
// the split, or any override of a rule that is not split, keeps the
// plan's state and its count.
func TestASplitOverrideWithItsOwnLimitHasItsOwnState(t *testing.T) {
	now := time.Date(2026, 11, 15, 0, 0, 0, 0, time.UTC)
	split := plans.Rule{Name: "daily", Algorithm: limiter.FixedWindow, Limit: 1000, PeriodUS: limiter.DayUS,
		RegionScope: region.GlobalSplit}.WithDefaults()
	regional := plans.Rule{Name: "hourly", Algorithm: limiter.GCRA, Limit: 100, PeriodUS: limiter.HourUS}.WithDefaults()
	lower, same, lowerRegional := split, split, regional
	lower.Limit, same.Mode, lowerRegional.Limit = 100, plans.ModeShadow, 10
	over := map[string][]plans.Rule{"lower": {lower, lowerRegional}, "same": {same}}
	var ts []tenants.Tenant
	for id := range over {
		ts = append(ts, tenants.Tenant{ID: id, PlanID: 1, Status: tenants.StatusActive})
	}
	s := withMeta(Data{Plans: []plans.Plan{{ID: 1, Name: "p", Rules: []plans.Rule{split, regional}}}, Tenants: ts, Overrides: over}, now)
	planState := map[string][3]byte{}
	for _, r := range CompileRules(plans.Plan{ID: 1, Name: "p", Rules: []plans.Rule{split, regional}}) {
		planState[r.Name] = r.StateID
	}
	for id, want := range map[string]map[string]bool{"lower": {"daily": false, "hourly": true}, "same": {"daily": true, "hourly": true}} {
		for _, r := range s.tenants[tenantIDBytes(id)].Plan.Rules {
			if kept := r.StateID == planState[r.Name]; kept != want[r.Name] {
				t.Errorf("tenant %s, rule %s (limit %d): kept the plan's state %v, want %v", id, r.Name, r.Limit, kept, want[r.Name])
			}
		}
	}
}
