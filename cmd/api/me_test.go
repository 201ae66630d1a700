package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/checkapi"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// getMe calls GET /v1/me with headers and decodes a 200 into st; it
// returns the status and, for an error, the problem.
func getMe(t *testing.T, base string, headers map[string]string, st *tollgate.Standing) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+checkapi.MePath, nil)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /v1/me: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		*st = tollgate.Standing{}
		if err := json.Unmarshal(raw, st); err != nil {
			t.Fatalf("GET /v1/me: %v in %s", err, raw)
		}
		return resp.StatusCode, resp.Header, nil
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("GET /v1/me %d: Content-Type %q, want application/problem+json", resp.StatusCode, ct)
	}
	var p map[string]any
	_ = json.Unmarshal(raw, &p)
	return resp.StatusCode, resp.Header, p
}

func bearer(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }

// meteredKey returns a key of a new tenant on a plan with a hard monthly
// quota of 100 units, a daily window per key and one per address.
func (f *fixture) meteredKey(t *testing.T) (secret string, tenant tenants.Tenant) {
	t.Helper()
	ctx := context.Background()
	daily := func(name string, limit int64, scope plans.Scope) plans.Rule {
		return plans.Rule{Name: name, Algorithm: limiter.FixedWindow, Limit: limit, PeriodUS: limiter.DayUS,
			Resource: "*", Scope: scope, Mode: plans.ModeEnforce, FailureMode: plans.FailOpen,
			Options: plans.Options{Calendar: string(limiter.CalendarDay)}}
	}
	metered, err := plans.NewStore(f.db).Put(ctx, plans.Plan{Name: "metered", IncludedUnits: 100, QuotaMode: plans.QuotaHard,
		Rules: []plans.Rule{daily("daily", 50, plans.ScopeKey), daily("per-ip", 20, plans.ScopeIP)}})
	testenv.Must(t, err)
	ts := tenants.NewStore(f.db)
	tenant, err = ts.Create(ctx, "metered-co", metered.ID)
	testenv.Must(t, err)
	secret, _, err = ts.IssueKey(ctx, tenant.ID, "k", nil)
	testenv.Must(t, err)
	return secret, tenant
}

// TestMe: GET /v1/me answers the caller's own key (no service token) with
// its tenant, plan and every rule with the remaining the checks see, and
// the month's quota; looking consumes nothing.
func TestMe(t *testing.T) {
	f := newFixture(t)
	key, tenant := f.meteredKey(t)
	base := f.startAPI(t, nil)
	for range 3 {
		if r := post(t, base, f.token, checkBody(key, "127.0.0.1", "GET /repos")); r.body["allowed"] != true {
			t.Fatalf("check: %v", r.body)
		}
	}
	var st tollgate.Standing
	for range 2 { // the second look sees what the first did: it consumed nothing
		if status, _, p := getMe(t, base, bearer(key), &st); status != http.StatusOK {
			t.Fatalf("GET /v1/me = %d %v", status, p)
		}
		if st.TenantID != tenant.ID || st.Tenant != "metered-co" || st.Plan != "metered" || st.KeyID == "" {
			t.Errorf("me = %+v, want tenant metered-co on plan metered", st)
		}
		want := map[string]int64{"daily": 47, "per-ip": 17, plans.QuotaRuleName: 97}
		if len(st.Rules) != len(want) {
			t.Fatalf("rules = %+v, want %d", st.Rules, len(want))
		}
		for _, rr := range st.Rules {
			if rr.Remaining != want[rr.Name] || rr.Limit == 0 || rr.WindowS == 0 || rr.Algorithm != string(limiter.FixedWindow) {
				t.Errorf("rule %+v, want remaining %d", rr, want[rr.Name])
			}
		}
		if q := st.Quota; q == nil || q.IncludedUnits != 100 || q.Used != 3 || q.Remaining != 97 || q.Mode != string(plans.ModeEnforce) {
			t.Errorf("quota = %+v, want 3 of 100 used", q)
		}
	}
	// The checks see the same numbers afterwards.
	r := post(t, base, f.token, checkBody(key, "127.0.0.1", "GET /repos"))
	if r.body["remaining"] != float64(16) {
		t.Errorf("check after looking: remaining %v, want 16 (%v)", r.body["remaining"], r.body)
	}

	// X-API-Key too; a plan without a quota has none.
	if status, _, p := getMe(t, base, map[string]string{"X-API-Key": f.keys["pro"]}, &st); status != http.StatusOK {
		t.Fatalf("GET /v1/me with X-API-Key = %d %v", status, p)
	}
	if st.Plan != "pro" || st.Quota != nil || len(st.Rules) != 2 {
		t.Errorf("pro: %+v, want its two rules and no quota", st)
	}
}

