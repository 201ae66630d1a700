package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/tollgate/tollgate/client"
)

// decide returns a check handler answering with a decision of reason;
// allowed decisions carry a pro plan's headers.
func decide(allowed bool, reason string, retryAfterMS, delayMS int64) http.HandlerFunc {
	body, _ := json.Marshal(map[string]any{
		"allowed": allowed, "reason": reason, "tier": "authenticated", "plan": "pro",
		"limit": 5000, "remaining": 4321, "reset_after_ms": 720, "retry_after_ms": retryAfterMS,
		"delay_ms": delayMS, "policy": "hourly", "degraded": false, "rules": []any{},
	})
	header := map[string]string{
		"RateLimit-Policy": `"hourly";q=5000;w=3600`, "RateLimit": `"hourly";r=4321;t=1`,
		"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "4321", "X-RateLimit-Used": "679",
		"X-RateLimit-Reset": "1795352110",
	}
	if retryAfterMS > 0 {
		header["Retry-After"] = fmt.Sprint((retryAfterMS + 999) / 1000)
	}
	return answer(nil, 200, header, string(body))
}

var proHeaders = map[string]string{
	"RateLimit-Policy": `"hourly";q=5000;w=3600`, "RateLimit": `"hourly";r=4321;t=1`,
	"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "4321", "X-RateLimit-Used": "679",
	"X-RateLimit-Reset": "1795352110",
}

