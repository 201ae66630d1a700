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
