package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
)

// leaseAPI stands in for the check API's holds and leases: every check is
// admitted with the decision's extra fields; renewals, releases and
// settlements are recorded and sent on calls.
type leaseAPI struct {
	extra string // JSON fields added to every decision, e.g. `"lease_id":"l1"`
	calls chan leaseCall

	mu      sync.Mutex
	checked map[string]any
}

type leaseCall struct {
	op   string // renew, release or settle
	body map[string]any
}

func (a *leaseAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v1/check":
		a.mu.Lock()
		a.checked = body
		a.mu.Unlock()
		_, _ = w.Write([]byte(`{"allowed":true,"reason":"ok","tier":"authenticated","retry_after_ms":0,"degraded":false,"rules":[],` + a.extra + `}`))
		return
	case "/v1/renew":
		if body["lease_id"] == "gone" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"type":"about:blank","title":"Not Found","status":404,"detail":"no such lease"}`))
			return
		}
		expires := time.Now().Add(150 * time.Millisecond).UTC().Format(time.RFC3339Nano)
		_, _ = w.Write([]byte(`{"lease_id":"` + body["lease_id"].(string) + `","expires_at":"` + expires + `"}`))
	case "/v1/release":
		_, _ = w.Write([]byte(`{"lease_id":"` + body["lease_id"].(string) + `","released":true}`))
	case "/v1/settle":
		_, _ = w.Write([]byte(`{"hold_id":"h1","estimate":100,"cost":0,"status":"settled","repeated":false}`))
	}
	a.calls <- leaseCall{op: r.URL.Path[len("/v1/"):], body: body}
}

func newLeaseAPI(t *testing.T, extra string) (*leaseAPI, *client.Client) {
	t.Helper()
	a := &leaseAPI{extra: extra, calls: make(chan leaseCall, 100)}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, "token", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return a, c
}

// next returns the next call, failing after a few seconds without one.
func (a *leaseAPI) next(t *testing.T) leaseCall {
	t.Helper()
	return receive(t, a.calls, 5*time.Second, "no call reached the API")
}

// TestRenewAndRelease: Renew and Release post the lease ID and read the
// answers; a lease that is gone is a 404 ProblemError.
func TestRenewAndRelease(t *testing.T) {
	_, c := newLeaseAPI(t, "")
	ctx := context.Background()
	l, err := c.Renew(ctx, "l1")
	if err != nil || l.LeaseID != "l1" || l.ExpiresAt.IsZero() {
		t.Errorf("renew: %+v, %v", l, err)
	}
	var p *client.ProblemError
	if _, err := c.Renew(ctx, "gone"); !errors.As(err, &p) || p.Status != http.StatusNotFound {
		t.Errorf("renew of a lease that is gone: %v, want a 404 ProblemError", err)
	}
	if l, err := c.Release(ctx, "l1"); err != nil || !l.Released {
		t.Errorf("release: %+v, %v", l, err)
	}
	a, c := newLeaseAPI(t, `"hold_id":"h1"`)
	if d, err := c.Hold(ctx, client.CheckRequest{Key: "tg_x", Cost: 50}); err != nil || d.HoldID != "h1" || a.checked["hold"] != true {
		t.Errorf("Hold: %+v, %v; body %v", d, err, a.checked)
	}
}

// TestMiddlewareRenewsAndReleasesLeases: a request that took a lease has
// it renewed while its handler runs (a third of its life before each
// expiry) and released when the handler returns.
func TestMiddlewareRenewsAndReleasesLeases(t *testing.T) {
	expires := time.Now().Add(150 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	a, c := newLeaseAPI(t, `"lease_id":"l1","lease_expires_at":"`+expires+`"`)
	renewed := make(chan struct{})
	handler := c.Middleware(client.MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-renewed // runs until the lease was renewed twice
	}))
	go func() {
		for range 2 {
			if call := a.next(t); call.op != "renew" || call.body["lease_id"] != "l1" {
				t.Errorf("call %+v, want a renewal of l1", call)
			}
		}
		close(renewed)
	}()
	req := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
	req.Header.Set("Authorization", "Bearer tg_x")
	handler.ServeHTTP(httptest.NewRecorder(), req)
	<-renewed
	for {
		call := a.next(t)
		if call.op == "renew" { // one may have been under way as the handler returned
			continue
		}
		if call.op != "release" || call.body["lease_id"] != "l1" {
			t.Errorf("call %+v after the handler returned, want the release of l1", call)
		}
		break
	}
	if a.checked["auto_hold"] != true {
		t.Errorf("check body %v, want auto_hold: the rules decide whether to hold", a.checked)
	}
}

// TestMiddlewareRefundsAsTheRuleSays: a hold whose rules say refund_on
// 5xx is settled at 0 for a 502, with no RefundOn in the options, and the
// settlement (not a release) ends its lease.
func TestMiddlewareRefundsAsTheRuleSays(t *testing.T) {
	a, c := newLeaseAPI(t, `"hold_id":"h1","hold_refund_on":["5xx"],"lease_id":"h1","lease_expires_at":"2099-01-01T00:00:00.000Z"`)
	handler := c.Middleware(client.MiddlewareOptions{Cost: func(*http.Request) int64 { return 100 }})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client.ReportCost(r.Context(), 40)
		w.WriteHeader(http.StatusBadGateway)
	}))
	req := httptest.NewRequest(http.MethodPost, "/v1/complete", nil)
	req.Header.Set("Authorization", "Bearer tg_x")
	handler.ServeHTTP(httptest.NewRecorder(), req)
	if call := a.next(t); call.op != "settle" || call.body["cost"] != 0.0 || call.body["hold_id"] != "h1" {
		t.Errorf("call %+v, want the settlement of h1 at 0", call)
	}
	select {
	case call := <-a.calls:
		t.Errorf("unexpected call %+v after the settlement", call)
	default:
	}
}

// TestMiddlewareGivesBackWhenTheCallerLeavesDuringTheDelay: a caller that
// goes away while a shaping rule's delay holds its request is never
// served, so what its check took is given back at once: its lease
// released, its hold settled at 0 (which releases the lease too).
func TestMiddlewareGivesBackWhenTheCallerLeavesDuringTheDelay(t *testing.T) {
	cases := []struct {
		name, extra string
		want        leaseCall
	}{
		{"a lease", `"lease_id":"l1","lease_expires_at":"2099-01-01T00:00:00.000Z"`,
			leaseCall{op: "release", body: map[string]any{"lease_id": "l1"}}},
		{"a hold and its lease", `"hold_id":"h1","lease_id":"h1","lease_expires_at":"2099-01-01T00:00:00.000Z"`,
			leaseCall{op: "settle", body: map[string]any{"hold_id": "h1", "cost": 0.0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := &leaseAPI{extra: `"delay_ms":60000,` + tc.extra, calls: make(chan leaseCall, 100)}
			srv := httptest.NewServer(a)
			defer srv.Close()
			// The caller goes away as soon as the check's answer is read:
			// during the minute's delay.
			ctx, leave := context.WithCancel(context.Background())
			defer leave()
			c, err := client.New(srv.URL, "token", client.Options{HTTPClient: &http.Client{
				Transport: leaveAfterCheck{leave, http.DefaultTransport}}})
			if err != nil {
				t.Fatal(err)
			}
			handler := c.Middleware(client.MiddlewareOptions{Cost: func(*http.Request) int64 { return 100 }})(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("the handler ran for a caller that left") }))
			req := httptest.NewRequest(http.MethodPost, "/v1/complete", nil).WithContext(ctx)
			req.Header.Set("Authorization", "Bearer tg_x")
			handler.ServeHTTP(httptest.NewRecorder(), req)
			if call := a.next(t); !reflect.DeepEqual(call, tc.want) {
				t.Errorf("call %+v, want %+v", call, tc.want)
			}
			select {
			case call := <-a.calls:
				t.Errorf("unexpected call %+v", call)
			default:
			}
		})
	}
}

// leaveAfterCheck is a transport that calls leave once the body of a
// check's answer has been read and closed.
type leaveAfterCheck struct {
	leave context.CancelFunc
	next  http.RoundTripper
}

func (l leaveAfterCheck) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(r)
	if err == nil && r.URL.Path == "/v1/check" {
		resp.Body = closeHook{resp.Body, l.leave}
	}
	return resp, err
}

type closeHook struct {
	io.ReadCloser
	closed func()
}

func (c closeHook) Close() error {
	err := c.ReadCloser.Close()
	c.closed()
	return err
}
