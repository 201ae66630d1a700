package checkapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter"
)

// TestHeadersOfABurstLimitedRule: with burst below the limit, Remaining
// counts down from the burst, and so does Used. (A Decision built by
// hand is governed by its first rule.)
func TestHeadersOfABurstLimitedRule(t *testing.T) {
	d := &enforce.Decision{Allowed: true, NowUS: 1_800_000_000_000_000, Rules: []enforce.RuleResult{{
		Name: "hourly", Limit: 5000, WindowS: 3600, Allowed: true, Remaining: 99, ResetAfterMS: 720, Capacity: 100,
	}}}
	h := http.Header{}
	SetHeaders(h, d)
	want := map[string]string{
		"RateLimit-Policy":      `"hourly";q=5000;w=3600`,
		"RateLimit":             `"hourly";r=99;t=1`,
		"X-RateLimit-Limit":     "5000",
		"X-RateLimit-Remaining": "99",
		"X-RateLimit-Used":      "1",
		"X-RateLimit-Reset":     "1800000001",
		"Retry-After":           "",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

// TestHeadersOfADegradedDecision: a rule its failure mode decided has no
// known remaining: its policy and limit are sent, and Retry-After on a
// denial, but no remaining, used or reset (a 0 would tell clients to back
// off from an admission).
func TestHeadersOfADegradedDecision(t *testing.T) {
	rule := enforce.RuleResult{Name: "hourly", Limit: 5000, WindowS: 3600, Allowed: true, Degraded: true, Capacity: 5000}
	for _, allowed := range []bool{true, false} {
		d := &enforce.Decision{Allowed: allowed, Degraded: true, NowUS: 1_800_000_000_000_000, Rules: []enforce.RuleResult{rule}}
		if !allowed {
			d.RetryAfterMS = 1000
		}
		h := http.Header{}
		SetHeaders(h, d)
		retry := map[bool]string{true: "", false: "1"}[allowed]
		for k, v := range map[string]string{"RateLimit-Policy": `"hourly";q=5000;w=3600`, "X-RateLimit-Limit": "5000", "Retry-After": retry,
			"RateLimit": "", "X-RateLimit-Remaining": "", "X-RateLimit-Used": "", "X-RateLimit-Reset": ""} {
			if got := h.Get(k); got != v {
				t.Errorf("allowed %v: %s = %q, want %q", allowed, k, got, v)
			}
		}
	}
}

// TestTheBearerSchemeInAnyCase: "Authorization: bearer …" is the same
// credential as "Bearer …" (RFC 9110: the scheme is case-insensitive), as
// forward-auth already took it.
func TestTheBearerSchemeInAnyCase(t *testing.T) {
	h, token, secrets := benchSetup(t, limiter.NewMemoryStore(nil), "t:", 1)
	for scheme, want := range map[string]int{"Bearer": 200, "bearer": 200, "BEARER": 200, "Basic": 401} {
		req := httptest.NewRequest("POST", "/v1/check", strings.NewReader(`{"key":"`+secrets[0]+`"}`))
		req.Header.Set("Authorization", scheme+" "+token)
		res := httptest.NewRecorder()
		h.ServeHTTP(res, req)
		if res.Code != want {
			t.Errorf("%s: %d %s, want %d", scheme, res.Code, res.Body, want)
		}
	}
}
