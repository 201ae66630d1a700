package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// planKey stores plan p, a tenant on it and a key, and returns the key.
func (f *fixture) planKey(t *testing.T, p plans.Plan) string {
	t.Helper()
	ctx := context.Background()
	stored, err := plans.NewStore(f.db).Put(ctx, p)
	testenv.Must(t, err)
	ts := tenants.NewStore(f.db)
	tn, err := ts.Create(ctx, "t-"+p.Name, stored.ID)
	testenv.Must(t, err)
	secret, _, err := ts.IssueKey(ctx, tn.ID, "k", nil)
	testenv.Must(t, err)
	return secret
}

// tokenPlan is a plan of one hold-based rule: budget units per hour.
func tokenPlan(name string, budget int64, opts plans.Options) plans.Plan {
	opts.Hold = true
	return plans.Plan{Name: name, DisplayName: name, Currency: "USD", Rules: []plans.Rule{{
		Name: "tokens", Algorithm: limiter.GCRA, Limit: budget, PeriodUS: limiter.HourUS, Burst: budget,
		Resource: "*", Scope: plans.ScopeKey, Mode: plans.ModeEnforce, FailureMode: plans.FailClosed, Options: opts,
	}}}
}

// settle posts a settlement and returns the status and the decoded body.
func settle(t *testing.T, base, token, holdID string, cost int64) (int, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"hold_id": holdID, "cost": cost})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/settle", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/settle: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("settle answer %d is not JSON: %q", resp.StatusCode, raw)
	}
	return resp.StatusCode, m
}

func remaining(t *testing.T, base, token, key string) float64 {
	t.Helper()
	r := post(t, base, token, `{"key":"`+key+`","cost":0}`)
	return r.body["remaining"].(float64)
}

func TestHoldAndSettle(t *testing.T) {
	f := newFixture(t)
	key := f.planKey(t, tokenPlan("tokens", 100, plans.Options{}))
	key2 := f.planKey(t, tokenPlan("refunds", 100, plans.Options{}))
	base := f.startAPI(t, nil)

	r := post(t, base, f.token, `{"key":"`+key+`","cost":60,"hold":true}`)
	id, _ := r.body["hold_id"].(string)
	if r.body["allowed"] != true || id == "" || r.body["hold_expires_at"] == nil || r.body["remaining"] != 40.0 {
		t.Fatalf("hold of 60: %v", r.body)
	}
	code, st := settle(t, base, f.token, id, 10)
	if code != 200 || st["estimate"] != 60.0 || st["cost"] != 10.0 || st["status"] != "settled" || st["repeated"] != false {
		t.Fatalf("settle at 10: %d %v", code, st)
	}
	if got := remaining(t, base, f.token, key); got != 90 {
		t.Errorf("remaining after settling 60 at 10 = %v, want 90", got)
	}
	if code, st := settle(t, base, f.token, id, 10); code != 200 || st["repeated"] != true || st["cost"] != 10.0 {
		t.Errorf("repeated settle: %d %v", code, st)
	}
	if code, st := settle(t, base, f.token, id, 11); code != 409 {
		t.Errorf("settle at another cost: %d %v, want 409", code, st)
	}
	if code, st := settle(t, base, f.token, "not a hold", 1); code != 422 || !strings.Contains(fmt.Sprint(st), "hold_id") {
		t.Errorf("malformed hold ID: %d %v, want 422 naming hold_id", code, st)
	}
	if code, st := settle(t, base, f.token, id, -1); code != 422 || !strings.Contains(fmt.Sprint(st), "cost") {
		t.Errorf("negative cost: %d %v, want 422 naming cost", code, st)
	}

	// Beyond the estimate, past the limit: the caller owes it.
	r = post(t, base, f.token, `{"key":"`+key+`","cost":50,"hold":true}`)
	if code, st := settle(t, base, f.token, r.body["hold_id"].(string), 130); code != 200 || st["cost"] != 130.0 {
		t.Fatalf("settle 50 at 130: %d %v", code, st)
	}
	d := post(t, base, f.token, `{"key":"`+key+`","cost":1}`)
	if d.body["allowed"] != false || d.body["remaining"] != 0.0 {
		t.Errorf("check after overdrawing: %v, want denied", d.body)
	}
	// 10 + 130 units are charged: 40 over the budget of 100, so one unit
	// passes after 41 emission intervals (36 s each).
	if retry := d.body["retry_after_ms"].(float64); retry <= 40*36_000 || retry > 41*36_000 {
		t.Errorf("retry after overdrawing by 40 = %v ms, want within (1 440 000, 1 476 000]", retry)
	}

	// A refund to 0 (a failed upstream call) gives everything back.
	r = post(t, base, f.token, `{"key":"`+key2+`","cost":100,"hold":true}`)
	settle(t, base, f.token, r.body["hold_id"].(string), 0)
	if got := remaining(t, base, f.token, key2); got != 100 {
		t.Errorf("remaining after a refund to 0 = %v, want 100", got)
	}
}