func with(h map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// setHeaders returns a change to a request that sets the headers named
// and valued in pairs by kv.
func setHeaders(kv ...string) func(r *http.Request) {
	return func(r *http.Request) {
		for i := 0; i+1 < len(kv); i += 2 {
			r.Header.Set(kv[i], kv[i+1])
		}
	}
}

func TestMiddleware(t *testing.T) {
	ok := decide(true, "ok", 0, 0)
	cases := []struct {
		name     string
		check    http.HandlerFunc // nil: the check API is down
		failMode client.FailMode
		opts     client.MiddlewareOptions
		request  func(r *http.Request)

		wantStatus  int
		wantHandler bool
		wantCode    string            // the problem's code, when not the handler's answer
		wantHeader  map[string]string // "" means absent
		wantSent    map[string]any    // fields of the check
		skipped     bool              // no check is sent, no decision is in the context
	}{
		{name: "allowed: headers passed on, decision in context", check: ok,
			wantStatus: 200, wantHandler: true, wantHeader: with(proHeaders, "Retry-After", ""),
			wantSent: map[string]any{"ip": "192.0.2.1", "resource": "GET /repos/acme", "cost": 1.0}},
		{name: "rate limited", check: decide(false, "rate_limited", 30_000, 0),
			wantStatus: 429, wantCode: "rate_limited", wantHeader: with(proHeaders, "Retry-After", "30", "Content-Type", "application/problem+json")},
		{name: "rate limited beyond capacity", check: decide(false, "rate_limited", -1, 0),
			wantStatus: 429, wantCode: "rate_limited", wantHeader: with(proHeaders, "Retry-After", "")},
		{name: "spend cap", check: decide(false, "spend_cap", 86_400_000, 0),
			wantStatus: 429, wantCode: "spend_cap", wantHeader: map[string]string{"Retry-After": "86400"}},
		{name: "credits exhausted: 402, no Retry-After", check: decide(false, "credits_exhausted", -1, 0),
			wantStatus: 402, wantCode: "credits_exhausted", wantHeader: map[string]string{"Retry-After": ""}},
		{name: "invalid key", check: decide(false, "invalid_key", 0, 0),
			wantStatus: 401, wantCode: "invalid_key", wantHeader: map[string]string{"WWW-Authenticate": `Bearer error="invalid_token"`, "Content-Type": "application/problem+json"}},
		{name: "key required", check: decide(false, "key_required", 0, 0),
			wantStatus: 401, wantCode: "key_required", wantHeader: map[string]string{"WWW-Authenticate": "Bearer"}},
		{name: "revoked key", check: decide(false, "key_revoked", 0, 0), wantStatus: 403, wantCode: "key_revoked"},
		{name: "expired key", check: decide(false, "key_expired", 0, 0), wantStatus: 403, wantCode: "key_expired"},
		{name: "suspended tenant", check: decide(false, "tenant_suspended", 0, 0), wantStatus: 403, wantCode: "tenant_suspended"},
		{name: "a fail-closed rule could not be evaluated", check: decide(false, "unavailable", 1000, 0),
			wantStatus: 503, wantCode: "unavailable", wantHeader: map[string]string{"Retry-After": "1"}},
		{name: "unknown reason with a wait", check: decide(false, "quota_exhausted", 5000, 0),
			wantStatus: 429, wantCode: "quota_exhausted", wantHeader: map[string]string{"Retry-After": "5"}},
		{name: "unknown reason without a wait", check: decide(false, "geo_blocked", 0, 0),
			wantStatus: 403, wantCode: "geo_blocked"},
		{name: "OnLimited answers denials", check: decide(false, "rate_limited", 2500, 0),
			opts: client.MiddlewareOptions{OnLimited: func(w http.ResponseWriter, r *http.Request, d *client.Decision) {
				if c, _ := client.DecisionFrom(r.Context()); c != d {
					t.Error("OnLimited: the decision is not in the request's context")
				}
				w.WriteHeader(http.StatusTeapot)
				io.WriteString(w, d.Reason)
			}},
			wantStatus: 418, wantHeader: with(proHeaders, "Retry-After", "3")},
		{name: "Skip: no check, no decision", check: ok,
			opts:       client.MiddlewareOptions{Skip: func(r *http.Request) bool { return r.URL.Path == "/healthz" }},
			request:    func(r *http.Request) { r.URL.Path = "/healthz" },
			wantStatus: 200, wantHandler: true, wantHeader: map[string]string{"RateLimit": ""}, skipped: true},
		{name: "Skip false: checked", check: ok,
			opts:       client.MiddlewareOptions{Skip: func(r *http.Request) bool { return r.URL.Path == "/healthz" }},
			wantStatus: 200, wantHandler: true, wantSent: map[string]any{"resource": "GET /repos/acme"}},
		{name: "key from Authorization: Bearer, before X-API-Key", check: ok,
			request:    setHeaders("Authorization", "bearer tg_fromBearer", "X-API-Key", "tg_fromHeader"),
			wantStatus: 200, wantHandler: true, wantSent: map[string]any{"key": "tg_fromBearer", "ip": "192.0.2.1"}},
		{name: "key from X-API-Key when Authorization is not Bearer", check: ok,
			request:    setHeaders("Authorization", "Basic dXNlcjpwYXNz", "X-API-Key", "tg_fromHeader"),
			wantStatus: 200, wantHandler: true, wantSent: map[string]any{"key": "tg_fromHeader"}},
		{name: "no key: anonymous", check: ok,
			wantStatus: 200, wantHandler: true, wantSent: map[string]any{"key": nil, "ip": "192.0.2.1"}},
		{name: "forwarding headers are not trusted by default", check: ok,
			request:    setHeaders("X-Forwarded-For", "203.0.113.99", "X-Real-IP", "203.0.113.98"),
			wantStatus: 200, wantHandler: true, wantSent: map[string]any{"ip": "192.0.2.1"}},
		{name: "IPv6 remote address", check: ok,
			request:    func(r *http.Request) { r.RemoteAddr = "[2001:db8::7]:4000" },
			wantStatus: 200, wantHandler: true, wantSent: map[string]any{"ip": "2001:db8::7"}},
		{name: "the resource is the path as sent", check: ok,
			request:    func(r *http.Request) { *r = *httptest.NewRequest("DELETE", "/files/a%2Fb%00c?x=1", nil) },
			wantStatus: 200, wantHandler: true, wantSent: map[string]any{"resource": "DELETE /files/a%2Fb%00c"}},
		{name: "KeyFunc, IPFunc, ResourceFunc and Cost", check: ok,
			opts: client.MiddlewareOptions{
				KeyFunc:      func(r *http.Request) string { return r.URL.Query().Get("api_key") },
				IPFunc:       func(*http.Request) string { return "198.51.100.4" },
				ResourceFunc: func(*http.Request) string { return "search" },
				Cost:         func(*http.Request) int64 { return 7 },
			},
			request:    func(r *http.Request) { r.URL.RawQuery = "api_key=tg_q" },
			wantStatus: 200, wantHandler: true,
			wantSent: map[string]any{"key": "tg_q", "ip": "198.51.100.4", "resource": "search", "cost": 7.0}},
		{name: "shaping delay, then the handler", check: decide(true, "ok", 0, 2),
			wantStatus: 200, wantHandler: true, wantHeader: proHeaders},
		{name: "fail open: the handler runs", check: nil, failMode: client.FailOpen,
			wantStatus: 200, wantHandler: true},
		{name: "fail closed: 503", check: nil, failMode: client.FailClosed,
			wantStatus: 503, wantCode: "unavailable", wantHeader: map[string]string{"Retry-After": "1"}},
		{name: "a 200 that is not a decision, fail open: 500", check: answer(nil, 200, nil, `{"nope":1}`),
			failMode: client.FailOpen, wantStatus: 500, wantCode: "internal"},
		{name: "a 200 that is not a decision, fail closed: 500", check: answer(nil, 200, nil, `{"nope":1}`),
			failMode: client.FailClosed, wantStatus: 500, wantCode: "internal"},
		{name: "a load balancer's 404, fail open: 500", check: answer(nil, 404,
			map[string]string{"Content-Type": "text/html"}, "<h1>Not Found</h1>"),
			failMode: client.FailOpen, wantStatus: 500, wantCode: "internal"},
		{name: "a WAF's 403, fail open: 500", check: answer(nil, 403,
			map[string]string{"Content-Type": "text/html"}, "<html><body>403 Forbidden - Request blocked</body></html>"),
			request: setHeaders("Authorization", "Bearer ' OR 1=1 --"), failMode: client.FailOpen, wantStatus: 500, wantCode: "internal"},
		{name: "a proxy's 502, fail open: the handler runs", check: answer(nil, 502,
			map[string]string{"Content-Type": "text/html"}, "<h1>Bad Gateway</h1>"),
			failMode: client.FailOpen, wantStatus: 200, wantHandler: true},
		{name: "a proxy's 429, fail closed: 503", check: answer(nil, 429,
			map[string]string{"Content-Type": "text/plain"}, "slow down"),
			failMode: client.FailClosed, wantStatus: 503, wantCode: "unavailable", wantHeader: map[string]string{"Retry-After": "1"}},
		{name: "the check API refuses the service token: 500", check: answer(nil, 401,
			map[string]string{"Content-Type": "application/problem+json"}, `{"status":401,"code":"unauthorized","title":"Unauthorized"}`),
			wantStatus: 500, wantCode: "internal"},
		{name: "OnError", check: answer(nil, 422, map[string]string{"Content-Type": "application/problem+json"},
			`{"status":422,"code":"invalid","errors":{"ip":"must be an IPv4 or IPv6 address"}}`),
			opts: client.MiddlewareOptions{
				IPFunc: func(*http.Request) string { return "not an address" },
				OnError: func(w http.ResponseWriter, r *http.Request, err error) {
					var p *client.ProblemError
					if !errors.As(err, &p) || p.Errors["ip"] == "" {
						t.Errorf("OnError got %v, want the 422 naming ip", err)
					}
					w.WriteHeader(http.StatusBadRequest)
				},
			},
			wantStatus: 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var sent map[string]any
			url := downURL()
			if c.check != nil {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					_ = json.NewDecoder(r.Body).Decode(&sent)
					mu.Unlock()
					c.check(w, r)
				}))
				defer srv.Close()
				url = srv.URL
			}
			tg := newClient(t, url, client.Options{FailMode: c.failMode})
			handlerRan := false
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				handlerRan = true
				d, ok := client.DecisionFrom(r.Context())
				if c.skipped {
					if ok {
						t.Error("a skipped request has a decision in its context")
					}
				} else if !ok || !d.Allowed {
					t.Errorf("handler: decision %+v, %v; want an allowed one", d, ok)
				}
				io.WriteString(w, "handled")
			})
			r := httptest.NewRequest("GET", "/repos/acme", nil)
			if c.request != nil {
				c.request(r)
			}
			w := httptest.NewRecorder()
			tg.Middleware(c.opts)(handler).ServeHTTP(w, r)

			if w.Code != c.wantStatus {
				t.Errorf("status = %d, want %d (body %s)", w.Code, c.wantStatus, w.Body)
			}
			if handlerRan != c.wantHandler {
				t.Errorf("handler ran = %v, want %v", handlerRan, c.wantHandler)
			}
			for name, want := range c.wantHeader {
				if got := w.Header().Get(name); got != want {
					t.Errorf("header %s = %q, want %q", name, got, want)
				}
			}
			if c.wantCode != "" {
				var p struct {
					Type, Title, Detail, Code string
					Status                    int
				}
				if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
					t.Errorf("Content-Type = %q, want application/problem+json", ct)
				}
				if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
					t.Fatalf("body %q: %v", w.Body, err)
				}
				if p.Code != c.wantCode || p.Status != c.wantStatus || p.Title != http.StatusText(c.wantStatus) || p.Detail == "" {
					t.Errorf("problem = %+v, want code %q, status %d with its title and a detail", p, c.wantCode, c.wantStatus)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if c.skipped && sent != nil {
				t.Errorf("check sent for a skipped request: %v", sent)
			}
			for field, want := range c.wantSent {
				if got := sent[field]; got != want {
					t.Errorf("check field %s = %v, want %v (sent %v)", field, got, want, sent)
				}
			}
		})
	}
}

