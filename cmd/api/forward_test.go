package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// forwardAuth asks the check API's forward-auth endpoint as a gateway
// would: path below /v1/forward-auth (Envoy), headers as given.
func forwardAuth(t *testing.T, base, method, path string, headers map[string]string) gatewayResponse {
	t.Helper()
	return through(t, http.DefaultClient, method, base+"/v1/forward-auth"+path, headers)
}

// gateway returns headers a gateway with token sends for a client at ip,
// plus extra.
func gateway(token, ip string, extra map[string]string) map[string]string {
	h := map[string]string{"X-Tollgate-Service-Token": token, "X-Forwarded-For": ip}
	for k, v := range extra {
		h[k] = v
	}
	return h
}

// TestForwardAuth: the forward-auth endpoint's contract, gateway by
// gateway, without a gateway in front.
func TestForwardAuth(t *testing.T) {
	f := newFixture(t)
	base := f.startAPI(t, map[string]string{"TOLLGATE_FORWARD_KEY_QUERY": "api_key", "TOLLGATE_TRUSTED_PROXIES": "10.0.0.0/8"})

	t.Run("the gateway must authenticate", func(t *testing.T) {
		for name, h := range map[string]map[string]string{
			"no token":                 {"X-Forwarded-For": "203.0.113.1"},
			"bad token":                gateway("not-a-token", "203.0.113.1", nil),
			"token in the key's place": {"Authorization": "Bearer " + f.token},
		} {
			r := forwardAuth(t, base, "GET", "/repos", h)
			if r.status != http.StatusUnauthorized || r.header.Get("X-Tollgate-Reason") != "gateway_unauthorized" {
				t.Errorf("%s: %d reason %q, want 401 gateway_unauthorized", name, r.status, r.header.Get("X-Tollgate-Reason"))
			}
		}
		if r := forwardAuth(t, base, "GET", "/repos", gateway("Bearer "+f.token, "203.0.113.1", nil)); r.status != http.StatusOK {
			t.Errorf("token as Bearer: %d, want 200", r.status)
		}
	})

	t.Run("traefik headers, cost, and the client behind a trusted balancer", func(t *testing.T) {
		traefik := func(xff, cost string) map[string]string {
			return gateway(f.token, xff, map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/repos", "X-Tollgate-Cost": cost})
		}
		// The whole hour at once for 198.51.100.7, named by the balancer
		// (10.0.0.0/8, trusted) that Traefik saw; the left entry is the
		// client's own invention.
		r := forwardAuth(t, base, "GET", "", traefik("6.6.6.6, 198.51.100.7, 10.1.1.1", "60"))
		if r.status != http.StatusOK || r.header.Get("X-RateLimit-Remaining") != "0" || r.header.Get("X-Tollgate-Plan") != "anonymous" {
			t.Fatalf("cost 60: %d remaining %q plan %q", r.status, r.header.Get("X-RateLimit-Remaining"), r.header.Get("X-Tollgate-Plan"))
		}
		r = forwardAuth(t, base, "GET", "", traefik("7.7.7.7, 198.51.100.7", "1"))
		if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" || r.header.Get("X-Tollgate-Status") != "429" {
			t.Fatalf("after the hour: %d Retry-After %q, want 429 with Retry-After", r.status, r.header.Get("Retry-After"))
		}
		checkHeaders(t, r.check(), true)
		var p map[string]any
		if err := json.Unmarshal([]byte(r.body), &p); err != nil || p["code"] != "rate_limited" || p["status"] != float64(429) {
			t.Errorf("429 body %q, want a rate_limited problem", r.body)
		}
		if r := forwardAuth(t, base, "GET", "", traefik("198.51.100.8", "0")); r.status != http.StatusOK || r.header.Get("X-RateLimit-Remaining") != "60" {
			t.Errorf("another client peeking: %d remaining %q, want 200 and 60", r.status, r.header.Get("X-RateLimit-Remaining"))
		}
		if r := forwardAuth(t, base, "GET", "", traefik("198.51.100.8", "one")); r.status != http.StatusBadRequest ||
			!strings.Contains(r.body, "X-Tollgate-Cost") {
			t.Errorf("bad cost: %d %q, want 400 naming X-Tollgate-Cost", r.status, r.body)
		}
	})

	t.Run("envoy: the request itself names the resource", func(t *testing.T) {
		r := forwardAuth(t, base, "POST", "/v1/search?q=go", gateway(f.token, "203.0.113.2", map[string]string{"X-API-Key": f.keys["pro"]}))
		if r.status != http.StatusOK || r.header.Get("RateLimit-Policy") != `"search";q=10;w=1` {
			t.Fatalf("POST /v1/search: %d policy %q, want the search rule", r.status, r.header.Get("RateLimit-Policy"))
		}
		if r.header.Get("X-Tollgate-Tenant") != f.tenants["pro"].ID || r.header.Get("X-Tollgate-Key-Id") != f.keyIDs["pro"] {
			t.Errorf("tenant %q key %q", r.header.Get("X-Tollgate-Tenant"), r.header.Get("X-Tollgate-Key-Id"))
		}
	})

	t.Run("the key from a query parameter", func(t *testing.T) {
		r := forwardAuth(t, base, "GET", "", gateway(f.token, "203.0.113.3", map[string]string{"X-Original-URI": "/repos?api_key=" + f.keys["enterprise"]}))
		if r.status != http.StatusOK || r.header.Get("X-Tollgate-Plan") != "enterprise" {
			t.Errorf("query key: %d plan %q, want enterprise", r.status, r.header.Get("X-Tollgate-Plan"))
		}
	})

	t.Run("the original request named twice is refused", func(t *testing.T) {
		r := forwardAuth(t, base, "GET", "", gateway(f.token, "203.0.113.4", map[string]string{"X-Original-URI": "/a", "X-Forwarded-Uri": "/b"}))
		if r.status != http.StatusBadRequest {
			t.Errorf("%d, want 400", r.status)
		}
	})

	t.Run("nginx mode: 429 as 403 with X-Tollgate-Status", func(t *testing.T) {
		h := gateway(f.token, "203.0.113.5", map[string]string{"X-Original-URI": "/repos", "X-Tollgate-Deny-Status": "403", "X-Tollgate-Cost": "60"})
		if r := forwardAuth(t, base, "GET", "", h); r.status != http.StatusOK {
			t.Fatalf("the hour at once: %d, want 200", r.status)
		}
		h["X-Tollgate-Cost"] = "1"
		r := forwardAuth(t, base, "GET", "", h)
		if r.status != http.StatusForbidden || r.header.Get("X-Tollgate-Status") != "429" || r.header.Get("Retry-After") == "" {
			t.Errorf("%d status %q Retry-After %q, want 403 carrying 429", r.status, r.header.Get("X-Tollgate-Status"), r.header.Get("Retry-After"))
		}
		h["X-Tollgate-Deny-Status"] = "500"
		if r := forwardAuth(t, base, "GET", "", h); r.status != http.StatusBadRequest {
			t.Errorf("deny status 500: %d, want 400", r.status)
		}
	})

	t.Run("key reasons", func(t *testing.T) {
		revoked := f.revokedKey(t)
		unknown, _, _ := tenants.GenerateKey()
		for _, c := range []struct {
			key, reason string
			status      int
		}{
			{revoked, "key_revoked", 403},
			{unknown, "invalid_key", 401},
			{"tg_malformed", "invalid_key", 401},
			{f.keys["free"], "ok", 200},
		} {
			var r gatewayResponse
			waitFor(t, func() bool {
				r = forwardAuth(t, base, "GET", "/x", gateway(f.token, "203.0.113.6", map[string]string{"Authorization": "Bearer " + c.key}))
				return r.header.Get("X-Tollgate-Reason") == c.reason
			})
			if r.status != c.status {
				t.Errorf("%s: %d, want %d", c.reason, r.status, c.status)
			}
		}
	})
}

