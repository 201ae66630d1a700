package client_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/testenv"
)

// newClock returns a clock a test moves by hand.
func newClock() *testenv.Clock {
	return testenv.NewClock(time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC))
}

// answer returns a handler that answers every check with status, headers
// and body, and counts the checks in calls.
func answer(calls *atomic.Int64, status int, header map[string]string, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if calls != nil {
			calls.Add(1)
		}
		for k, v := range header {
			w.Header().Set(k, v)
		}
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func newClient(t *testing.T, url string, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.New(url, "service-token", opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// receive returns the next value sent on ch, failing t with failure when
// none comes within the wait.
func receive[T any](t *testing.T, ch <-chan T, within time.Duration, failure string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatal(failure)
	}
	var zero T
	return zero
}

// downURL returns the URL of a server that no longer listens.
func downURL() string {
	s := httptest.NewServer(http.NotFoundHandler())
	s.Close()
	return s.URL
}

func TestNewRefusesBadSettings(t *testing.T) {
	cases := []struct {
		name, url, token, want string
	}{
		{"no scheme", "tollgate:8080", "t", "base URL"},
		{"ftp", "ftp://tollgate", "t", "base URL"},
		{"no host", "http://", "t", "base URL"},
		{"query", "http://tollgate:8080/?x=1", "t", "no query"},
		{"empty token", "http://tollgate:8080", " ", "service token is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := client.New(c.url, c.token, client.Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New(%q) error = %v, want one containing %q", c.url, err, c.want)
			}
		})
	}
}

func TestCheckSendsTheRequest(t *testing.T) {
	cases := []struct {
		name string
		req  client.CheckRequest
		want map[string]any
	}{
		{"key", client.CheckRequest{Key: "tg_k"}, map[string]any{"key": "tg_k", "cost": 1.0}},
		{"anonymous", client.CheckRequest{IP: "203.0.113.7", Resource: "GET /repos", Cost: 5},
			map[string]any{"ip": "203.0.113.7", "resource": "GET /repos", "cost": 5.0}},
		{"peek", client.CheckRequest{IP: "203.0.113.7", Cost: 5, Peek: true}, map[string]any{"ip": "203.0.113.7", "cost": 0.0}},
		{"dry run", client.CheckRequest{Key: "tg_k", IP: "2001:db8::1", DryRun: true},
			map[string]any{"key": "tg_k", "ip": "2001:db8::1", "cost": 1.0, "dry_run": true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got map[string]any
			var header http.Header
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				header = r.Header
				if r.Method != http.MethodPost || r.URL.Path != "/v1/check" {
					t.Errorf("request %s %s, want POST /v1/check", r.Method, r.URL.Path)
				}
				_ = json.NewDecoder(r.Body).Decode(&got)
				answer(nil, 200, nil, `{"allowed":true,"reason":"ok","tier":"anonymous","retry_after_ms":0,"degraded":false,"rules":[]}`)(w, r)
			}))
			defer srv.Close()
			if _, err := newClient(t, srv.URL+"/", client.Options{}).Check(context.Background(), c.req); err != nil {
				t.Fatalf("Check: %v", err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("body = %v, want %v", got, c.want)
			}
			if h := header.Get("Authorization"); h != "Bearer service-token" {
				t.Errorf("Authorization = %q, want the service token", h)
			}
			if h := header.Get("Content-Type"); h != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", h)
			}
		})
	}
}

// contractDecision is the example of the contract (check-api.md).
const contractDecision = `{
  "allowed": false, "reason": "rate_limited", "tier": "authenticated",
  "tenant_id": "t-1", "key_id": "k-1", "plan": "pro",
  "limit": 5000, "remaining": 0, "reset_after_ms": 1200, "retry_after_ms": 720,
  "policy": "hourly", "degraded": false, "some_future_field": {"ignored": true},
  "rules": [
    {"name": "hourly", "algorithm": "gcra", "mode": "enforce", "limit": 5000, "window_s": 3600,
     "allowed": false, "remaining": 0, "reset_after_ms": 1200, "retry_after_ms": 720},
    {"name": "shape", "algorithm": "leaky_bucket", "mode": "shadow", "limit": 10, "window_s": 1,
     "allowed": true, "remaining": 3, "reset_after_ms": 700, "retry_after_ms": 0, "delay_ms": 40, "would_deny": true, "degraded": true}
  ]
}`

