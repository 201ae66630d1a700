package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/testenv"
)

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
	slow := map[string]string{"TOLLGATE_REDIS_TIMEOUT": "5s"}
	bases := []string{f.startAPI(t, slow), f.startAPI(t, slow), f.startAPI(t, slow)}
	check := `{"key":"` + key + `","cost":10}`

	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := post(t, bases[i%3], f.token, check)
			if r.body["allowed"] == true {
				mu.Lock()
				ids = append(ids, r.body["lease_id"].(string))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
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
