package enforce

import (
	"net/http"
	"testing"
)

// TestHeadersOfABurstLimitedRule: with burst below the limit, Remaining
// counts down from the burst, and so does Used.
func TestHeadersOfABurstLimitedRule(t *testing.T) {
	d := &Decision{Allowed: true, NowUS: 1_800_000_000_000_000, governing: 0, Rules: []RuleResult{{
		Name: "hourly", Limit: 5000, WindowS: 3600, Allowed: true, Remaining: 99, ResetAfterMS: 720, capacity: 100,
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