func TestCheckDecodesTheDecision(t *testing.T) {
	srv := httptest.NewServer(answer(nil, 200, map[string]string{
		"RateLimit-Policy": `"hourly";q=5000;w=3600`, "RateLimit": `"hourly";r=0;t=2`,
		"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "0", "X-RateLimit-Used": "5000",
		"X-RateLimit-Reset": "1795352110", "Retry-After": "1", "Set-Cookie": "a=b", "X-Other": "x",
	}, contractDecision))
	defer srv.Close()
	d, err := newClient(t, srv.URL, client.Options{}).Check(context.Background(), client.CheckRequest{Key: "tg_k"})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	wantHeader := http.Header{
		"Ratelimit-Policy": {`"hourly";q=5000;w=3600`}, "Ratelimit": {`"hourly";r=0;t=2`},
		"X-Ratelimit-Limit": {"5000"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Used": {"5000"},
		"X-Ratelimit-Reset": {"1795352110"}, "Retry-After": {"1"},
	}
	want := &client.Decision{
		Allowed: false, Reason: client.ReasonRateLimited, Tier: client.TierAuthenticated,
		TenantID: "t-1", KeyID: "k-1", Plan: "pro", Limit: 5000, Remaining: 0, ResetAfterMS: 1200,
		RetryAfterMS: 720, Policy: "hourly",
		Rules: []client.RuleResult{
			{Name: "hourly", Algorithm: "gcra", Mode: "enforce", Limit: 5000, WindowS: 3600, ResetAfterMS: 1200, RetryAfterMS: 720},
			{Name: "shape", Algorithm: "leaky_bucket", Mode: "shadow", Limit: 10, WindowS: 1, Allowed: true, Remaining: 3,
				ResetAfterMS: 700, DelayMS: 40, WouldDeny: true, Degraded: true},
		},
		Header: wantHeader,
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("decision =\n%+v\nwant\n%+v", d, want)
	}
	if got := d.RetryAfter(); got != 720*time.Millisecond {
		t.Errorf("RetryAfter() = %v, want 720ms", got)
	}
}

func TestFailModes(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	servers := []struct {
		name    string
		handler http.HandlerFunc // nil: nothing listens
	}{
		{"connection refused", nil},
		{"500 not ready", answer(nil, 500, map[string]string{"Content-Type": "application/problem+json", "Retry-After": "1"},
			`{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"not ready","code":"internal"}`)},
		{"502 from a proxy", answer(nil, 502, map[string]string{"Content-Type": "text/html"}, "<h1>Bad Gateway</h1>")},
		{"timeout", func(w http.ResponseWriter, r *http.Request) {
			// Read the body, so the server notices the client hanging up.
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-block:
			}
		}},
		{"503 from a load balancer", answer(nil, 503, map[string]string{"Content-Type": "text/html"}, "<h1>Service Unavailable</h1>")},
		{"a 200 cut short", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "200")
			io.WriteString(w, `{"allowed":false,"reason":"rate_li`)
		}},
		{"408 from a proxy", answer(nil, 408, map[string]string{"Content-Type": "text/plain"}, "request timeout")},
		{"429 from a proxy, even as JSON", answer(nil, 429, map[string]string{"Content-Type": "application/json", "Retry-After": "5"},
			`{"error":"too many requests"}`)},
	}
	for _, s := range servers {
		for _, mode := range []client.FailMode{client.FailOpen, client.FailClosed} {
			t.Run(s.name+"/fail "+mode.String(), func(t *testing.T) {
				url := downURL()
				var calls atomic.Int64
				if s.handler != nil {
					srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						calls.Add(1)
						s.handler(w, r)
					}))
					defer srv.Close()
					url = srv.URL
				}
				c := newClient(t, url, client.Options{FailMode: mode, Timeout: 50 * time.Millisecond})
				for i := range 2 {
					d, err := c.Check(context.Background(), client.CheckRequest{IP: "203.0.113.7"})
					if err != nil {
						t.Fatalf("Check error = %v, want a decision", err)
					}
					wantAllowed, wantReason := mode == client.FailOpen, client.ReasonOK
					if mode == client.FailClosed {
						wantReason = client.ReasonUnavailable
					}
					if d.Allowed != wantAllowed || d.Reason != wantReason || !d.Degraded || d.Err == nil {
						t.Errorf("decision = allowed %v, reason %q, degraded %v, err %v; want allowed %v, reason %q, degraded, a cause",
							d.Allowed, d.Reason, d.Degraded, d.Err, wantAllowed, wantReason)
					}
					if wantRetry := map[bool]string{true: "", false: "1"}[wantAllowed]; d.Header.Get("Retry-After") != wantRetry {
						t.Errorf("Retry-After = %q, want %q", d.Header.Get("Retry-After"), wantRetry)
					}
					// A decision of the client's own is never remembered: the
					// server sees each check (one the client gave up on at
					// its timeout perhaps a moment later, on a loaded machine).
					if s.handler != nil {
						testenv.Eventually(t, time.Now(), 5*time.Second, "the server seeing every check", func() (bool, string) {
							n := calls.Load()
							return n == int64(i+1), fmt.Sprintf("after %d checks the server saw %d", i+1, n)
						})
					}
				}
			})
		}
	}
}

