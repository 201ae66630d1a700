package enforce

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// epochUS is an arbitrary, realistic start for injected clocks.
const epochUS int64 = 1_767_225_600_000_000 // 2026-01-01T00:00:00Z

// fakeClock is an injected clock, read as time (the checker's and the
// denials' local clock) and as µs (the stores' clock), always agreeing.
type fakeClock struct{ us atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.us.Store(epochUS)
	return c
}

func (c *fakeClock) Now() time.Time { return time.UnixMicro(c.us.Load()) }
func (c *fakeClock) US() int64      { return c.us.Load() }
func (c *fakeClock) Set(us int64)   { c.us.Store(us) }

// denialRules are rules of every algorithm whose state is remembered, small
// enough to be spent and refilled within a few hundred checks.
var denialRules = []struct {
	name string
	p    limiter.Params
}{
	{"gcra", limiter.Params{Algorithm: limiter.GCRA, Limit: 10, PeriodUS: limiter.SecondUS, Burst: 3}},
	{"token_bucket", limiter.Params{Algorithm: limiter.TokenBucket, Limit: 10, PeriodUS: limiter.SecondUS, Burst: 3}},
	{"leaky_shape", limiter.Params{Algorithm: limiter.LeakyBucket, Limit: 7, PeriodUS: limiter.SecondUS, Burst: 2, Shape: true}},
	{"fixed_window", limiter.Params{Algorithm: limiter.FixedWindow, Limit: 3, PeriodUS: limiter.SecondUS}},
	{"fixed_anchored", limiter.Params{Algorithm: limiter.FixedWindow, Limit: 3, PeriodUS: limiter.SecondUS, AnchorFirstRequest: true}},
	{"fixed_day", limiter.Params{Algorithm: limiter.FixedWindow, Limit: 3, Calendar: limiter.CalendarDay}},
	{"counter", limiter.Params{Algorithm: limiter.SlidingWindowCounter, Limit: 4, PeriodUS: limiter.SecondUS}},
	{"sliding_log", limiter.Params{Algorithm: limiter.SlidingWindowLog, Limit: 3, PeriodUS: limiter.SecondUS}},
	{"one_time", limiter.Params{Algorithm: limiter.TokenBucket, Limit: 0, PeriodUS: limiter.SecondUS, Burst: 2}},
}

// denialStores are the stores the local denials are held to: memory, and
// Redis with its time injected.
func denialStores(t *testing.T, clock *fakeClock) map[string]limiter.Store {
	c, _ := testenv.Redis(t)
	rs := redisstore.NewBatching(c, redisstore.BatchConfig{})
	rs.ExtraTTL = time.Hour // real time must not expire the injected time's keys
	return map[string]limiter.Store{"memory": limiter.NewMemoryStore(clock.US), "redis": rs}
}

