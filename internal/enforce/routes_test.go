package enforce_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
)

// resources records the resources of the usage events it is handed, by
// tier.
type resources struct {
	mu   sync.Mutex
	seen map[string]map[string]int // tier → resource → events
}

func (r *resources) Record(ev tollgate.UsageEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]map[string]int{}
	}
	if r.seen[ev.Tier] == nil {
		r.seen[ev.Tier] = map[string]int{}
	}
	r.seen[ev.Tier][ev.Resource]++
}

func (r *resources) take() map[string]map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := r.seen
	r.seen = nil
	return seen
}

// TestUsageRecordsTheMatchedRoute: 300 distinct /items/N paths of a plan
// with the route GET /items/{id} are one resource in usage; a plan without
// routes records every path as (other); a refused key's usage names its
// plan's route too; rules keep matching the caller's resource, not its
// route.
func TestUsageRecordsTheMatchedRoute(t *testing.T) {
	ctx := context.Background()
	rule := func(name, resource string, limit int64) plans.Rule {
		return plans.Rule{Name: name, Algorithm: limiter.GCRA, Limit: limit, PeriodUS: limiter.HourUS, Burst: limit,
			Resource: resource, Scope: plans.ScopeKey, Mode: plans.ModeEnforce, FailureMode: plans.FailOpen}
	}
	routed, routedHash, _ := tenants.GenerateKey()
	plain, plainHash, _ := tenants.GenerateKey()
	revoked, revokedHash, _ := tenants.GenerateKey()
	past := time.Now().Add(-time.Hour)
	data := snapshot.Data{
		Plans: []plans.Plan{
			{ID: 1, Name: "routed", Routes: []string{"GET /items/{id}", "* /items/*"},
				Rules: []plans.Rule{rule("hourly", "*", 1000), rule("seven", "GET /items/7", 1)}},
			{ID: 2, Name: "plain", Rules: []plans.Rule{rule("hourly", "*", 1000)}},
			{ID: 3, Name: plans.AnonymousPlan, Routes: []string{"GET /items/{id}"}, Rules: []plans.Rule{
				{Name: "hourly", Algorithm: limiter.GCRA, Limit: 1000, PeriodUS: limiter.HourUS, Burst: 1000,
					Resource: "*", Scope: plans.ScopeIP, Mode: plans.ModeEnforce, FailureMode: plans.FailOpen}}},
		},
		Tenants: []tenants.Tenant{
			{ID: "tenant-routed", Name: "r", PlanID: 1, Status: tenants.StatusActive},
			{ID: "tenant-plain", Name: "p", PlanID: 2, Status: tenants.StatusActive},
		},
		Keys: []tenants.Key{
			{ID: "key-routed", TenantID: "tenant-routed", Hash: routedHash},
			{ID: "key-plain", TenantID: "tenant-plain", Hash: plainHash},
			{ID: "key-revoked", TenantID: "tenant-routed", Hash: revokedHash, RevokedAt: &past},
		},
	}
	holder := snapshot.NewHolder(snapshot.StaticSource(data), nil)
	testenv.Must(t, holder.Reload(ctx))
	rec := &resources{}
	checker := enforce.NewChecker(holder, limiter.NewMemoryStore(nil), enforce.CheckerConfig{Recorder: rec})
	check := func(r enforce.Request) enforce.Decision {
		t.Helper()
		r.Cost = 1
		d, err := checker.Check(ctx, r)
		testenv.Must(t, err)
		return d
	}
	want := func(what string, got map[string]int, wantRes map[string]int) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(wantRes) {
			t.Errorf("%s: usage by resource %v, want %v", what, got, wantRes)
		}
	}

	denied := 0
	for i := 1; i <= 300; i++ {
		if d := check(enforce.Request{Key: routed, Resource: fmt.Sprintf("GET /items/%d", i)}); !d.Allowed {
			denied++
		}
	}
	check(enforce.Request{Key: routed, Resource: "DELETE /items/9/parts/2"})
	check(enforce.Request{Key: routed, Resource: "GET /users/1"})
	check(enforce.Request{Key: routed, Resource: "*"})
	want("routed plan", rec.take()[tollgate.TierAuthenticated],
		map[string]int{"GET /items/{id}": 300, "* /items/*": 1, tollgate.ResourceOther: 1, tollgate.ResourceAny: 1})
	// The rule of GET /items/7 limited that one path: rules match the
	// caller's resource, not the route it is counted under.
	if d := check(enforce.Request{Key: routed, Resource: "GET /items/7"}); d.Allowed || d.Policy != "seven" || denied != 0 {
		t.Errorf("GET /items/7 again: allowed %v policy %s (%d denied before); want denied by seven only now", d.Allowed, d.Policy, denied)
	}
	rec.take()

	for i := 1; i <= 300; i++ {
		check(enforce.Request{Key: plain, Resource: fmt.Sprintf("GET /items/%d?page=%d", i, i)})
	}
	want("plan without routes", rec.take()[tollgate.TierAuthenticated], map[string]int{tollgate.ResourceOther: 300})

	if d := check(enforce.Request{Key: revoked, Resource: "GET /items/12"}); d.Reason != tollgate.ReasonKeyRevoked {
		t.Fatalf("revoked key: reason %s", d.Reason)
	}
	unknown, _, _ := tenants.GenerateKey()
	check(enforce.Request{Key: unknown, Resource: "GET /items/12"})
	want("refused keys", rec.take()[tollgate.TierAuthenticated], map[string]int{"GET /items/{id}": 1, tollgate.ResourceOther: 1})

	for i := 1; i <= 50; i++ {
		check(enforce.Request{IP: "203.0.113.9", Resource: fmt.Sprintf("GET /items/%d", i)})
	}
	check(enforce.Request{IP: "203.0.113.9", Resource: "POST /items/1"})
	want("anonymous", rec.take()[tollgate.TierAnonymous], map[string]int{"GET /items/{id}": 50, tollgate.ResourceOther: 1})
}

