package enforce

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// storeCalls counts the checks that reach its store; the breaker's
// probes, on a key ending "probe", are not counted.
type storeCalls struct {
	limiter.Store
	calls atomic.Int64
}

// newStoreCalls counts the checks on a store on a real Redis set up as
// cmd/api sets up its own (no retries, short timeouts).
func newStoreCalls(t *testing.T, r *testenv.RedisServer) *storeCalls {
	c := config.Redis{Addr: r.Addr(), Timeout: 250 * time.Millisecond, NoRetries: true}.Client()
	t.Cleanup(func() { c.Close() })
	return &storeCalls{Store: redisstore.New(c)}
}

func (s *storeCalls) Check(ctx context.Context, b limiter.Batch) (limiter.Outcome, error) {
	if !strings.HasSuffix(b.Requests[0].Key, "probe") {
		s.calls.Add(1)
	}
	return s.Store.Check(ctx, b)
}

// staticData is one plan per failure mode and one key on each.
func staticData(t *testing.T) (snapshot.Data, map[plans.FailureMode]string) {
	t.Helper()
	d := snapshot.Data{}
	keys := map[plans.FailureMode]string{}
	for i, mode := range []plans.FailureMode{plans.FailOpen, plans.FailClosed} {
		id := int64(i + 1)
		tenantID := "tenant-" + string(mode)
		d.Plans = append(d.Plans, plans.Plan{ID: id, Name: "fail-" + string(mode), Rules: []plans.Rule{
			plans.Rule{Name: "hourly", Algorithm: limiter.GCRA, Limit: 1000, PeriodUS: limiter.HourUS, FailureMode: mode}.WithDefaults(),
		}})
		d.Tenants = append(d.Tenants, tenants.Tenant{ID: tenantID, Name: tenantID, PlanID: id, Status: tenants.StatusActive})
		secret, hash, prefix := tenants.GenerateKey()
		d.Keys = append(d.Keys, tenants.Key{ID: "key-" + string(mode), TenantID: tenantID, Hash: hash, Prefix: prefix})
		keys[mode] = secret
	}
	return d, keys
}

