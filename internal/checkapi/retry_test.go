package checkapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
)

// denialRig is the check server's routes on Redis for one tenant of each
// kind of denial: "rated" (an hourly GCRA rule of 10, burst 10),
// "hard" (a hard monthly quota of 5 units), "capped" (an overage plan of
// 5 included units at 1 minor unit each past them, a spend cap of 3
// minor units: 8 units a month), "prepaid" (a prepaid balance of 5 units
// that denies past it) and "unbuilt" (the same, its counter not made yet
// in Redis). Every plan's rules but the spend cap fail open.
type denialRig struct {
	checker *enforce.Checker
	handler http.Handler
	token   string
	keys    map[string]string
}

// newDenialRig serves the rig's checks on client under prefix.
func newDenialRig(t *testing.T, client redis.Scripter, prefix string) *denialRig {
	t.Helper()
	ctx := context.Background()
	store := redisstore.New(client)
	fixture.SeedAll(t, store, prefix)

	wide := plans.Rule{Name: "hourly", Algorithm: limiter.GCRA, Limit: 1000, PeriodUS: limiter.HourUS, Burst: 1000,
		Scope: plans.ScopeKey, Resource: "*", Mode: plans.ModeEnforce, FailureMode: plans.FailOpen}
	narrow := wide
	narrow.Limit, narrow.Burst = 10, 10
	capMinor := int64(3)
	longAgo := time.Now().AddDate(0, -2, 0)
	data := snapshot.Data{
		Plans: []plans.Plan{
			{ID: 1, Name: "rated", Rules: []plans.Rule{narrow}},
			{ID: 2, Name: "hard", IncludedUnits: 5, QuotaMode: plans.QuotaHard, Rules: []plans.Rule{wide}},
			{ID: 3, Name: "metered", IncludedUnits: 5, OverageUnitMinor: 1, QuotaMode: plans.QuotaOverage, Rules: []plans.Rule{wide}},
			{ID: 4, Name: "prepaid", Rules: []plans.Rule{wide}},
		},
		Tenants: []tenants.Tenant{
			{ID: "rated", Name: "rated", PlanID: 1, Status: tenants.StatusActive},
			{ID: "hard", Name: "hard", PlanID: 2, Status: tenants.StatusActive},
			{ID: "capped", Name: "capped", PlanID: 3, Status: tenants.StatusActive},
			{ID: "prepaid", Name: "prepaid", PlanID: 4, Status: tenants.StatusActive},
			{ID: "unbuilt", Name: "unbuilt", PlanID: 4, Status: tenants.StatusActive},
		},
		Quota: quota.All{
			Plans:     map[int64]quota.PlanSettings{3: {PlanID: 3, SpendCapDefaultMinor: &capMinor}},
			PlanSince: map[string]time.Time{"rated": longAgo, "hard": longAgo, "capped": longAgo, "prepaid": longAgo, "unbuilt": longAgo},
		},
		Credits: credits.All{"prepaid": {Mode: credits.ModeDeny, Line: 5}, "unbuilt": {Mode: credits.ModeDeny, Line: 5}},
	}
	// The ledger's writer makes the balance's counter; nothing consumed yet.
	counter, clog := credits.Keys(prefix, "prepaid")
	if _, err := store.RebuildCredits(ctx, counter, clog, "", 0); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, tn := range data.Tenants {
		keys[tn.ID] = addKey(&data, tn.ID)
	}
	token := addServiceToken(t, &data, "retry")

	log := slog.New(slog.DiscardHandler)
	holder, checker := newChecker(t, data, store, prefix, log)
	t.Cleanup(checker.Close)
	h := NewHandler(Deps{Log: log, Holder: holder, Checker: checker, Registry: prometheus.NewRegistry(),
		PingPostgres: func(context.Context) error { return nil }, PingStore: func(context.Context) error { return nil }})
	return &denialRig{checker: checker, handler: h, token: token, keys: keys}
}