func TestDecisionFromWithoutMiddleware(t *testing.T) {
	if d, ok := client.DecisionFrom(context.Background()); ok || d != nil {
		t.Errorf("DecisionFrom = %v, %v; want none", d, ok)
	}
}

func TestMethodAndPathIsCutToWhatTheServerAccepts(t *testing.T) {
	// 2-byte runes straddle byte 1024: the cut must not split one.
	r := httptest.NewRequest("GET", "/", nil)
	r.URL.Path = "/" + strings.Repeat("é", 600)
	r.URL.RawPath = ""
	got := client.MethodAndPath(r)
	if len(got) > 1024 || !utf8.ValidString(got) || !strings.HasPrefix(got, "GET /%C3%A9") {
		t.Errorf("MethodAndPath = %d bytes, valid UTF-8 %v, %.20q…; want at most 1024 valid bytes", len(got), utf8.ValidString(got), got)
	}
	r.URL.Path = "/é" + strings.Repeat("a", 2000)
	r.URL.RawPath = "/é" + strings.Repeat("a", 2000) // not a valid encoding: Go re-encodes
	if got := client.MethodAndPath(r); len(got) > 1024 || !utf8.ValidString(got) {
		t.Errorf("MethodAndPath = %d bytes, valid %v; want at most 1024 valid bytes", len(got), utf8.ValidString(got))
	}
}

