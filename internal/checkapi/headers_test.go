package checkapi

import (
	"net/http"
	"testing"

	"github.com/tollgate/tollgate/internal/enforce"
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