// deadKeys returns the secrets of two more keys of the free tenant: one
// revoked, one expired a minute ago.
func (f *fixture) deadKeys(t *testing.T) (revoked, expired string) {
	t.Helper()
	ctx := context.Background()
	ts := tenants.NewStore(f.db)
	revoked = f.revokedKey(t)
	past := time.Now().Add(-time.Minute)
	expired, _, err := ts.IssueKey(ctx, f.tenants["free"].ID, "expired", &past)
	testenv.Must(t, err)
	return revoked, expired
}

// TestMeRefusals: a missing or unknown key is 401, a revoked or expired
// one 403, a service token is not a key, and past the per-key limit the
// endpoint answers 429 without asking the store.
func TestMeRefusals(t *testing.T) {
	f := newFixture(t)
	revoked, expired := f.deadKeys(t)
	unknown, _, _ := tenants.GenerateKey()
	base := f.startAPI(t, nil)

	for _, tc := range []struct {
		name    string
		headers map[string]string
		status  int
		reason  string
	}{
		{"no key", nil, http.StatusUnauthorized, tollgate.ReasonKeyRequired},
		{"service token", bearer(f.token), http.StatusUnauthorized, tollgate.ReasonInvalidKey},
		{"unknown", bearer(unknown), http.StatusUnauthorized, tollgate.ReasonInvalidKey},
		{"revoked", bearer(revoked), http.StatusForbidden, tollgate.ReasonKeyRevoked},
		{"expired", map[string]string{"X-API-Key": expired}, http.StatusForbidden, tollgate.ReasonKeyExpired},
	} {
		var st tollgate.Standing
		status, h, p := getMe(t, base, tc.headers, &st)
		if status != tc.status || h.Get(checkapi.HeaderReason) != tc.reason || p["status"] != float64(tc.status) {
			t.Errorf("%s: %d %s %v, want %d %s", tc.name, status, h.Get(checkapi.HeaderReason), p, tc.status, tc.reason)
		}
	}

	var st tollgate.Standing
	for i := range checkapi.MeBurst {
		if status, _, p := getMe(t, base, bearer(f.keys["free"]), &st); status != http.StatusOK {
			t.Fatalf("look %d: %d %v", i+1, status, p)
		}
	}
	status, h, p := getMe(t, base, bearer(f.keys["free"]), &st)
	if status != http.StatusTooManyRequests || h.Get("Retry-After") != "1" || p["code"] != tollgate.ERATELIMITED {
		t.Errorf("look past the burst: %d Retry-After %q %v, want 429 after 1 s", status, h.Get("Retry-After"), p)
	}
	// Another key has its own allowance.
	if status, _, p := getMe(t, base, bearer(f.keys["pro"]), &st); status != http.StatusOK {
		t.Errorf("another key: %d %v", status, p)
	}
}

// TestMeStoreOutage: without the limiter store there is nothing to show:
// 503 with Retry-After, never a 500 or made-up numbers.
func TestMeStoreOutage(t *testing.T) {
	f := newFixture(t)
	base := f.startAPI(t, map[string]string{"TOLLGATE_REDIS_ADDR": "127.0.0.1:1", "TOLLGATE_REDIS_TIMEOUT": "100ms"})
	var st tollgate.Standing
	status, h, p := getMe(t, base, bearer(f.keys["pro"]), &st)
	if status != http.StatusServiceUnavailable || h.Get("Retry-After") != "1" || h.Get(checkapi.HeaderReason) != tollgate.ReasonUnavailable {
		t.Errorf("GET /v1/me without Redis = %d %v, want 503", status, p)
	}
}