// TestCheckErrsOnAnswersThatAreNotOutages: an answer of any status but
// 2xx, 5xx, 408 and 429, Tollgate's problem or not, is an error whatever
// the FailMode, and so is a 2xx that is not a decision: something in
// between that refuses a check (a WAF's 403 on a key that looks like an
// attack) must not let the request through.
func TestCheckErrsOnAnswersThatAreNotOutages(t *testing.T) {
	html := map[string]string{"Content-Type": "text/html"}
	cases := []struct {
		name       string
		handler    http.HandlerFunc
		wantStatus int // of the *ProblemError; 0: another error
	}{
		{"a WAF's 403 page", answer(nil, 403, html, "<html><body>403 Forbidden - Request blocked</body></html>"), 403},
		{"a gateway's 403 JSON", answer(nil, 403, nil, `{"message":"Forbidden"}`), 403},
		{"404 from a load balancer", answer(nil, 404, html, "<h1>Not Found</h1>"), 404},
		{"405", answer(nil, 405, nil, ""), 405},
		{"409", answer(nil, 409, nil, `{"error":"conflict"}`), 409},
		{"451", answer(nil, 451, html, "<h1>Unavailable For Legal Reasons</h1>"), 451},
		{"a redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/login", http.StatusFound) }, 302},
		{"200 that is not a decision", answer(nil, 200, nil, "<html>"), 0},
		{"200 whose JSON is not a decision", answer(nil, 200, nil, `{"nope":1}`), 0},
		{"200 of JSON null", answer(nil, 200, nil, `null`), 0},
		{"200 without retry_after_ms", answer(nil, 200, nil, `{"allowed":false,"reason":"rate_limited"}`), 0},
		{"200 without a body", answer(nil, 200, nil, ""), 0},
		{"204", answer(nil, 204, nil, ""), 0},
	}
	for _, tc := range cases {
		for _, mode := range []client.FailMode{client.FailOpen, client.FailClosed} {
			t.Run(tc.name+"/fail "+mode.String(), func(t *testing.T) {
				srv := httptest.NewServer(tc.handler)
				defer srv.Close()
				d, err := newClient(t, srv.URL, client.Options{FailMode: mode}).Check(context.Background(), client.CheckRequest{Key: "' OR 1=1 --"})
				if err == nil || d != nil {
					t.Fatalf("Check = %+v, %v; want an error and no decision", d, err)
				}
				var p *client.ProblemError
				switch isProblem := errors.As(err, &p); {
				case tc.wantStatus != 0 && (!isProblem || p.Status != tc.wantStatus):
					t.Errorf("error %v, want a *ProblemError of status %d", err, tc.wantStatus)
				case tc.wantStatus == 0 && isProblem:
					t.Errorf("error %v, want one that is not a *ProblemError", err)
				}
			})
		}
	}
}

