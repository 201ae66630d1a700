package enforce

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

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
