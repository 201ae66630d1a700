package snapshot

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/tenants"
)

// TestSpendCapSharesTheQuotasTally: an overage plan's quota counts the
// whole month in the store (a tally), a hard one stops at its limit, and
// a capped tenant's spend cap runs on the tally's state, so that it holds
// from the month's first unit whenever it was set.
func TestSpendCapSharesTheQuotasTally(t *testing.T) {
	now := time.Date(2026, 11, 15, 0, 0, 0, 0, time.UTC)
	capMinor := int64(100)
	overage := plans.Plan{ID: 1, Name: "metered", IncludedUnits: 1000, OverageUnitMinor: 2, QuotaMode: plans.QuotaOverage}
	hard := plans.Plan{ID: 2, Name: "hard", IncludedUnits: 1000, QuotaMode: plans.QuotaHard}
	s := withMeta(Data{
		Plans:   []plans.Plan{overage, hard},
		Tenants: []tenants.Tenant{{ID: "capped", PlanID: 1, Status: tenants.StatusActive}, {ID: "strict", PlanID: 2, Status: tenants.StatusActive}},
		Quota: quota.All{
			Plans:     map[int64]quota.PlanSettings{1: {PlanID: 1, SpendCapDefaultMinor: &capMinor}},
			PlanSince: map[string]time.Time{"capped": now.AddDate(0, -2, 0), "strict": now.AddDate(0, -2, 0)},
		},
	}, now)
	rules := s.tenants[tenantIDBytes("capped")].Plan.Rules
	byName := map[string]Rule{}
	for _, r := range rules {
		byName[r.Name] = r
	}
	q, c := byName[plans.QuotaRuleName], byName[plans.SpendCapRuleName]
	if len(rules) != 2 || q.Name == "" || c.Name == "" {
		t.Fatalf("capped tenant's rules: %+v; want the quota and the cap", rules)
	}
	if !q.Tally || q.Params.Limit != TallyLimit || q.Limit != 1000 || c.Tally || c.Params.Limit != 1050 {
		t.Errorf("quota tally %v at %d (limit %d), cap tally %v at %d; want a tally of 1000 included and a cap of 1050",
			q.Tally, q.Params.Limit, q.Limit, c.Tally, c.Params.Limit)
	}
	if q.StateID != c.StateID {
		t.Errorf("the cap's state %x is not the quota's %x", c.StateID, q.StateID)
	}
	strict := s.tenants[tenantIDBytes("strict")].Plan.Rules[0]
	if strict.Tally || strict.Params.Limit != 1000 || strict.StateID != q.StateID {
		t.Errorf("hard quota: tally %v at %d, state %x; want no tally, 1000, the tenant's month state", strict.Tally, strict.Params.Limit, strict.StateID)
	}
	// A lost month is decided by each rule's failure mode: the cap's
	// closed, the quotas' open (limiter.Params.Seed).
	if q.Params.Seed != limiter.SeedOpen || c.Params.Seed != limiter.SeedClosed || strict.Params.Seed != limiter.SeedOpen {
		t.Errorf("seed modes: quota %v, cap %v, hard quota %v; want open, closed, open", q.Params.Seed, c.Params.Seed, strict.Params.Seed)
	}
}

// TestAnonymousQuotaIsNoTally: an anonymous plan's monthly quota counts
// per IP address, not a tenant's month: it is decided without a seed
// marker.
func TestAnonymousQuotaIsNoTally(t *testing.T) {
	anon := plans.Plan{ID: 1, Name: plans.AnonymousPlan, IncludedUnits: 100, QuotaMode: plans.QuotaHard}
	s := withMeta(Data{Plans: []plans.Plan{anon}}, time.Date(2026, 11, 15, 0, 0, 0, 0, time.UTC))
	if r := s.Anonymous().Rules[0]; r.Name != plans.QuotaRuleName || r.Params.Seed != limiter.SeedNone {
		t.Errorf("anonymous quota %q: seed %v, want none", r.Name, r.Params.Seed)
	}
}

// TestReported: a tally is reported as a shadow quota whose count stops
// at its limit is, with the month's count beside it.
func TestReported(t *testing.T) {
	tally := &Rule{Rule: plans.Rule{Limit: 10}, Params: limiter.Params{Limit: TallyLimit}, Tally: true}
	const month = 1_000
	stored := func(count int64) limiter.Result {
		return limiter.Result{Allowed: true, Remaining: TallyLimit - count, ResetAfterUS: month}
	}
	cases := []struct {
		name      string
		res       limiter.Result
		cost      int64
		want      limiter.Result
		wantCount int64
	}{
		{"within", stored(7), 3, limiter.Result{Allowed: true, Remaining: 3, ResetAfterUS: month}, 7},
		{"to the limit", stored(10), 3, limiter.Result{Allowed: true, Remaining: 0, ResetAfterUS: month}, 10},
		{"past it", stored(12), 3, limiter.Result{Allowed: false, Remaining: 1, ResetAfterUS: month, RetryAfterUS: month}, 12},
		{"far past it", stored(40), 1, limiter.Result{Allowed: false, Remaining: 0, ResetAfterUS: month, RetryAfterUS: month}, 40},
		{"more than the limit at once", stored(11), 11, limiter.Result{Allowed: false, Remaining: 10, ResetAfterUS: 0, RetryAfterUS: -1}, 11},
		{"a peek", stored(25), 0, limiter.Result{Allowed: false, Remaining: 0, ResetAfterUS: month, RetryAfterUS: month}, 25},
	}
	for _, c := range cases {
		got, count := tally.Reported(c.res, c.cost)
		if got != c.want || count != c.wantCount {
			t.Errorf("%s: got %+v, count %d; want %+v, count %d", c.name, got, count, c.want, c.wantCount)
		}
	}
	plain := &Rule{Rule: plans.Rule{Limit: 10}, Params: limiter.Params{Limit: 10}}
	if got, count := plain.Reported(limiter.Result{Allowed: true, Remaining: 4}, 2); got != (limiter.Result{Allowed: true, Remaining: 4}) || count != 6 {
		t.Errorf("a plain rule: %+v, count %d; want its result as it is, count 6", got, count)
	}
}

// TestUntilMonthReload: the snapshot reloads when a UTC month begins
// (jitter later), as a spend cap's units depend on the month.
func TestUntilMonthReload(t *testing.T) {
	for _, c := range []struct {
		now    time.Time
		jitter time.Duration
		want   time.Duration
	}{
		{time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC), 0, time.Second},
		{time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC), 0, time.Hour},
		{time.Date(2026, 12, 1, 0, 0, 0, 0, time.FixedZone("X", -3600)), 0, 31*24*time.Hour - time.Hour},
		{time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC), 5 * time.Second, 6 * time.Second},
		{time.Date(2026, 12, 1, 0, 0, 3, 0, time.UTC), 5 * time.Second, 2 * time.Second},
		{time.Date(2026, 12, 1, 0, 0, 5, 0, time.UTC), 5 * time.Second, 31 * 24 * time.Hour},
	} {
		if got := untilMonthReload(c.now, c.jitter); got != c.want {
			t.Errorf("%v, jitter %v: %v, want %v", c.now, c.jitter, got, c.want)
		}
	}
}
