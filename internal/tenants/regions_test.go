package tenants_test

import (
	"context"
	"testing"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestOverridesRegionScope: an override rule takes a global region scope
// only on a deployment of regions; without, it is refused naming the
// field.
func TestOverridesRegionScope(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	in := tenants.Overrides{Rules: []plans.Rule{{Name: "daily", Algorithm: limiter.FixedWindow, Limit: 900, PeriodUS: limiter.DayUS,
		RegionScope: region.GlobalSplit}}}
	_, err := tenants.NewOps(f.db, nil).SetOverrides(ctx, audit.CLI, f.acme.ID, in)
	if testenv.Fields(err)["rules[0].region_scope"] == "" {
		t.Errorf("without regions: got %v, want rules[0].region_scope refused", err)
	}
	got, err := tenants.NewOps(f.db, nil).InRegions(region.Config{Name: "eu", Names: []string{"us", "eu", "ap"}}).
		SetOverrides(ctx, audit.CLI, f.acme.ID, in)
	testenv.Must(t, err)
	if got.Rules[0].RegionScope != region.GlobalSplit {
		t.Errorf("stored %+v", got.Rules[0])
	}
}