// check asks /v1/check for tenant's key and cost.
func (r *denialRig) check(t *testing.T, tenant string, cost int64) (enforce.Decision, http.Header) {
	t.Helper()
	body := fmt.Sprintf(`{"key":%q,"resource":"GET /x","cost":%d}`, r.keys[tenant], cost)
	req := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+r.token)
	res := httptest.NewRecorder()
	r.handler.ServeHTTP(res, req)
	if res.Code != http.StatusOK {
		t.Fatalf("check %s cost %d: %d %s", tenant, cost, res.Code, res.Body)
	}
	var d enforce.Decision
	testenv.Must(t, json.Unmarshal(res.Body.Bytes(), &d))
	return d, res.Header()
}

// forward asks /v1/forward-auth (nginx's way) for tenant's key and cost.
func (r *denialRig) forward(t *testing.T, tenant string, cost int64) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, ForwardAuthPath, nil)
	req.Header.Set(HeaderServiceToken, r.token)
	req.Header.Set("X-Original-URI", "/x")
	req.Header.Set("X-API-Key", r.keys[tenant])
	req.Header.Set(HeaderCost, strconv.FormatInt(cost, 10))
	req.RemoteAddr = "192.0.2.1:1234"
	res := httptest.NewRecorder()
	r.handler.ServeHTTP(res, req)
	return res
}

// denialCase is a denial to ask for on both doorways and what its wait
// must be.
type denialCase struct {
	name, tenant string
	spend, cost  int64 // spend is admitted first, once per tenant
	reason       string
	status       int // forward-auth's
	// retry is retry_after_ms: -1 (no wait lifts it: no Retry-After),
	// monthEnd (to the month's end), or a wait of at most that many ms.
	retry int64
}

// monthEnd stands for a wait to the end of the month in denialCase.
const monthEnd = -2

// wantDenial asks for c on /v1/check and /v1/forward-auth and fails t
// unless both deny it for its reason, with Retry-After the body's
// retry_after_ms in seconds rounded up, or no Retry-After when that is -1.
func (r *denialRig) wantDenial(t *testing.T, c denialCase) {
	t.Helper()
	for _, doorway := range []string{"check", "forward-auth"} {
		before := time.Now()
		retryMS, known := int64(0), false
		var h http.Header
		if doorway == "check" {
			var d enforce.Decision
			d, h = r.check(t, c.tenant, c.cost)
			if d.Allowed || d.Reason != c.reason {
				t.Fatalf("%s: %+v; want denied for %s", doorway, d, c.reason)
			}
			retryMS, known = d.RetryAfterMS, true
		} else {
			res := r.forward(t, c.tenant, c.cost)
			h = res.Header()
			if res.Code != c.status || h.Get(HeaderReason) != c.reason {
				t.Fatalf("%s: %d %s %s; want %d for %s", doorway, res.Code, h.Get(HeaderReason), res.Body, c.status, c.reason)
			}
		}
		got := h.Get("Retry-After")
		if c.retry == -1 {
			if got != "" {
				t.Errorf("%s: Retry-After %q; want none: no wait lifts the denial", doorway, got)
			}
			if known && retryMS != -1 {
				t.Errorf("%s: retry_after_ms %d, want -1", doorway, retryMS)
			}
			continue
		}
		lo, hi := int64(1), c.retry
		if c.retry == monthEnd {
			now := time.Now().UTC()
			end := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC)
			lo, hi = end.Sub(now).Milliseconds()-1000, end.Sub(before).Milliseconds()+1
		}
		if known && (retryMS < lo || retryMS > hi) {
			t.Errorf("%s: retry_after_ms %d, want within [%d, %d]", doorway, retryMS, lo, hi)
		}
		s, err := strconv.ParseInt(got, 10, 64)
		if err != nil || s < limiter.CeilDiv(lo, 1000) || s > limiter.CeilDiv(hi, 1000) {
			t.Errorf("%s: Retry-After %q; want within [%d, %d] s", doorway, got, limiter.CeilDiv(lo, 1000), limiter.CeilDiv(hi, 1000))
		}
		if known && s != limiter.CeilDiv(retryMS, 1000) {
			t.Errorf("%s: Retry-After %q with retry_after_ms %d; want it rounded up to seconds", doorway, got, retryMS)
		}
	}
}