func TestNetwork(t *testing.T) {
	for _, c := range []struct {
		ip   string
		bits int
		want string
	}{
		{"203.0.113.7", 64, "203.0.113.7"},
		{"::ffff:203.0.113.7", 64, "203.0.113.7"},
		{"2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2::9", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::/48"},
		{"2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6"},
		{"fe80::1%eth0", 64, "fe80::/64"},
		{"not-an-ip", 64, "not-an-ip"},
	} {
		if got := enforce.Network(c.ip, c.bits); got != c.want {
			t.Errorf("Network(%q, %d) = %q, want %q", c.ip, c.bits, got, c.want)
		}
	}
}

// TestAnonymousIPv6ByNetwork: anonymous callers from one IPv6 /64 share
// one allowance, callers from another /64 have their own, and a /128
// setting counts every address alone.
func TestAnonymousIPv6ByNetwork(t *testing.T) {
	ctx := context.Background()
	data := snapshot.Data{Plans: []plans.Plan{{ID: 1, Name: plans.AnonymousPlan, Rules: []plans.Rule{
		{Name: "hourly", Algorithm: limiter.GCRA, Limit: 3, PeriodUS: limiter.HourUS, Burst: 3, Scope: plans.ScopeIP,
			Resource: "*", Mode: plans.ModeEnforce, FailureMode: plans.FailOpen},
	}}}}
	holder := snapshot.NewHolder(snapshot.StaticSource(data), nil)
	testenv.Must(t, holder.Reload(ctx))
	for _, c := range []struct {
		prefix  int
		allowed int // of the 6 checks from six addresses of one /64
	}{{0, 3}, {64, 3}, {128, 6}} {
		checker := enforce.NewChecker(holder, limiter.NewMemoryStore(nil), enforce.CheckerConfig{IPv6Prefix: c.prefix})
		allowed := 0
		for i := range 6 {
			d, err := checker.Check(ctx, enforce.Request{IP: "2001:db8:0:7::" + string(rune('a'+i)), Resource: "*", Cost: 1})
			testenv.Must(t, err)
			if d.Allowed {
				allowed++
			}
		}
		if allowed != c.allowed {
			t.Errorf("prefix %d: %d of 6 allowed from one /64, want %d", c.prefix, allowed, c.allowed)
		}
		d, err := checker.Check(ctx, enforce.Request{IP: "2001:db8:0:8::1", Resource: "*", Cost: 1})
		testenv.Must(t, err)
		if !d.Allowed {
			t.Errorf("prefix %d: another /64 was denied", c.prefix)
		}
	}
}

// TestOverridesApplyToChecks stores a plan and a tenant override in
// Postgres and checks through the snapshot the check API serves from: the
// override replaces the plan rule of its name for its tenant only, and an
// override with a new name adds a rule.
func TestOverridesApplyToChecks(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	plan := fixture.Plan(t, db, plans.Plan{Name: "pro", Rules: []plans.Rule{
		{Name: "hourly", Algorithm: limiter.GCRA, Limit: 100, PeriodUS: limiter.HourUS},
	}})
	small, plain := fixture.Tenant(t, db, "small", plan.ID), fixture.Tenant(t, db, "plain", plan.ID)
	smallKey, _ := fixture.Key(t, db, small.ID, "")
	plainKey, _ := fixture.Key(t, db, plain.ID, "")
	ts := tenants.NewStore(db)
	_, err := ts.SetOverrides(ctx, small.ID, []plans.Rule{
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