func TestForwardedFor(t *testing.T) {
	ip := client.ForwardedFor(netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8"))
	cases := []struct {
		name   string
		remote string
		xff    []string
		want   string
	}{
		{"direct caller: header ignored", "198.51.100.9:1", []string{"203.0.113.7"}, "198.51.100.9"},
		{"one trusted proxy", "10.0.0.1:1", []string{"203.0.113.7"}, "203.0.113.7"},
		{"forged entries left of the proxy's are ignored", "10.0.0.1:1", []string{"1.1.1.1, 203.0.113.7"}, "203.0.113.7"},
		{"two trusted proxies", "10.0.0.1:1", []string{"203.0.113.7, 10.0.0.2"}, "203.0.113.7"},
		{"several header lines", "10.0.0.1:1", []string{"1.1.1.1", "203.0.113.7, 10.9.9.9"}, "203.0.113.7"},
		{"trusted IPv6 proxy", "[fd00::1]:1", []string{"2001:db8::7"}, "2001:db8::7"},
		{"IPv4-mapped proxy address", "[::ffff:10.0.0.1]:1", []string{"203.0.113.7"}, "203.0.113.7"},
		{"no header", "10.0.0.1:1", nil, "10.0.0.1"},
		{"only proxies", "10.0.0.1:1", []string{"10.0.0.3, 10.0.0.2"}, "10.0.0.3"},
		{"garbage stops the walk", "10.0.0.1:1", []string{"203.0.113.7, garbage, 10.0.0.2"}, "10.0.0.2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.remote
			for _, v := range c.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := ip(r); got != c.want {
				t.Errorf("ip = %q, want %q", got, c.want)
			}
		})
	}
}