// TestForwardAuthDegraded: with Redis down, forward-auth decides as
// /v1/check does: fail-open rules let the request through (saying so),
// fail-closed ones answer 503 with Retry-After: 1 (403 in nginx mode).
func TestForwardAuthDegraded(t *testing.T) {
	f := newFixture(t)
	strictKey := f.failClosedKey(t)
	base := f.startAPI(t, map[string]string{"TOLLGATE_REDIS_ADDR": "127.0.0.1:1", "TOLLGATE_REDIS_TIMEOUT": "100ms"})

	r := forwardAuth(t, base, "GET", "/x", gateway(f.token, "203.0.113.9", map[string]string{"X-API-Key": f.keys["pro"]}))
	if r.status != http.StatusOK || r.header.Get("X-Tollgate-Degraded") != "true" {
		t.Errorf("fail-open: %d degraded %q, want 200 and true", r.status, r.header.Get("X-Tollgate-Degraded"))
	}
	r = forwardAuth(t, base, "GET", "/x", gateway(f.token, "203.0.113.9", map[string]string{"X-API-Key": strictKey}))
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" || r.header.Get("X-Tollgate-Reason") != "unavailable" {
		t.Errorf("fail-closed: %d Retry-After %q reason %q, want 503, 1, unavailable", r.status, r.header.Get("Retry-After"), r.header.Get("X-Tollgate-Reason"))
	}
	r = forwardAuth(t, base, "GET", "/x", gateway(f.token, "203.0.113.9", map[string]string{"X-API-Key": strictKey, "X-Tollgate-Deny-Status": "403"}))
	if r.status != http.StatusForbidden || r.header.Get("X-Tollgate-Status") != "503" {
		t.Errorf("fail-closed, nginx mode: %d status %q, want 403 carrying 503", r.status, r.header.Get("X-Tollgate-Status"))
	}
	// The metrics the alerts watch count them.
	resp, err := http.Get(base + "/metrics")
	testenv.Must(t, err)
	defer resp.Body.Close()
	metrics, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`tollgate_checks_degraded_total{decision="allowed"} 1`, `tollgate_checks_degraded_total{decision="denied"} 2`,
		"tollgate_store_errors_total 3"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