// startSlowAPIs starts n api processes that wait up to 5 s for Redis:
// with a thousand requests at once on a shared machine, a slow answer
// must not be decided by the rule's failure mode. It returns their base
// URLs.
func (f *fixture) startSlowAPIs(t *testing.T, n int) []string {
	t.Helper()
	bases := make([]string, n)
	for i := range bases {
		bases[i] = f.startAPI(t, map[string]string{"TOLLGATE_REDIS_TIMEOUT": "5s"})
	}
	return bases
}

// admitted posts body n times at once, through bases in turn, and returns
// the id (the answer's field, hold_id or lease_id) of each check allowed.
func admitted(t *testing.T, bases []string, token, body string, n int, field string) []string {
	t.Helper()
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := post(t, bases[i%len(bases)], token, body)
			if id, ok := r.body[field].(string); ok && r.body["allowed"] == true {
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ids
}

// TestConcurrentHoldsNeverOverbook: 1,000 concurrent holds of one unit
// against a budget of 100, through three api processes, reserve exactly
// 100; settled at 0, they give everything back.
func TestConcurrentHoldsNeverOverbook(t *testing.T) {
	f := newFixture(t)
	key := f.planKey(t, tokenPlan("budget", 100, plans.Options{}))
	bases := f.startSlowAPIs(t, 3)
	ids := admitted(t, bases, f.token, `{"key":"`+key+`","cost":1,"hold":true}`, 1000, "hold_id")
	if len(ids) != 100 {
		t.Fatalf("%d holds admitted, want exactly 100", len(ids))
	}
	for i, id := range ids {
		if code, st := settle(t, bases[i%3], f.token, id, 0); code != 200 {
			t.Fatalf("settle: %d %v", code, st)
		}
	}
	if got := remaining(t, bases[0], f.token, key); got != 100 {
		t.Errorf("remaining after settling every hold at 0 = %v, want 100", got)
	}
}

// TestUnsettledHoldsExpire: 1,000 holds never settled give their units
// back once their TTL passes; none stays listed.
func TestUnsettledHoldsExpire(t *testing.T) {
	f := newFixture(t)
	// Holds open for 10 s: long enough that all 1,000 are still open when
	// counted, however slowly a loaded machine sends them.
	const ttl = 10 * time.Second
	key := f.planKey(t, tokenPlan("expiring", 1000, plans.Options{HoldTTLS: int64(ttl / time.Second)}))
	base := f.startSlowAPIs(t, 1)[0]
	start := time.Now()
	if ids := admitted(t, []string{base}, f.token, `{"key":"`+key+`","cost":1,"hold":true}`, 1000, "hold_id"); len(ids) != 1000 {
		t.Fatalf("%d holds admitted, want 1000", len(ids))
	}
	// The held units are gone; GCRA at 1,000 an hour gives one back every
	// 3.6 s, so only what refilled since the first hold may be there.
	refilled := float64(time.Since(start) / (time.Duration(limiter.HourUS) * time.Microsecond / 1000))
	if got := remaining(t, base, f.token, key); got > refilled {
		t.Fatalf("remaining with 1000 open holds = %v, want 0 (or the %v refilled since)", got, refilled)
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rdb.Close()
	testenv.Eventually(t, time.Now(), ttl+20*time.Second, "the holds expired: none listed, all units back", func() (bool, string) {
		n, err := rdb.ZCard(context.Background(), f.prefix+"holds").Result()
		testenv.Must(t, err)
		if n != 0 {
			return false, fmt.Sprintf("%d holds listed; want 0", n)
		}
		left := remaining(t, base, f.token, key)
		return left == 1000, fmt.Sprintf("no hold listed, remaining %v; want 1000", left)
	})
}

// inflightPlan is a plan of a concurrency rule (n in flight per key,
// leases of leaseTTL) beside a one-time budget of 10,000 units (a token
// bucket that never refills, so that what is left is exact).
func inflightPlan(name string, n int64, leaseTTL time.Duration) plans.Plan {
	return plans.Plan{Name: name, DisplayName: name, Currency: "USD", Rules: []plans.Rule{
		{Name: "inflight", Algorithm: limiter.Concurrency, Limit: n, PeriodUS: leaseTTL.Microseconds(),
			Resource: "*", Scope: plans.ScopeKey, Mode: plans.ModeEnforce, FailureMode: plans.FailClosed},
		{Name: "tokens", Algorithm: limiter.TokenBucket, Limit: 0, PeriodUS: limiter.HourUS, Burst: 10_000,
			Resource: "*", Scope: plans.ScopeKey, Mode: plans.ModeEnforce, FailureMode: plans.FailClosed},
	}}
}

// lease posts lease_id to /v1/renew or /v1/release and returns the status
// and the decoded body.
func lease(t *testing.T, base, token, op, id string) (int, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"lease_id": id})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/"+op, strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/%s: %v", op, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s answer %d is not JSON: %q", op, resp.StatusCode, raw)
	}
	return resp.StatusCode, m
}