// TestCheckerDecidesByFailureModesWhileTheCircuitIsOpen: with Redis
// killed, every check is a 200-worthy decision by its rule's failure
// mode, marked degraded, and none reaches Redis once the circuit is open;
// the metrics say so; once Redis is back checks are exact again.
func TestCheckerDecidesByFailureModesWhileTheCircuitIsOpen(t *testing.T) {
	ctx := context.Background()
	r := testenv.StartRedisServer(t)
	store := newStoreCalls(t, r)
	data, keys := staticData(t)
	holder := snapshot.NewHolder(snapshot.StaticSource(data), nil)
	if err := holder.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg, holder)
	checker := NewChecker(holder, store, CheckerConfig{Prefix: "t:", Metrics: metrics})
	t.Cleanup(checker.Close)
	check := func(mode plans.FailureMode) Decision {
		t.Helper()
		d, err := checker.Check(ctx, Request{Key: keys[mode], Resource: "GET /", Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := check(plans.FailClosed); !d.Allowed || d.Degraded {
		t.Fatalf("Redis up: %+v", d)
	}

	r.Kill()
	for range 3 {
		check(plans.FailOpen)
	}
	if !checker.breaker.Open() {
		t.Fatal("circuit still closed after three failed calls")
	}
	if got := gauge(t, reg, "tollgate_limiter_circuit_open"); got != 1 {
		t.Errorf("tollgate_limiter_circuit_open = %v, want 1", got)
	}
	reached := store.calls.Load()
	for range 100 {
		if d := check(plans.FailOpen); !d.Allowed || !d.Degraded || d.Reason != "ok" {
			t.Fatalf("fail-open rule, circuit open: allowed %v degraded %v reason %s", d.Allowed, d.Degraded, d.Reason)
		}
		if d := check(plans.FailClosed); d.Allowed || !d.Degraded || d.Reason != tollgate.ReasonUnavailable || d.RetryAfterMS != outageRetryMS {
			t.Fatalf("fail-closed rule, circuit open: allowed %v degraded %v reason %s retry %d", d.Allowed, d.Degraded, d.Reason, d.RetryAfterMS)
		}
	}
	if n := store.calls.Load() - reached; n != 0 {
		t.Errorf("%d checks reached Redis while the circuit was open", n)
	}
	if got := gauge(t, reg, "tollgate_limiter_circuit_rejected_total"); got != 200 {
		t.Errorf("tollgate_limiter_circuit_rejected_total = %v, want 200", got)
	}

	r.Start()
	testenv.WaitFor(t, 10*time.Second, "the circuit closed after Redis came back", func() bool { return !checker.breaker.Open() })
	if d := check(plans.FailClosed); !d.Allowed || d.Degraded {
		t.Errorf("Redis back: allowed %v degraded %v", d.Allowed, d.Degraded)
	}
	if got := gauge(t, reg, "tollgate_limiter_circuit_open"); got != 0 {
		t.Errorf("tollgate_limiter_circuit_open = %v after recovery, want 0", got)
	}
}

// failingStore answers every check with an error, as a store down.
type failingStore struct{}

func (failingStore) Check(context.Context, limiter.Batch) (limiter.Outcome, error) {
	return limiter.Outcome{}, errors.New("store down")
}

// TestADegradedRuleHasNoKnownRemaining: a decision governed by a rule its
// failure mode decided says its limit but no remaining or reset, which
// are not known; and an admission governed otherwise is governed by a
// rule the store decided, not by an unknown one's zero.
func TestADegradedRuleHasNoKnownRemaining(t *testing.T) {
	data, keys := staticData(t)
	holder := snapshot.NewHolder(snapshot.StaticSource(data), nil)
	testenv.Must(t, holder.Reload(context.Background()))
	checker := NewChecker(holder, failingStore{}, CheckerConfig{Prefix: "t:"})
	t.Cleanup(checker.Close)
	for mode, key := range keys {
		d, err := checker.Check(context.Background(), Request{Key: key, Resource: "GET /", Cost: 1})
		testenv.Must(t, err)
		if !d.Degraded || d.Remaining != nil || d.ResetAfterMS != nil {
			t.Errorf("%s, store down: degraded %v remaining %v reset %v; want degraded, no remaining or reset",
				mode, d.Degraded, d.Remaining, d.ResetAfterMS)
		}
		if mode == plans.FailClosed && (d.Limit == nil || *d.Limit != 1000) {
			t.Errorf("closed, store down: limit %v, want the denying rule's 1000", d.Limit)
		}
	}
	known := RuleResult{Name: "known", Mode: plans.ModeEnforce, Allowed: true, Remaining: 7}
	unknown := RuleResult{Name: "unknown", Mode: plans.ModeEnforce, Allowed: true, Degraded: true}
	for _, rules := range [][]RuleResult{{known, unknown}, {unknown, known}} {
		if g := governing(rules, true); rules[g].Name != "known" {
			t.Errorf("governing of %v: %s, want the rule the store decided", rules, rules[g].Name)
		}
	}
	// A shadow rule never governs an enforce rule, known or not.
	shadow := RuleResult{Name: "shadow", Mode: plans.ModeShadow, Allowed: true, Remaining: 3}
	for _, rules := range [][]RuleResult{{shadow, unknown}, {unknown, shadow}} {
		if g := governing(rules, true); rules[g].Name != "unknown" {
			t.Errorf("governing of %v: %s, want the enforce rule", rules, rules[g].Name)
		}
	}
}

// gauge returns the value of an unlabelled metric, or of the first series.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	v, _, ok := testenv.Metric(t, reg, name)
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	return v
}

// unconfirmedStore answers as its store does, adding
// limiter.ErrNotReplicated to every admission, as a Redis store whose
// replicas did not confirm a money call's writes in time.
type unconfirmedStore struct{ limiter.Store }

func (s unconfirmedStore) Check(ctx context.Context, b limiter.Batch) (limiter.Outcome, error) {
	out, err := s.Store.Check(ctx, b)
	if err == nil && out.Admitted {
		err = fmt.Errorf("test: %w", limiter.ErrNotReplicated)
	}
	return out, err
}

// TestUnconfirmedAdmissionIsAnsweredAsAdmitted: a check the store
// admitted, and took the units of, but whose writes no replica confirmed
// in time is answered admitted and degraded, on a fail-closed rule too:
// never refused after being charged. A refusal is answered as one.
func TestUnconfirmedAdmissionIsAnsweredAsAdmitted(t *testing.T) {
	ctx := context.Background()
	data, keys := staticData(t)
	holder := snapshot.NewHolder(snapshot.StaticSource(data), nil)
	testenv.Must(t, holder.Reload(ctx))
	mem := limiter.NewMemoryStore(nil)
	c := NewChecker(holder, unconfirmedStore{mem}, CheckerConfig{})
	for mode, key := range keys {
		d, err := c.Check(ctx, Request{Key: key, Resource: "GET /", Cost: 1000})
		testenv.Must(t, err)
		if !d.Allowed || !d.Degraded {
			t.Errorf("%s: allowed %v degraded %v, want an unconfirmed admission answered admitted and degraded", mode, d.Allowed, d.Degraded)
		}
		d, err = c.Check(ctx, Request{Key: key, Resource: "GET /", Cost: 1})
		testenv.Must(t, err)
		if d.Allowed || d.Degraded {
			t.Errorf("%s: over the limit: allowed %v degraded %v, want refused by the store", mode, d.Allowed, d.Degraded)
		}
	}
}
