package enforce

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestLostTalliesAreDecidedByFailureModes: on a store that lost its data,
// until the tenant's month is rebuilt, a capped tenant's check that costs
// something is unavailable and degraded (its rate rule untouched), a dry
// run of it is admitted degraded, and a hard quota's tenant is admitted
// degraded with its rate rule decided; once the marker is set, both are
// decided by the store again.
func TestLostTalliesAreDecidedByFailureModes(t *testing.T) {
	ctx := context.Background()
	now := time.Now().UTC()
	holder, secrets := monthTenants(t)
	store := limiter.NewMemoryStore(nil)
	store.Flush()
	checker := NewChecker(holder, store, CheckerConfig{Prefix: "tg:"})
	defer checker.Close()
	check := func(tenant string, dry bool) Decision {
		t.Helper()
		d, err := checker.Check(ctx, Request{Key: secrets[tenant], Resource: "GET /x", Cost: 1, DryRun: dry})
		testenv.Must(t, err)
		return d
	}
	rule := func(d Decision, name string) RuleResult {
		for _, rr := range d.Rules {
			if rr.Name == name {
				return rr
			}
		}
		t.Fatalf("no rule %s in %+v", name, d.Rules)
		return RuleResult{}
	}

	d := check("capped", false)
	if d.Allowed || d.Reason != tollgate.ReasonUnavailable || !d.Degraded || d.RetryAfterMS != 1000 || d.Policy != plans.SpendCapRuleName {
		t.Errorf("capped, before the rebuild: %+v; want unavailable, degraded, retry in 1 s, governed by the cap", d)
	}
	if d := check("capped", true); !d.Allowed || !d.Degraded {
		t.Errorf("capped dry run, before the rebuild: %+v; want admitted, degraded", d)
	}
	d = check("strict", false)
	if !d.Allowed || d.Reason != tollgate.ReasonOK || !d.Degraded || !rule(d, plans.QuotaRuleName).Degraded ||
		rule(d, "hourly").Degraded || rule(d, "hourly").Remaining != 9 {
		t.Errorf("hard quota, before the rebuild: %+v; want admitted, the quota degraded, hourly decided with 9 left", d)
	}

	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for _, id := range []string{"capped", "strict"} {
		m := limiter.SeedKeyOf(statekey.TenantMonthKey("tg:", id, plans.QuotaRuleName))
		_, err := store.SeedTallies(ctx, m, month, nil, true)
		testenv.Must(t, err)
	}
	d = check("capped", false)
	if !d.Allowed || d.Degraded || rule(d, "hourly").Remaining != 9 || rule(d, plans.SpendCapRuleName).Remaining != 1049 {
		t.Errorf("capped, after the rebuild: %+v; want admitted by the store, hourly untouched before (9 left), the cap 1049 left", d)
	}
	if d := check("strict", false); !d.Allowed || d.Degraded || rule(d, plans.QuotaRuleName).Remaining != 999 {
		t.Errorf("hard quota, after the rebuild: %+v; want admitted by the store, 999 left", d)
	}
}

// monthTenants returns a snapshot holder of two tenants whose month is
// counted: "capped", on an overage plan (1,000 included units, 2 minor
// units a unit past them) with a spend cap of 100 minor units, and
// "strict", on a plan with a hard quota of 1,000 units; both plans have
// an hourly GCRA rule of 10. secrets are the tenants' key secrets.
func monthTenants(t *testing.T) (holder *snapshot.Holder, secrets map[string]string) {
	t.Helper()
	now := time.Now().UTC()
	capMinor := int64(100)
	hourly := plans.Rule{Name: "hourly", Algorithm: limiter.GCRA, Limit: 10, PeriodUS: limiter.HourUS, Scope: plans.ScopeKey,
		Resource: "*", Mode: plans.ModeEnforce, FailureMode: plans.FailOpen}
	data := snapshot.Data{
		Plans: []plans.Plan{
			{ID: 1, Name: "metered", IncludedUnits: 1000, OverageUnitMinor: 2, QuotaMode: plans.QuotaOverage, Rules: []plans.Rule{hourly}},
			{ID: 2, Name: "hard", IncludedUnits: 1000, QuotaMode: plans.QuotaHard, Rules: []plans.Rule{hourly}},
		},
		Tenants: []tenants.Tenant{{ID: "capped", Name: "capped", PlanID: 1, Status: tenants.StatusActive},
			{ID: "strict", Name: "strict", PlanID: 2, Status: tenants.StatusActive}},
		Quota: quota.All{
			Plans:     map[int64]quota.PlanSettings{1: {PlanID: 1, SpendCapDefaultMinor: &capMinor}},
			PlanSince: map[string]time.Time{"capped": now.AddDate(0, -2, 0), "strict": now.AddDate(0, -2, 0)},
		},
		ServiceTokens: []auth.ServiceToken{},
	}
	secrets = map[string]string{}
	for i, id := range []string{"capped", "strict"} {
		secret, hash, _ := tenants.GenerateKey()
		data.Keys = append(data.Keys, tenants.Key{ID: fmt.Sprintf("key-%d", i), TenantID: id, Hash: hash})
		secrets[id] = secret
	}
	src := &fixedSource{data: data}
	holder = snapshot.NewHolder(snapshot.DataSource{Data: src.get}, nil)
	testenv.Must(t, holder.Reload(context.Background()))
	return holder, secrets
}