// TestInFlightNeverExceedsTheLimit: through three api processes, 300
// requests at once under a concurrency rule of 5 take exactly 5 slots,
// and the 295 denied take nothing from the sibling budget; then 40
// workers check, renew and release through the three processes in turn
// for 600 requests, and the requests in flight never exceed 5.
func TestInFlightNeverExceedsTheLimit(t *testing.T) {
	f := newFixture(t)
	key := f.planKey(t, inflightPlan("inflight", 5, time.Hour))
	bases := f.startSlowAPIs(t, 3)
	check := `{"key":"` + key + `","cost":10}`

	ids := admitted(t, bases, f.token, check, 300, "lease_id")
	if len(ids) != 5 {
		t.Fatalf("%d of 300 requests admitted, want exactly 5", len(ids))
	}
	tokens := post(t, bases[0], f.token, `{"key":"`+key+`","cost":0}`)
	for _, rr := range tokens.body["rules"].([]any) {
		if r := rr.(map[string]any); r["name"] == "tokens" && r["remaining"] != 10_000.0-50 {
			t.Errorf("tokens after 5 admitted of cost 10: %v remaining, want 9950", r["remaining"])
		}
	}
	for i, id := range ids {
		if code, body := lease(t, bases[(i+1)%3], f.token, "release", id); code != 200 || body["released"] != true {
			t.Fatalf("release: %d %v", code, body)
		}
	}

	var inFlight, most, served atomic.Int64
	var wg sync.WaitGroup
	for w := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; served.Load() < 600; n++ {
				r := post(t, bases[(w+n)%3], f.token, check)
				if r.body["allowed"] != true {
					continue
				}
				now := inFlight.Add(1)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				id := r.body["lease_id"].(string)
				if code, body := lease(t, bases[(w+n+1)%3], f.token, "renew", id); code != 200 {
					t.Errorf("renew: %d %v", code, body)
				}
				served.Add(1)
				inFlight.Add(-1)
				if code, body := lease(t, bases[(w+n+2)%3], f.token, "release", id); code != 200 || body["released"] != true {
					t.Errorf("release: %d %v", code, body)
				}
			}
		}()
	}
	wg.Wait()
	if m := most.Load(); m > 5 || m < 1 {
		t.Errorf("at most %d requests in flight, want between 1 and 5", m)
	}
}

