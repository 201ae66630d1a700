package enforce

import (
	"context"
	"testing"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestDelayIsTheEnforcedShapersOnAnAdmission: a decision's delay_ms is
// the longest delay of its enforced shaping rules, and only on an
// admission. A shadow shaper's delay is reported in its own rules[]
// entry, never imposed on the caller; a denial carries no delay, even
// when a shaper would have queued the check.
func TestDelayIsTheEnforcedShapersOnAnAdmission(t *testing.T) {
	ctx := context.Background()
	hourly := plans.Rule{Name: "hourly", Algorithm: limiter.GCRA, Limit: 3, PeriodUS: limiter.HourUS, Burst: 3,
		Resource: "*", Scope: plans.ScopeKey, Mode: plans.ModeEnforce, FailureMode: plans.FailOpen}
	shaper := func(mode plans.Mode) plans.Rule {
		return plans.Rule{Name: "shaper", Algorithm: limiter.LeakyBucket, Limit: 1, PeriodUS: limiter.SecondUS, Burst: 5,
			Resource: "*", Scope: plans.ScopeKey, Mode: mode, FailureMode: plans.FailOpen,
			Options: plans.Options{LeakyMode: "shape"}}
	}
	for _, c := range []struct {
		mode plans.Mode
		// want is each check's allowed and delay_ms; shaper the shaper's
		// own reported delay.
		want []struct {
			allowed       bool
			delay, shaper int64
		}
	}{
		{plans.ModeShadow, []struct {
			allowed       bool
			delay, shaper int64
		}{
			{true, 0, 0}, {true, 0, 1000}, {true, 0, 2000}, {false, 0, 3000}, {false, 0, 3000}}},
		{plans.ModeEnforce, []struct {
			allowed       bool
			delay, shaper int64
		}{
			{true, 0, 0}, {true, 1000, 1000}, {true, 2000, 2000}, {false, 0, 3000}, {false, 0, 3000}}},
	} {
		t.Run(string(c.mode), func(t *testing.T) {
			key, hash, _ := tenants.GenerateKey()
			holder := snapshot.NewHolder(snapshot.StaticSource(snapshot.Data{
				Plans:   []plans.Plan{{ID: 1, Name: "p", Rules: []plans.Rule{hourly, shaper(c.mode)}}},
				Tenants: []tenants.Tenant{{ID: "t", Name: "t", PlanID: 1, Status: tenants.StatusActive}},
				Keys:    []tenants.Key{{ID: "k", TenantID: "t", Hash: hash}},
			}), nil)
			testenv.Must(t, holder.Reload(ctx))
			clock := newFakeClock()
			checker := NewChecker(holder, limiter.NewMemoryStore(clock.US), CheckerConfig{})
			checker.now = clock.Now
			for i, w := range c.want {
				d, err := checker.Check(ctx, Request{Key: key, Resource: "*", Cost: 1})
				testenv.Must(t, err)
				if d.Allowed != w.allowed || d.DelayMS != w.delay || len(d.Rules) != 2 || d.Rules[1].DelayMS != w.shaper {
					t.Errorf("check %d: allowed %v, delay_ms %d, rules %+v; want allowed %v, delay_ms %d, the shaper's %d",
						i, d.Allowed, d.DelayMS, d.Rules, w.allowed, w.delay, w.shaper)
				}
			}
		})
	}
}