func TestCheckProblems(t *testing.T) {
	problem := map[string]string{"Content-Type": "application/problem+json"}
	cases := []struct {
		name    string
		status  int
		header  map[string]string
		body    string
		want    client.ProblemError
		wantMsg string
	}{
		{"bad service token", 401, problem,
			`{"type":"about:blank","title":"Unauthorized","status":401,"detail":"a valid service token is required","code":"unauthorized"}`,
			client.ProblemError{Status: 401, Type: "about:blank", Title: "Unauthorized", Detail: "a valid service token is required", Code: "unauthorized"},
			"tollgate: check: 401 unauthorized: a valid service token is required"},
		{"malformed", 400, problem,
			`{"type":"about:blank","title":"Bad Request","status":400,"detail":"malformed request body","code":"malformed","errors":{"cost":"must be a JSON integer"}}`,
			client.ProblemError{Status: 400, Type: "about:blank", Title: "Bad Request", Detail: "malformed request body", Code: "malformed",
				Errors: map[string]string{"cost": "must be a JSON integer"}},
			"tollgate: check: 400 malformed: malformed request body: cost must be a JSON integer"},
		{"invalid fields, in order", 422, problem,
			`{"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"the request has invalid fields","code":"invalid",
			  "errors":{"resource":"must be 1–1024 characters","ip":"must be an IPv4 or IPv6 address"}}`,
			client.ProblemError{Status: 422, Type: "about:blank", Title: "Unprocessable Entity", Detail: "the request has invalid fields", Code: "invalid",
				Errors: map[string]string{"ip": "must be an IPv4 or IPv6 address", "resource": "must be 1–1024 characters"}},
			"tollgate: check: 422 invalid: the request has invalid fields: ip must be an IPv4 or IPv6 address, resource must be 1–1024 characters"},
		{"too large", 413, problem,
			`{"type":"about:blank","title":"Request Entity Too Large","status":413,"detail":"the body is larger than 16384 bytes","code":"too_large"}`,
			client.ProblemError{Status: 413, Type: "about:blank", Title: "Request Entity Too Large", Detail: "the body is larger than 16384 bytes", Code: "too_large"},
			"tollgate: check: 413 too_large: the body is larger than 16384 bytes"},
		{"not problem JSON", 413, map[string]string{"Content-Type": "text/html"}, "<h1>413 Request Entity Too Large</h1>\n",
			client.ProblemError{Status: 413, Title: "Request Entity Too Large", Detail: "<h1>413 Request Entity Too Large</h1>"},
			"tollgate: check: 413 Request Entity Too Large: <h1>413 Request Entity Too Large</h1>"},
		// Another status is the check API's refusal when it says so, e.g.
		// a base URL that is a Tollgate server but not its check API.
		{"a Tollgate problem of another status", 404, problem,
			`{"type":"about:blank","title":"Not Found","status":404,"detail":"no such endpoint","code":"not_found"}`,
			client.ProblemError{Status: 404, Type: "about:blank", Title: "Not Found", Detail: "no such endpoint", Code: "not_found"},
			"tollgate: check: 404 not_found: no such endpoint"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(answer(nil, c.status, c.header, c.body))
			defer srv.Close()
			d, err := newClient(t, srv.URL, client.Options{FailMode: client.FailOpen}).Check(context.Background(), client.CheckRequest{IP: "203.0.113.7"})
			if d != nil {
				t.Errorf("decision = %+v, want none", d)
			}
			var p *client.ProblemError
			if !errors.As(err, &p) {
				t.Fatalf("error = %v, want a *ProblemError", err)
			}
			if !reflect.DeepEqual(*p, c.want) {
				t.Errorf("problem = %+v, want %+v", *p, c.want)
			}
			if err.Error() != c.wantMsg {
				t.Errorf("message = %q, want %q", err.Error(), c.wantMsg)
			}
		})
	}
}

// TestCheckDeniesOverLongKeysItself: a key longer than MaxKeyLength is
// denied as invalid_key without a round trip; the check API would refuse
// its body (413) once past 16 KiB.
func TestCheckDeniesOverLongKeysItself(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(answer(&calls, 200, nil, `{"allowed":true,"reason":"ok","tier":"authenticated","retry_after_ms":0,"degraded":false,"rules":[]}`))
	defer srv.Close()
	c := newClient(t, srv.URL, client.Options{})
	for _, n := range []int{client.MaxKeyLength + 1, 17 << 10} {
		d, err := c.Check(context.Background(), client.CheckRequest{Key: strings.Repeat("k", n)})
		if err != nil || d.Allowed || d.Reason != client.ReasonInvalidKey || d.Degraded || d.Header == nil {
			t.Errorf("a key of %d bytes: %+v, %v; want an invalid_key denial", n, d, err)
		}
	}
	if calls.Load() != 0 {
		t.Errorf("the server saw %d checks, want none", calls.Load())
	}
	if d, err := c.Check(context.Background(), client.CheckRequest{Key: strings.Repeat("k", client.MaxKeyLength)}); err != nil || !d.Allowed || calls.Load() != 1 {
		t.Errorf("a key of MaxKeyLength bytes: %+v, %v after %d checks; want asked and allowed", d, err, calls.Load())
	}
}

func TestCheckEndsWithTheCallersContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the check was sent after its context ended")
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := newClient(t, srv.URL, client.Options{FailMode: client.FailOpen}).Check(ctx, client.CheckRequest{IP: "203.0.113.7"})
	if !errors.Is(err, context.Canceled) || d != nil {
		t.Errorf("Check = %v, %v; want no decision and context.Canceled", d, err)
	}
}

// denierClient starts a denier of wait ms whose answers take latency on
// a fresh clock, and returns it and a client of it with opts on that
// clock. The server stops when the test ends.
func denierClient(t *testing.T, wait int64, latency time.Duration, opts client.Options) (*denier, *client.Client) {
	s := &denier{clk: newClock(), latency: latency}
	s.wait.Store(wait)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	opts.Now = s.clk.Now
	return s, newClient(t, srv.URL, opts)
}

// denier answers every check with a denial of retry_after_ms *wait and
// counts the checks; latency moves clk while the check is in flight. The
// denial is rate_limited by a gcra rule unless reason, algorithm or
// degraded say otherwise.
type denier struct {
	clk       *testenv.Clock
	wait      atomic.Int64
	latency   time.Duration
	allow     atomic.Bool
	calls     atomic.Int64
	reason    string
	algorithm string
	degraded  bool
}

func (s *denier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	s.clk.Advance(s.latency)
	if s.allow.Load() {
		answer(nil, 200, nil, `{"allowed":true,"reason":"ok","tier":"anonymous","retry_after_ms":0,"degraded":false,"rules":[]}`)(w, r)
		return
	}
	wait := s.wait.Load()
	reason, algorithm := cmp.Or(s.reason, "rate_limited"), cmp.Or(s.algorithm, "gcra")
	body, _ := json.Marshal(map[string]any{
		"allowed": false, "reason": reason, "tier": "anonymous", "limit": 60, "remaining": 0,
		"reset_after_ms": wait + 500, "retry_after_ms": wait, "policy": "hourly", "degraded": s.degraded,
		"rules": []any{map[string]any{"name": "hourly", "algorithm": algorithm, "mode": "enforce", "limit": 60, "window_s": 3600,
			"allowed": false, "remaining": 0, "reset_after_ms": wait + 500, "retry_after_ms": wait, "degraded": s.degraded}},
	})
	answer(nil, 200, map[string]string{
		"RateLimit-Policy": `"hourly";q=60;w=3600`, "RateLimit": `"hourly";r=0;t=9`, "Retry-After": "9",
	}, string(body))(w, r)
}

func TestRememberedDenials(t *testing.T) {
	// A wait shorter than MaxMemoryAge, which bounds longer ones
	// (TestRememberedDenialsAreCapped).
	s, c := denierClient(t, 900, 0, client.Options{})
	clk := s.clk
	ctx := context.Background()
	req := client.CheckRequest{Key: "tg_k", IP: "203.0.113.7", Resource: "GET /repos", Cost: 2}

	steps := []struct {
		advance        time.Duration
		req            client.CheckRequest
		wantCalls      int64
		wantRemembered bool
		wantRetryMS    int64
		wantRetryAfter string
		wantRateLimit  string
	}{
		{0, req, 1, false, 900, "9", `"hourly";r=0;t=9`},
		{400 * time.Millisecond, req, 1, true, 500, "1", `"hourly";r=0;t=1`},
		{499 * time.Millisecond, req, 1, true, 1, "1", `"hourly";r=0;t=1`},
		// Another resource, cost, key or address is another request.
		{0, client.CheckRequest{Key: "tg_k", IP: "203.0.113.7", Resource: "GET /other", Cost: 2}, 2, false, 900, "9", `"hourly";r=0;t=9`},
		{0, client.CheckRequest{Key: "tg_k", IP: "203.0.113.7", Resource: "GET /repos", Cost: 1}, 3, false, 900, "9", `"hourly";r=0;t=9`},
		{0, client.CheckRequest{Key: "tg_k2", IP: "203.0.113.7", Resource: "GET /repos", Cost: 2}, 4, false, 900, "9", `"hourly";r=0;t=9`},
		{0, client.CheckRequest{Key: "tg_k", IP: "203.0.113.8", Resource: "GET /repos", Cost: 2}, 5, false, 900, "9", `"hourly";r=0;t=9`},
		// The wait has passed: ask again (and be told again).
		{time.Millisecond, req, 6, false, 900, "9", `"hourly";r=0;t=9`},
	}
	for i, st := range steps {
		clk.Advance(st.advance)
		d, err := c.Check(ctx, st.req)
		if err != nil {
			t.Fatalf("step %d: Check: %v", i, err)
		}
		if got := s.calls.Load(); got != st.wantCalls {
			t.Errorf("step %d: server saw %d checks, want %d", i, got, st.wantCalls)
		}
		if d.Allowed || d.Remembered != st.wantRemembered || d.RetryAfterMS != st.wantRetryMS {
			t.Errorf("step %d: allowed %v, remembered %v, retry %d ms; want denied, remembered %v, retry %d ms",
				i, d.Allowed, d.Remembered, d.RetryAfterMS, st.wantRemembered, st.wantRetryMS)
		}
		if got := d.Header.Get("Retry-After"); got != st.wantRetryAfter {
			t.Errorf("step %d: Retry-After = %q, want %q", i, got, st.wantRetryAfter)
		}
		if got := d.Header.Get("RateLimit"); got != st.wantRateLimit {
			t.Errorf("step %d: RateLimit = %q, want %q", i, got, st.wantRateLimit)
		}
		if st.wantRemembered && (d.Reason != client.ReasonRateLimited || d.Policy != "hourly" || d.Rules[0].RetryAfterMS != st.wantRetryMS) {
			t.Errorf("step %d: remembered decision %+v lost the original's fields", i, d)
		}
	}
}