// TestLeaseAnswers: a check under a concurrency rule carries its lease
// and expiry; renewing moves the expiry; settling the check's hold
// releases the lease; a lease that expired frees its slot and cannot be
// renewed; a malformed lease ID is a 422 naming the field.
func TestLeaseAnswers(t *testing.T) {
	f := newFixture(t)
	key := f.planKey(t, inflightPlan("leases", 1, time.Second))
	base := f.startAPI(t, nil)
	check := `{"key":"` + key + `","cost":3}`

	r := post(t, base, f.token, `{"key":"`+key+`","cost":3,"hold":true}`)
	id, _ := r.body["lease_id"].(string)
	if r.body["allowed"] != true || id == "" || r.body["lease_expires_at"] == nil || r.body["hold_id"] != id {
		t.Fatalf("held check: %v, want a lease (named as its hold)", r.body)
	}
	if d := post(t, base, f.token, check); d.body["allowed"] != false || d.body["policy"] != "inflight" || d.body["lease_id"] != nil {
		t.Fatalf("second check in flight: %v, want denied by inflight, no lease", d.body)
	}
	code, body := lease(t, base, f.token, "renew", id)
	if code != 200 || body["lease_id"] != id || body["expires_at"] == nil {
		t.Errorf("renew: %d %v", code, body)
	}
	if code, st := settle(t, base, f.token, id, 2); code != 200 {
		t.Fatalf("settle: %d %v", code, st)
	}
	if code, body := lease(t, base, f.token, "release", id); code != 200 || body["released"] != false {
		t.Errorf("release after the settlement: %d %v, want released false", code, body)
	}

	// A client that never releases: its slot is free once the lease
	// (1 s) expires, and the lease cannot be renewed then.
	r = post(t, base, f.token, check)
	dead, _ := r.body["lease_id"].(string)
	if r.body["allowed"] != true || dead == "" {
		t.Fatalf("check after the settlement: %v, want admitted with a lease", r.body)
	}
	testenv.WaitFor(t, 10*time.Second, "the dead client's slot", func() bool {
		return post(t, base, f.token, `{"key":"`+key+`","cost":1,"dry_run":true}`).body["allowed"] == true &&
			post(t, base, f.token, check).body["allowed"] == true
	})
	if code, body := lease(t, base, f.token, "renew", dead); code != 404 {
		t.Errorf("renew of an expired lease: %d %v, want 404", code, body)
	}
	if code, body := lease(t, base, f.token, "renew", "not a lease"); code != 422 || !strings.Contains(jsonText(body), "lease_id") {
		t.Errorf("malformed lease ID: %d %v, want 422 naming lease_id", code, body)
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// giveBackBound is how long after units are given back in the store (a
// hold settled below its estimate or expired, a lease released) another
// api process may still deny them from its local denials: their longest
// life (enforce's maxDenialLife, a second), plus a margin for polling and
// the machine.
const giveBackBound = time.Second + 250*time.Millisecond

// TestLocalDenialsFollowGiveBacksAcrossProcesses: three api processes;
// a budget of 100 a week with holds. On process A a hold takes the whole
// budget and a check of 1 is denied, on every process, twice (the second
// from the local denials). Once the hold expires unsettled (a refund),
// or once it is settled at 0 on another process, every process admits a
// check of 1 within giveBackBound of the store showing the budget back;
// the process that settled admits at once.
func TestLocalDenialsFollowGiveBacksAcrossProcesses(t *testing.T) {
	f := newFixture(t)
	plan := plans.Plan{Name: "budget", DisplayName: "budget", Currency: "USD", Rules: []plans.Rule{{
		Name: "budget", Algorithm: limiter.GCRA, Limit: 100, PeriodUS: 604_800_000_000, Burst: 100,
		Resource: "*", Scope: plans.ScopeKey, Mode: plans.ModeEnforce, FailureMode: plans.FailClosed,
		Options: plans.Options{Hold: true},
	}}}
	ctx := context.Background()
	stored, err := plans.NewStore(f.db).Put(ctx, plan)
	testenv.Must(t, err)
	expiring, settling := f.tenantKey(t, stored.ID, "expiring"), f.tenantKey(t, stored.ID, "settling")
	nodes := []string{f.startAPI(t, nil), f.startAPI(t, nil), f.startAPI(t, nil)}
	check := func(node, key string, cost int, extra string) checkResponse {
		t.Helper()
		return post(t, node, f.token, fmt.Sprintf(`{"key":%q,"cost":%d%s}`, key, cost, extra))
	}
	denyEverywhere := func(key string) {
		t.Helper()
		for i, n := range nodes {
			for range 2 {
				if r := check(n, key, 1, ""); r.body["allowed"] != false {
					t.Fatalf("process %d: a check of 1 on a spent budget: %v", i, r.body)
				}
			}
		}
	}
	// everyoneAdmits waits for the store to show the budget back, then for
	// each process to admit a check of 1 within giveBackBound of that.
	everyoneAdmits := func(key string, what string) {
		t.Helper()
		// A check of cost 0 always asks the store.
		testenv.WaitFor(t, 10*time.Second, what+": the budget back in the store", func() bool {
			return remaining(t, nodes[1], f.token, key) >= 1
		})
		back := time.Now()
		for i, n := range nodes {
			testenv.Eventually(t, back, giveBackBound, fmt.Sprintf("%s: process %d admits", what, i), func() (bool, string) {
				r := check(n, key, 1, "")
				return r.body["allowed"] == true, fmt.Sprint(r.body["reason"])
			})
		}
	}

	// The hold expires unsettled: its 100 units are refunded.
	if r := check(nodes[0], expiring, 100, `,"hold":true,"hold_ttl_s":2`); r.body["allowed"] != true {
		t.Fatalf("hold of 100: %v", r.body)
	}
	denyEverywhere(expiring)
	everyoneAdmits(expiring, "expired hold")

	// The hold is settled at 0 on process B.
	r := check(nodes[0], settling, 100, `,"hold":true`)
	id, _ := r.body["hold_id"].(string)
	if r.body["allowed"] != true || id == "" {
		t.Fatalf("hold of 100: %v", r.body)
	}
	denyEverywhere(settling)
	if code, st := settle(t, nodes[1], f.token, id, 0); code != 200 {
		t.Fatalf("settle at 0: %d %v", code, st)
	}
	if r := check(nodes[1], settling, 1, ""); r.body["allowed"] != true {
		t.Errorf("the process that settled at 0 denies: %v", r.body)
	}
	everyoneAdmits(settling, "settled at 0")
}

// TestHoldsOnClusterForEveryHashTag: on Redis Cluster a hold's record
// shares its states' hash slot whatever the tenant's hash tag, those of
// 0x80 and above included: the check opens the hold, the settlement
// finds it, and a refund gives the units back.
func TestHoldsOnClusterForEveryHashTag(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	stored, err := plans.NewStore(f.db).Put(ctx, tokenPlan("tags", 100, plans.Options{}))
	testenv.Must(t, err)
	ts := tenants.NewStore(f.db)
	var low, high int
	keys := map[string]byte{}
	for i := 0; low < 2 || high < 2; i++ {
		if i > 200 {
			t.Fatal("no tenants of both halves of the hash tags")
		}
		tn, err := ts.Create(ctx, "tags-"+testenv.RandomID(4), stored.ID)
		testenv.Must(t, err)
		tag, _ := statekey.Compact(tn.ID)
		if tag >= 0x80 && high < 2 {
			high++
		} else if tag < 0x80 && low < 2 {
			low++
		} else {
			continue
		}
		key, _, err := ts.IssueKey(ctx, tn.ID, "k", nil)
		testenv.Must(t, err)
		keys[key] = tag
	}
	_, prefix := testenv.RedisCluster(t)
	base := f.startAPI(t, map[string]string{"TOLLGATE_REDIS_CLUSTER_ADDRS": strings.Join(testenv.RedisClusterAddrs(t), ","),
		"TOLLGATE_KEY_PREFIX": prefix})
	for key, tag := range keys {
		r := post(t, base, f.token, `{"key":"`+key+`","cost":60,"hold":true}`)
		id, _ := r.body["hold_id"].(string)
		if r.body["allowed"] != true || id == "" {
			t.Fatalf("tag %#x: hold of 60: %v", tag, r.body)
		}
		if code, st := settle(t, base, f.token, id, 0); code != 200 || st["status"] != "settled" {
			t.Fatalf("tag %#x: settle at 0: %d %v", tag, code, st)
		}
		if got := remaining(t, base, f.token, key); got != 100 {
			t.Errorf("tag %#x: remaining after a refund = %v, want 100", tag, got)
		}
	}
}