// TestRetryAfterOfEachDenial: every denial whose wait is known carries
// Retry-After, the wait in seconds rounded up, on /v1/check and on
// /v1/forward-auth alike, and the body's retry_after_ms is that wait: a
// rate limit's, a monthly quota's or a spend cap's (the month's end),
// and a second for a balance Redis has no counter of yet. A denial no
// wait lifts — a cost above what the rule ever admits, prepaid credits
// exhausted — carries retry_after_ms -1 and no Retry-After.
func TestRetryAfterOfEachDenial(t *testing.T) {
	client, prefix := testenv.Redis(t)
	r := newDenialRig(t, client, prefix)
	spent := map[string]bool{}
	for _, c := range []denialCase{
		{"rate limited", "rated", 10, 1, tollgate.ReasonRateLimited, 429, limiter.HourUS / 10 / 1000},
		{"cost above the burst", "rated", 0, 11, tollgate.ReasonRateLimited, 429, -1},
		{"hard quota", "hard", 5, 1, tollgate.ReasonRateLimited, 429, monthEnd},
		{"cost above the quota", "hard", 0, 6, tollgate.ReasonRateLimited, 429, -1},
		{"spend cap", "capped", 8, 1, tollgate.ReasonSpendCap, 429, monthEnd},
		{"credits exhausted", "prepaid", 5, 1, tollgate.ReasonCreditsExhausted, 429, -1},
		{"credits not counted yet", "unbuilt", 0, 1, tollgate.ReasonUnavailable, 503, 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.spend > 0 && !spent[c.tenant] {
				if d, _ := r.check(t, c.tenant, c.spend); !d.Allowed {
					t.Fatalf("spending %d: %+v", c.spend, d)
				}
				spent[c.tenant] = true
			}
			r.wantDenial(t, c)
		})
	}
}

// TestRetryAfterWhileRedisIsDown: with Redis down, a check its failure
// modes deny is unavailable for a second, Retry-After: 1, whether a
// fail-closed rule (the spend cap) or a balance that denies past it
// (prepaid credits, whose rules fail open) denies it.
func TestRetryAfterWhileRedisIsDown(t *testing.T) {
	server := testenv.StartRedisServer(t)
	client := config.Redis{Addr: server.Addr(), Timeout: 250 * time.Millisecond, NoRetries: true}.Client()
	t.Cleanup(func() { client.Close() })
	r := newDenialRig(t, client, "t:")
	server.Kill()
	for _, c := range []denialCase{
		{"a fail-closed rule", "capped", 0, 1, tollgate.ReasonUnavailable, 503, 1000},
		{"a balance that denies", "prepaid", 0, 1, tollgate.ReasonUnavailable, 503, 1000},
	} {
		t.Run(c.name, func(t *testing.T) { r.wantDenial(t, c) })
	}
}

// TestSetHeadersAllocatesTwiceAtMost: the headers of a decision cost two
// allocations, allowed or denied, Retry-After included; one for a denial
// no rule governs.
func TestSetHeadersAllocatesTwiceAtMost(t *testing.T) {
	client, prefix := testenv.Redis(t)
	r := newDenialRig(t, client, prefix)
	decide := func(tenant string, cost int64) *enforce.Decision {
		t.Helper()
		d, err := r.checker.Check(context.Background(), enforce.Request{Key: r.keys[tenant], Resource: "GET /x", Cost: cost})
		testenv.Must(t, err)
		return &d
	}
	for _, c := range []struct {
		name  string
		d     *enforce.Decision
		retry bool
		want  float64
	}{
		{"allowed", decide("rated", 10), false, 2},
		{"rate limited", decide("rated", 1), true, 2},
		{"credits not counted yet", decide("unbuilt", 1), true, 1},
	} {
		h := http.Header{}
		setHeaders(h, c.d) // the map grows once
		if got := h.Get("Retry-After") != ""; got != c.retry {
			t.Errorf("%s: Retry-After %q; want one: %v", c.name, h.Get("Retry-After"), c.retry)
		}
		if n := testing.AllocsPerRun(100, func() { clear(h); setHeaders(h, c.d) }); n != c.want {
			t.Errorf("%s: %v allocations, want %v", c.name, n, c.want)
		}
	}
}