func TestAPIKey(t *testing.T) {
	cases := []struct {
		auth, apiKey, want string
	}{
		{"Bearer tg_a", "", "tg_a"},
		{"BEARER  tg_a ", "", "tg_a"},
		{"Bearer ", "tg_b", "tg_b"},
		{"Basic xyz", "tg_b", "tg_b"},
		{"", " tg_b ", "tg_b"},
		{"", "", ""},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "/", nil)
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		if c.apiKey != "" {
			r.Header.Set("X-API-Key", c.apiKey)
		}
		if got := client.APIKey(r); got != c.want {
			t.Errorf("APIKey(Authorization %q, X-API-Key %q) = %q, want %q", c.auth, c.apiKey, got, c.want)
		}
	}
}

// TestRouteResourceCannotBeDodged: however a client spells the path of a
// route, and with HEAD for GET, the middleware checks the route's
// resource, whether it knows the mux, reads the request's pattern inside
// it, or knows neither and cleans the path.
func TestRouteResourceCannotBeDodged(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	checks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Resource string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		seen = append(seen, req.Resource)
		mu.Unlock()
		decide(true, "ok", 0, 0)(w, r)
	}))
	t.Cleanup(checks.Close)
	tg := newClient(t, checks.URL, client.Options{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	newMux := func(wrap func(http.Handler) http.Handler) *http.ServeMux {
		mux := http.NewServeMux()
		mux.Handle("GET /v1/search", wrap(handler))
		mux.Handle("POST /v1/search", wrap(handler))
		mux.Handle("GET /repos/{owner}/{$}", wrap(handler))
		return mux
	}
	plain := tg.Middleware(client.MiddlewareOptions{})
	withMux := newMux(func(h http.Handler) http.Handler { return h })
	setups := map[string]http.Handler{
		"Mux option":              tg.Middleware(client.MiddlewareOptions{Mux: withMux})(withMux),
		"inside the mux":          newMux(plain),
		"no mux: the path, clean": plain(handler),
	}
	cases := []struct{ method, target, want, wantNoMux string }{
		{"POST", "/v1/search", "POST /v1/search", ""},
		{"POST", "/v1/%73earch", "POST /v1/search", ""},
		{"POST", "/v1//search", "POST /v1/search", ""},
		{"POST", "/v1/./search", "POST /v1/search", ""},
		{"POST", "/v1/x/../search?x=1", "POST /v1/search", ""},
		{"GET", "/v1/search", "GET /v1/search", ""},
		{"HEAD", "/v1/search", "GET /v1/search", ""},
		{"HEAD", "/v1/%73earch", "GET /v1/search", ""},
		{"GET", "/repos/acme/", "GET /repos/{owner}/", "GET /repos/acme"},
	}
	for name, h := range setups {
		t.Run(name, func(t *testing.T) {
			for _, c := range cases {
				mu.Lock()
				seen = nil
				mu.Unlock()
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(c.method, c.target, nil))
				want := c.want
				if name == "no mux: the path, clean" && c.wantNoMux != "" {
					want = c.wantNoMux
				}
				mu.Lock()
				got := seen
				mu.Unlock()
				// Inside the mux, a path the mux redirects to its clean
				// form reaches no handler, so nothing is checked.
				if name == "inside the mux" && len(got) == 0 && w.Code/100 == 3 {
					continue
				}
				if len(got) != 1 || got[0] != want {
					t.Errorf("%s %s: checked %q, want %q", c.method, c.target, got, want)
				}
			}
		})
	}
}