// TestLocalDenialIsNeverGivenWhereTheStoreWouldAdmit drives every rule
// with random costs and times, sweeping every µs around the moments a
// remembered denial ends, while "another process" now and then spends
// units without the denials knowing. Whenever the denials answer a check
// locally, the store, asked the same (a dry run at the same time), must
// deny it too; and an entry must be gone from the moment its state could
// admit a check of cost 1.
func TestLocalDenialIsNeverGivenWhereTheStoreWouldAdmit(t *testing.T) {
	clock := newFakeClock()
	_, prefix := testenv.Redis(t)
	for storeName, store := range denialStores(t, clock) {
		for _, rule := range denialRules {
			t.Run(storeName+"/"+rule.name, func(t *testing.T) {
				d := newDenials(clock.Now)
				key := prefix + "{d}:" + rule.name
				reqs := []limiter.Request{{Key: key, Params: rule.p}}
				capacity := rule.p.EffectiveBurst()
				if rule.p.Algorithm != limiter.GCRA && rule.p.Algorithm != limiter.TokenBucket && rule.p.Algorithm != limiter.LeakyBucket {
					capacity = rule.p.Limit
				}
				ask := func(cost int64, dry bool) limiter.Outcome {
					t.Helper()
					out, err := store.Check(context.Background(), limiter.Batch{Requests: reqs, Cost: cost, DryRun: dry, NowUS: clock.US(), ReportState: true})
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				local, boundaries := 0, 0
				probe := func(cost int64) {
					t.Helper()
					b := limiter.Batch{Requests: reqs, Cost: cost, ReportState: true}
					out, ok := d.decide(b)
					if !ok {
						return
					}
					local++
					if peek := ask(cost, true); peek.Admitted {
						t.Fatalf("at +%dµs cost %d: denied locally (%+v), the store admits (%+v)", clock.US()-epochUS, cost, out.Results[0], peek.Results[0])
					}
					// Never outlives its state: a remembered denial of any
					// cost means the state still denies a cost of 1.
					if one := ask(1, true); one.Admitted {
						t.Fatalf("at +%dµs: entry alive though the store admits a cost of 1", clock.US()-epochUS)
					}
				}
				r := rand.New(rand.NewPCG(7, uint64(len(rule.name))))
				now := epochUS + r.Int64N(limiter.SecondUS)
				for step := 0; step < 250; step++ {
					now += r.Int64N(rule.p.PeriodUS/4 + 1)
					if rule.p.Calendar == limiter.CalendarDay {
						now += r.Int64N(limiter.SecondUS)
						if r.IntN(20) == 0 {
							now += r.Int64N(limiter.DayUS)
						}
					}
					clock.Set(now)
					cost := 1 + r.Int64N(capacity+1)
					if r.IntN(10) == 0 { // another process spends, unseen
						ask(1, false)
						continue
					}
					probe(cost)
					sent := d.localNowUS()
					out := ask(cost, false)
					d.observe(limiter.Batch{Requests: reqs, Cost: cost, ReportState: true}, out, sent)
					if out.Admitted || out.Results[0].RetryAfterUS <= 0 {
						continue
					}
					// Sweep around when the denied cost, and a cost of 1,
					// would pass: every µs from 3 before to 3 after.
					one := limiter.Decide(rule.p, out.States[0], now, 1)
					for _, at := range []int64{now + out.Results[0].RetryAfterUS, now + one.RetryAfterUS, now + maxDenialLife} {
						if at <= now {
							continue
						}
						boundaries++
						for x := at - 3; x <= at+3; x++ {
							if x <= now {
								continue
							}
							clock.Set(x)
							probe(cost)
							probe(1)
						}
					}
					clock.Set(now)
				}
				if rule.p.Algorithm == limiter.SlidingWindowLog {
					if local != 0 {
						t.Errorf("%d local denials of a sliding log (its state is not remembered)", local)
					}
					return
				}
				refills := rule.p.Limit > 0
				if local == 0 || (refills && boundaries == 0) {
					t.Errorf("%d local denials, %d boundaries swept: the test tested nothing", local, boundaries)
				}
			})
		}
	}
}

// TestDenialEntryNeverOutlivesItsState: a remembered denial is used up to
// the last µs its state denies a cost of 1 and gone at the first µs it
// admits one; one whose state never admits again is gone after
// maxDenialLife; an admission on the key forgets it.
func TestDenialEntryNeverOutlivesItsState(t *testing.T) {
	clock := newFakeClock()
	store := limiter.NewMemoryStore(clock.US)
	d := newDenials(clock.Now)
	decide := deciding(t, d, store)
	check := func(key string, p limiter.Params, cost int64) (limiter.Outcome, bool) {
		return decide(limiter.Batch{Requests: []limiter.Request{{Key: key, Params: p}}, Cost: cost, ReportState: true})
	}
	has := func(key string) bool {
		sh := d.shard(key)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		_, ok := sh.entries[key]
		return ok
	}

	// 10 per second, burst 2: after two at t0 the third is denied for
	// exactly 100 ms.
	p := limiter.Params{Algorithm: limiter.GCRA, Limit: 10, PeriodUS: limiter.SecondUS, Burst: 2}
	t0 := clock.US()
	check("g", p, 1)
	check("g", p, 1)
	if out, local := check("g", p, 1); local || out.Admitted || out.Results[0].RetryAfterUS != 100_000 {
		t.Fatalf("third: %+v local %v; want denied by the store for 100ms", out, local)
	}
	clock.Set(t0 + 100_000 - 1)
	if out, local := check("g", p, 1); !local || out.Admitted {
		t.Fatalf("1µs before it admits: %+v local %v; want denied locally", out, local)
	}
	clock.Set(t0 + 100_000)
	if _, local := check("g", p, 5); local || has("g") {
		t.Fatalf("when it admits a cost of 1: local %v, entry kept %v; want the entry gone, even for cost 5", local, has("g"))
	}

	// A spent one-time allowance never admits again: remembered for
	// maxDenialLife only.
	once := limiter.Params{Algorithm: limiter.TokenBucket, Limit: 0, PeriodUS: limiter.SecondUS, Burst: 1}
	t1 := clock.US()
	check("once", once, 1)
	check("once", once, 1)
	clock.Set(t1 + maxDenialLife - 1)
	if _, local := check("once", once, 1); !local {
		t.Fatal("spent allowance: not denied locally within maxDenialLife")
	}
	clock.Set(t1 + maxDenialLife)
	if _, local := check("once", once, 1); local {
		t.Fatal("spent allowance: still remembered after maxDenialLife")
	}

	// An admission forgets: cost 3 is denied (burst 2), but says nothing
	// about cost 1, which the store admits, dropping the entry.
	clock.Set(t1 + 20*limiter.SecondUS)
	if out, local := check("g", p, 3); local || out.Admitted {
		t.Fatalf("cost 3: %+v local %v; want denied by the store", out, local)
	}
	if has("g") {
		t.Fatal("a denial of cost 3 on a state that admits cost 1 was remembered")
	}
	if out, local := check("g", p, 1); local || !out.Admitted {
		t.Fatalf("cost 1 after a denial of cost 3: %+v local %v; want admitted by the store", out, local)
	}
}

// fixedSource holds snapshot data that the test changes between reloads.
type fixedSource struct {
	mu   sync.Mutex
	data snapshot.Data
}

func (s *fixedSource) get() snapshot.Data {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data
}

// TestNoLocalDenialAfterAPlanOrKeyChange: a caller denied and denied again
// locally is not denied locally once its rule's limit is raised, its
// tenant moves to another plan, an override changes the rule, or it
// presents a new key.
func TestNoLocalDenialAfterAPlanOrKeyChange(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	store := &storeCalls{Store: limiter.NewMemoryStore(clock.US)}
	hourly := func(limit int64) []plans.Rule {
		return []plans.Rule{{Name: "hourly", Algorithm: limiter.FixedWindow, Limit: limit, PeriodUS: limiter.HourUS,
			Resource: "*", Scope: plans.ScopeKey, Mode: plans.ModeEnforce, FailureMode: plans.FailOpen}}
	}
	secret1, hash1, _ := tenants.GenerateKey()
	secret2, hash2, _ := tenants.GenerateKey()
	src := &fixedSource{data: snapshot.Data{
		Plans:         []plans.Plan{{ID: 1, Name: "small", Rules: hourly(1)}, {ID: 2, Name: "other", Rules: hourly(1)}},
		Tenants:       []tenants.Tenant{{ID: "tenant-1", Name: "t", PlanID: 1, Status: tenants.StatusActive}},
		Keys:          []tenants.Key{{ID: "key-1", TenantID: "tenant-1", Hash: hash1}, {ID: "key-2", TenantID: "tenant-1", Hash: hash2}},
		ServiceTokens: []auth.ServiceToken{},
	}}
	holder := snapshot.NewHolder(snapshot.DataSource{Data: src.get}, nil)
	testenv.Must(t, holder.Reload(ctx))
	c := NewChecker(holder, store, CheckerConfig{})
	c.now = clock.Now
	c.denials = newDenials(clock.Now)
	check := func(secret string) (Decision, bool) {
		t.Helper()
		before := store.calls.Load()
		d, err := c.Check(ctx, Request{Key: secret, Resource: "GET /", Cost: 1})
		testenv.Must(t, err)
		return d, store.calls.Load() == before
	}
	// spend denies secret's allowance and checks that the next denial is
	// local.
	spend := func(secret string, limit int) {
		t.Helper()
		for i := 0; i < limit; i++ {
			if d, _ := check(secret); !d.Allowed {
				t.Fatalf("check %d of %d denied: %+v", i+1, limit, d.Rules)
			}
		}
		if d, local := check(secret); d.Allowed || local {
			t.Fatalf("over the limit: allowed %v local %v; want denied by the store", d.Allowed, local)
		}
		if d, local := check(secret); d.Allowed || !local || d.Reason != "rate_limited" {
			t.Fatalf("again: allowed %v local %v reason %s; want denied locally", d.Allowed, local, d.Reason)
		}
	}
	reload := func(change func(*snapshot.Data)) {
		t.Helper()
		src.mu.Lock()
		change(&src.data)
		src.mu.Unlock()
		testenv.Must(t, holder.Reload(ctx))
	}
	wantStoreAdmits := func(what, secret string) {
		t.Helper()
		if d, local := check(secret); local || !d.Allowed {
			t.Fatalf("%s: allowed %v local %v; want admitted by the store", what, d.Allowed, local)
		}
	}

	spend(secret1, 1)
	reload(func(d *snapshot.Data) { d.Plans[0].Rules = hourly(3) }) // the limit raised in place
	wantStoreAdmits("limit raised", secret1)
	spend(secret1, 1)
	reload(func(d *snapshot.Data) { d.Tenants[0].PlanID = 2 }) // another plan
	wantStoreAdmits("moved to another plan", secret1)
	spend(secret1, 0)
	reload(func(d *snapshot.Data) { d.Overrides = map[string][]plans.Rule{"tenant-1": hourly(5)} }) // the same state, a new limit
	wantStoreAdmits("override", secret1)
	spend(secret1, 3)
	wantStoreAdmits("another key of the tenant", secret2)
	reload(func(d *snapshot.Data) { now := clock.Now(); d.Keys[0].RevokedAt = &now })
	if d, _ := check(secret1); d.Reason != "key_revoked" {
		t.Errorf("revoked key: reason %s, want key_revoked", d.Reason)
	}
}

// TestDenialOfRulesSharingAKey: a spend cap and the monthly quota's tally
// share one state key with different limits; once the cap denies, later
// checks are denied locally on the shared entry, and a check the store
// would admit (a higher cap) still goes to it.
func TestDenialOfRulesSharingAKey(t *testing.T) {
	clock := newFakeClock()
	store := limiter.NewMemoryStore(clock.US)
	d := newDenials(clock.Now)
	tally := limiter.Params{Algorithm: limiter.FixedWindow, Limit: 1 << 52, Burst: 1 << 52, Calendar: limiter.CalendarMonth}
	capOf := func(n int64) limiter.Params {
		return limiter.Params{Algorithm: limiter.FixedWindow, Limit: n, Burst: n, Calendar: limiter.CalendarMonth}
	}
	decide := deciding(t, d, store)
	check := func(capUnits int64) (limiter.Outcome, bool) {
		return decide(limiter.Batch{Requests: []limiter.Request{{Key: "m", Params: tally, Shadow: true}, {Key: "m", Params: capOf(capUnits)}},
			Cost: 1, ReportState: true})
	}
	for range 3 {
		if out, local := check(3); !out.Admitted || local {
			t.Fatalf("within the cap: %+v local %v", out, local)
		}
	}
	if out, local := check(3); out.Admitted || local {
		t.Fatalf("past the cap: %+v local %v; want denied by the store", out, local)
	}
	if out, local := check(3); out.Admitted || !local {
		t.Fatalf("again: %+v local %v; want denied locally", out, local)
	}
	if out, local := check(5); !out.Admitted || local {
		t.Fatalf("a higher cap: %+v local %v; want admitted by the store", out, local)
	}
}

// TestNoLocalDenialOfASplitWindow: a global_split window is always
// decided by the store, which judges it on its share plus the units moved
// to the region and counts the region's demand as it does.
func TestNoLocalDenialOfASplitWindow(t *testing.T) {
	clock := newFakeClock()
	decide := deciding(t, newDenials(clock.Now), limiter.NewMemoryStore(clock.US))
	split := limiter.Params{Algorithm: limiter.FixedWindow, Limit: 3, PeriodUS: limiter.SecondUS, Split: true}
	for i := range 6 {
		out, local := decide(limiter.Batch{Requests: []limiter.Request{{Key: "s", Params: split}}, Cost: 1, ReportState: true})
		if local || out.Admitted != (i < 3) {
			t.Errorf("check %d: admitted %v, local %v; want %v by the store", i, out.Admitted, local, i < 3)
		}
	}
}

// deciding returns what decides a batch as the checker does: d when it
// can, else store, whose answer d then learns from; local reports the
// former.
func deciding(t *testing.T, d *denials, store limiter.Store) func(limiter.Batch) (out limiter.Outcome, local bool) {
	return func(b limiter.Batch) (limiter.Outcome, bool) {
		t.Helper()
		if out, ok := d.decide(b); ok {
			return out, true
		}
		sent := d.localNowUS()
		out, err := store.Check(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		d.observe(b, out, sent)
		return out, false
	}
}

// TestDenialForgottenWhenABucketIsEdited: a bucket's state is read through
// its parameters (a spent one-time allowance keeps its tokens, a
// refilling bucket a time), so a remembered denial of a bucket is not
// used once its limit or burst changed: the store decides.
func TestDenialForgottenWhenABucketIsEdited(t *testing.T) {
	clock := newFakeClock()
	d := newDenials(clock.Now)
	decide := deciding(t, d, limiter.NewMemoryStore(clock.US))
	once := limiter.Params{Algorithm: limiter.TokenBucket, Limit: 0, PeriodUS: limiter.SecondUS, Burst: 2}
	check := func(p limiter.Params) (limiter.Outcome, bool) {
		return decide(limiter.Batch{Requests: []limiter.Request{{Key: "b", Params: p}}, Cost: 1, ReportState: true})
	}
	check(once)
	check(once)
	if out, local := check(once); out.Admitted || local {
		t.Fatalf("spent: %+v local %v; want denied by the store", out, local)
	}
	if out, local := check(once); out.Admitted || !local {
		t.Fatalf("spent, again: %+v local %v; want denied locally", out, local)
	}
	refills := once
	refills.Limit = 10
	if _, local := check(refills); local {
		t.Fatal("a bucket edited to refill was denied from the remembered state of the one-time allowance")
	}
}

// holdingStore is a store that keeps holds and leases.
type holdingStore interface {
	limiter.Store
	limiter.Settler
	limiter.Leaser
}

// holdingCalls counts a holding store's checks.
type holdingCalls struct {
	holdingStore
	calls atomic.Int64
}

func (s *holdingCalls) Check(ctx context.Context, b limiter.Batch) (limiter.Outcome, error) {
	s.calls.Add(1)
	return s.holdingStore.Check(ctx, b)
}

// giveBackRules are a rule of every algorithm, each on its own resource,
// 5 units an hour (no refill within a test), holds on; and a concurrency
// rule of one slot.
var giveBackRules = []plans.Rule{
	giveBackRule("gcra", limiter.GCRA, plans.Options{}),
	giveBackRule("token_bucket", limiter.TokenBucket, plans.Options{}),
	giveBackRule("leaky_bucket", limiter.LeakyBucket, plans.Options{}),
	giveBackRule("fixed_window", limiter.FixedWindow, plans.Options{}),
	giveBackRule("fixed_month", limiter.FixedWindow, plans.Options{Calendar: "month"}),
	giveBackRule("counter", limiter.SlidingWindowCounter, plans.Options{}),
	giveBackRule("sliding_log", limiter.SlidingWindowLog, plans.Options{}),
}

func giveBackRule(name string, alg limiter.Algorithm, opts plans.Options) plans.Rule {
	opts.Hold = true
	return plans.Rule{Name: name, Algorithm: alg, Limit: 5, PeriodUS: limiter.HourUS, Burst: 5, Resource: "GET /" + name,
		Scope: plans.ScopeKey, Mode: plans.ModeEnforce, FailureMode: plans.FailClosed, Options: opts}
}

// TestLocalDenialsFollowGiveBacks: on every algorithm, a check denied by
// the store and then locally is answered as the store answers once this
// process gives the units back — a hold settled at 0, a hold expired
// with a refund, a lease released — at every step: the checker's answer
// equals a dry run's on the store (an oracle without local denials).
func TestLocalDenialsFollowGiveBacks(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	secret, hash, _ := tenants.GenerateKey()
	rules := append(append([]plans.Rule{}, giveBackRules...), plans.Rule{Name: "inflight", Algorithm: limiter.Concurrency,
		Limit: 1, PeriodUS: limiter.HourUS, Resource: "GET /inflight", Scope: plans.ScopeKey, Mode: plans.ModeEnforce,
		FailureMode: plans.FailClosed})
	src := &fixedSource{data: snapshot.Data{
		Plans:         []plans.Plan{{ID: 1, Name: "budget", Rules: rules}},
		Tenants:       []tenants.Tenant{{ID: "tenant-1", Name: "t", PlanID: 1, Status: tenants.StatusActive}},
		Keys:          []tenants.Key{{ID: "key-1", TenantID: "tenant-1", Hash: hash}},
		ServiceTokens: []auth.ServiceToken{},
	}}
	holder := snapshot.NewHolder(snapshot.DataSource{Data: src.get}, nil)
	testenv.Must(t, holder.Reload(ctx))

	rc, prefix := testenv.Redis(t)
	stores := map[string]holdingStore{
		"memory": limiter.NewMemoryStore(clock.US),
		"redis":  redisstore.New(rc),
	}
	for name, inner := range stores {
		t.Run(name, func(t *testing.T) {
			store := &holdingCalls{holdingStore: inner}
			c := NewChecker(holder, store, CheckerConfig{Prefix: prefix + name + ":"})
			c.now = clock.Now
			c.denials = newDenials(clock.Now)
			oracle := NewChecker(holder, store, CheckerConfig{Prefix: prefix + name + ":"})
			oracle.now = clock.Now
			oracle.denials = nil
			// check asks c, after the oracle's dry run of the same check,
			// and fails unless both answer alike; it reports whether c
			// answered without the store.
			check := func(t *testing.T, step string, r Request) (Decision, bool) {
				t.Helper()
				clock.Set(clock.US() + 1) // time goes on between calls
				r.Key = secret
				dry := r
				dry.DryRun, dry.Hold = true, false
				want, err := oracle.Check(ctx, dry)
				testenv.Must(t, err)
				before := store.calls.Load()
				got, err := c.Check(ctx, r)
				testenv.Must(t, err)
				if got.Allowed != want.Allowed {
					t.Fatalf("%s: allowed %v, the store says %v", step, got.Allowed, want.Allowed)
				}
				return got, store.calls.Load() == before
			}
			// denied sees a denial by the store and then one by the local
			// denials (none for a sliding log or a concurrency rule, whose
			// states are not remembered).
			denied := func(t *testing.T, step, resource string) {
				t.Helper()
				if d, local := check(t, step+": denied", Request{Resource: resource, Cost: 1}); d.Allowed || local {
					t.Fatalf("%s: allowed %v local %v, want denied by the store", step, d.Allowed, local)
				}
				d, local := check(t, step+": denied again", Request{Resource: resource, Cost: 1})
				remembered := resource != "GET /sliding_log" && resource != "GET /inflight" // their states are not kept
				if d.Allowed || local != remembered {
					t.Fatalf("%s: again allowed %v local %v", step, d.Allowed, local)
				}
			}
			for _, rule := range giveBackRules {
				t.Run(rule.Name, func(t *testing.T) {
					// A hold of the whole budget, settled at 0.
					h, _ := check(t, "hold", Request{Resource: rule.Resource, Cost: 5, Hold: true})
					if !h.Allowed || h.HoldID == "" {
						t.Fatalf("hold of 5: %+v", h)
					}
					denied(t, "held", rule.Resource)
					st, err := c.Settle(ctx, h.HoldID, 0)
					testenv.Must(t, err)
					if st.Cost != 0 {
						t.Fatalf("settlement %+v", st)
					}
					if d, _ := check(t, "settled at 0", Request{Resource: rule.Resource, Cost: 5}); !d.Allowed {
						t.Fatal("settled at 0: the budget is not back")
					}
					// The budget spent again by that check; a settlement
					// below its estimate.
					denied(t, "spent", rule.Resource)
					if name != "memory" {
						return // the Redis store expires holds on its own clock
					}
					clock.Set(clock.US() + 40*limiter.DayUS) // every window refilled
					h, _ = check(t, "hold to expire", Request{Resource: rule.Resource, Cost: 5, Hold: true, HoldTTLS: 2})
					if !h.Allowed {
						t.Fatalf("hold to expire: %+v", h)
					}
					denied(t, "held to expire", rule.Resource)
					clock.Set(clock.US() + 3*limiter.SecondUS)
					// Due, not yet expired: the store still denies.
					if d, _ := check(t, "due", Request{Resource: rule.Resource, Cost: 1}); d.Allowed {
						t.Fatal("a due hold not yet expired: admitted")
					}
					n, err := c.ExpireHolds(ctx, 100)
					testenv.Must(t, err)
					if n != 1 {
						t.Fatalf("expired %d holds, want 1", n)
					}
					if d, _ := check(t, "expired", Request{Resource: rule.Resource, Cost: 5}); !d.Allowed {
						t.Fatal("expired with a refund: the budget is not back")
					}
					clock.Set(clock.US() + 40*limiter.DayUS)
				})
			}
			t.Run("lease", func(t *testing.T) {
				l, _ := check(t, "lease", Request{Resource: "GET /inflight", Cost: 1})
				if !l.Allowed || l.LeaseID == "" {
					t.Fatalf("lease: %+v", l)
				}
				denied(t, "slot taken", "GET /inflight")
				rel, err := c.ReleaseLease(ctx, l.LeaseID)
				testenv.Must(t, err)
				if rel.Released == nil || !*rel.Released {
					t.Fatalf("release: %+v", rel)
				}
				if d, _ := check(t, "released", Request{Resource: "GET /inflight", Cost: 1}); !d.Allowed {
					t.Fatal("released: the slot is not free")
				}
			})
		})
	}
}

// TestDenialsForgetAGiveBackDuringTheCall: units given back while a
// check is under way leave its denial unremembered, and a denial taught
// before a give-back under its hash tag is not used after it; one under
// another tag is.
func TestDenialsForgetAGiveBackDuringTheCall(t *testing.T) {
	clock := newFakeClock()
	d := newDenials(clock.Now)
	store := limiter.NewMemoryStore(clock.US)
	p := limiter.Params{Algorithm: limiter.FixedWindow, Limit: 1, PeriodUS: limiter.HourUS}
	batch := func(key string) limiter.Batch {
		return limiter.Batch{Requests: []limiter.Request{{Key: key, Params: p}}, Cost: 1, ReportState: true}
	}
	teach := func(key string, giveBackDuring bool) {
		t.Helper()
		b := batch(key)
		sent := d.localNowUS()
		out, err := store.Check(context.Background(), b)
		testenv.Must(t, err)
		if giveBackDuring {
			d.givenBack('a')
		}
		clock.Set(clock.US() + 1)
		d.observe(b, out, sent)
	}
	for _, key := range []string{"tg:{a}x", "tg:{b}x"} {
		teach(key, false) // admitted
	}
	teach("tg:{a}x", true)
	if _, ok := d.decide(batch("tg:{a}x")); ok {
		t.Error("a denial taught while units were given back under its tag is used")
	}
	teach("tg:{a}x", false)
	teach("tg:{b}x", false)
	for _, key := range []string{"tg:{a}x", "tg:{b}x"} {
		if _, ok := d.decide(batch(key)); !ok {
			t.Fatalf("%s: not denied locally", key)
		}
	}
	clock.Set(clock.US() + 1)
	d.givenBack('a')
	clock.Set(clock.US() + 1)
	if _, ok := d.decide(batch("tg:{a}x")); ok {
		t.Error("a denial taught before a give-back under its tag is used after it")
	}
	if _, ok := d.decide(batch("tg:{b}x")); !ok {
		t.Error("a give-back under another tag forgot a denial")
	}
}