func TestRememberedDenialNeverOutlastsTheWait(t *testing.T) {
	// The answer arrives 300 ms after the request left: the wait counts
	// from the sending, as the server's did (at the latest).
	s, c := denierClient(t, 1000, 300*time.Millisecond, client.Options{})
	clk := s.clk
	req := client.CheckRequest{IP: "203.0.113.7"}
	ctx := context.Background()

	if _, err := c.Check(ctx, req); err != nil {
		t.Fatal(err)
	}
	clk.Advance(699 * time.Millisecond) // 999 ms after sending
	if d, _ := c.Check(ctx, req); !d.Remembered || d.RetryAfterMS != 1 {
		t.Errorf("999 ms after sending: remembered %v, retry %d ms; want remembered with 1 ms left", d.Remembered, d.RetryAfterMS)
	}
	clk.Advance(time.Millisecond)
	if d, _ := c.Check(ctx, req); d.Remembered || s.calls.Load() != 2 {
		t.Errorf("1000 ms after sending: remembered %v, server saw %d checks; want a fresh check", d.Remembered, s.calls.Load())
	}
}

func TestNotRemembered(t *testing.T) {
	cases := []struct {
		name  string
		wait  int64
		allow bool
		opts  client.Options
	}{
		{"allowed", 0, true, client.Options{}},
		{"never (-1)", -1, false, client.Options{}},
		{"remembering off", 5000, false, client.Options{MemorySize: -1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, cl := denierClient(t, c.wait, 0, c.opts)
			s.allow.Store(c.allow)
			for range 3 {
				if d, err := cl.Check(context.Background(), client.CheckRequest{IP: "203.0.113.7"}); err != nil || d.Remembered {
					t.Fatalf("Check = %+v, %v; want a fresh decision", d, err)
				}
			}
			if got := s.calls.Load(); got != 3 {
				t.Errorf("server saw %d checks, want 3", got)
			}
		})
	}
}

func TestRememberedDenialsAreBounded(t *testing.T) {
	_, c := denierClient(t, 60_000, 0, client.Options{MemorySize: 2})
	ctx := context.Background()
	check := func(ip string) bool {
		t.Helper()
		d, err := c.Check(ctx, client.CheckRequest{IP: ip})
		if err != nil {
			t.Fatal(err)
		}
		return d.Remembered
	}
	a, b, cc := "192.0.2.1", "192.0.2.2", "192.0.2.3"
	check(a)
	check(b)
	if !check(a) { // a is now the most recently used, b the least
		t.Fatal("a not remembered")
	}
	check(cc) // evicts b
	for _, step := range []struct {
		ip   string
		want bool
	}{{a, true}, {cc, true}, {b, false}} {
		if got := check(step.ip); got != step.want {
			t.Errorf("%s remembered = %v, want %v", step.ip, got, step.want)
		}
	}
}