func TestRouteResourceFallsBackToTheEscapedPath(t *testing.T) {
	r := httptest.NewRequest("GET", "/a%00b//c", nil)
	if got := client.RouteResource(nil)(r); got != "GET /a%00b/c" {
		t.Errorf("RouteResource = %q, want GET /a%%00b/c", got)
	}
}

// TestMiddlewareRefusesOverLongKeys: a key the check API could not even
// be asked about (its body would pass 16 KiB) is a 401 invalid_key, not
// the 500 of a refused check, and no check is sent.
func TestMiddlewareRefusesOverLongKeys(t *testing.T) {
	var calls atomic.Int64
	checks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.ContentLength > 16<<10 { // as the check API does
			writeTestProblem(w, http.StatusRequestEntityTooLarge, "too_large", "the body is larger than 16384 bytes", nil)
			return
		}
		decide(true, "ok", 0, 0)(w, r)
	}))
	defer checks.Close()
	handler := newClient(t, checks.URL, client.Options{}).Middleware(client.MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the handler ran for an over-long key")
	}))
	r := httptest.NewRequest(http.MethodGet, "/repos/acme", nil)
	r.Header.Set("X-API-Key", strings.Repeat("k", 17<<10))
	w := httptest.NewRecorder()
	handler.ServeHTTP(w, r)
	var p struct{ Code string }
	_ = json.Unmarshal(w.Body.Bytes(), &p)
	if w.Code != http.StatusUnauthorized || p.Code != client.ReasonInvalidKey || w.Header().Get("WWW-Authenticate") == "" {
		t.Errorf("status %d, code %q, WWW-Authenticate %q; want a 401 invalid_key with WWW-Authenticate",
			w.Code, p.Code, w.Header().Get("WWW-Authenticate"))
	}
	if calls.Load() != 0 {
		t.Errorf("%d checks sent, want none", calls.Load())
	}
}

// TestMiddlewareStripsTheCostHeader: Tollgate-Cost never reaches the
// caller of a request that holds nothing either, whether the handler
// writes a body, a status alone, or nothing.
func TestMiddlewareStripsTheCostHeader(t *testing.T) {
	checks := httptest.NewServer(decide(true, "ok", 0, 0))
	defer checks.Close()
	mw := newClient(t, checks.URL, client.Options{}).Middleware(client.MiddlewareOptions{})
	cases := map[string]http.HandlerFunc{
		"a body": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(client.CostHeader, "7")
			io.WriteString(w, "done")
		},
		"a status": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(client.CostHeader, "7")
			w.WriteHeader(http.StatusAccepted)
		},
		"nothing": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(client.CostHeader, "7")
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(mw(h))
			defer srv.Close()
			resp, err := http.Get(srv.URL + "/v1/repos")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if v := resp.Header.Get(client.CostHeader); v != "" || resp.Header.Get("RateLimit") == "" {
				t.Errorf("%s = %q, RateLimit %q; want no %s and the decision's headers", client.CostHeader, v, resp.Header.Get("RateLimit"), client.CostHeader)
			}
		})
	}
}

// TestMiddlewareLetsHandlersHijack: the writer the middleware hands a
// handler still lets it take the connection over (a WebSocket upgrade).
func TestMiddlewareLetsHandlersHijack(t *testing.T) {
	checks := httptest.NewServer(decide(true, "ok", 0, 0))
	defer checks.Close()
	srv := httptest.NewServer(newClient(t, checks.URL, client.Options{}).Middleware(client.MiddlewareOptions{})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hj, ok := w.(http.Hijacker)
			if !ok {
				t.Error("the writer is not an http.Hijacker")
				return
			}
			conn, buf, err := hj.Hijack()
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			defer conn.Close()
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
			buf.Flush()
		})))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hijacked" {
		t.Errorf("body %q, want the hijacker's", body)
	}
}
