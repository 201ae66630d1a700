package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
)

// TestHoldAndSettle: a check with Hold sends hold and hold_ttl_s and
// reads the hold's ID; Settle posts the actual cost and reads the
// settlement, or the problem of a conflicting one.
func TestHoldAndSettle(t *testing.T) {
	var checked map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		switch r.URL.Path {
		case "/v1/check":
			checked = body
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"allowed":true,"reason":"ok","tier":"authenticated","retry_after_ms":0,"degraded":false,"rules":[],"hold_id":"h1","hold_expires_at":"2026-11-25T15:00:00.000Z"}`))
		case "/v1/settle":
			if body["cost"] == 7.0 {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusConflict)
				_, _ = w.Write([]byte(`{"type":"about:blank","title":"Conflict","status":409,"detail":"the hold was settled at cost 3"}`))
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"hold_id":"h1","estimate":10,"cost":3,"status":"settled","repeated":false}`))
		}
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, "token", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := c.Check(ctx, client.CheckRequest{Key: "tg_x", Cost: 10, Hold: true, HoldTTL: 90 * time.Second})
	if err != nil || d.HoldID != "h1" || d.HoldExpiresAt.IsZero() {
		t.Fatalf("check with hold: %+v, %v", d, err)
	}
	if checked["hold"] != true || checked["hold_ttl_s"] != 90.0 || checked["cost"] != 10.0 {
		t.Errorf("check body %v, want hold, hold_ttl_s 90 and cost 10", checked)
	}
	s, err := c.Settle(ctx, d.HoldID, 3)
	if err != nil || *s != (client.Settlement{HoldID: "h1", Estimate: 10, Cost: 3, Status: "settled"}) {
		t.Errorf("settle: %+v, %v", s, err)
	}
	var p *client.ProblemError
	if _, err := c.Settle(ctx, d.HoldID, 7); !errors.As(err, &p) || p.Status != http.StatusConflict {
		t.Errorf("conflicting settle: %v, want a 409 ProblemError", err)
	}
}

// TestMiddlewareSettlesHolds: a held request is settled when its handler
// returns, at the cost it reported (from code or in the Tollgate-Cost
// header, which the caller never sees), and at 0 for a 5xx when RefundOn
// says so.
func TestMiddlewareSettlesHolds(t *testing.T) {
	c, settled := newHoldAPI(t, func(body map[string]any) {
		if body["hold"] != true || body["cost"] != 100.0 {
			t.Errorf("check body %v, want a hold of 100", body)
		}
	})
	mw := c.Middleware(client.MiddlewareOptions{
		Cost:     func(*http.Request) int64 { return 100 },
		Hold:     func(*http.Request) bool { return true },
		RefundOn: []string{"5xx"},
	})
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    float64
	}{
		{"reported in code, streamed", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("token "))
			http.NewResponseController(w).Flush()
			client.ReportCost(r.Context(), 42)
		}, 42},
		{"reported in a header", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(client.CostHeader, "17")
			_, _ = w.Write([]byte("done"))
		}, 17},
		{"not reported", func(w http.ResponseWriter, r *http.Request) {}, 100},
		{"failed upstream", func(w http.ResponseWriter, r *http.Request) {
			client.ReportCost(r.Context(), 42)
			w.WriteHeader(http.StatusBadGateway)
		}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/v1/complete", nil)
			req.Header.Set("Authorization", "Bearer tg_x")
			mw(tc.handler).ServeHTTP(rec, req)
			if got := settledCost(t, settled); got != tc.want {
				t.Errorf("settled at %v, want %v", got, tc.want)
			}
			if rec.Header().Get(client.CostHeader) != "" {
				t.Errorf("the %s header reached the caller", client.CostHeader)
			}
		})
	}
}

// newHoldAPI starts a check API that admits every check with the hold h1,
// passing its body to onCheck unless that is nil, and passes the cost of
// each settlement to the channel it returns, and returns a client of it.
func newHoldAPI(t *testing.T, onCheck func(body map[string]any)) (*client.Client, <-chan float64) {
	t.Helper()
	settled := make(chan float64, 10)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/settle" {
			settled <- body["cost"].(float64)
			_, _ = w.Write([]byte(`{"hold_id":"h1","estimate":100,"cost":0,"status":"settled","repeated":false}`))
			return
		}
		if onCheck != nil {
			onCheck(body)
		}
		_, _ = w.Write([]byte(`{"allowed":true,"reason":"ok","tier":"authenticated","retry_after_ms":0,"degraded":false,"rules":[],"hold_id":"h1"}`))
	}))
	t.Cleanup(api.Close)
	return newClient(t, api.URL, client.Options{}), settled
}

// settledCost returns the next cost settled, failing after a few seconds
// without one.
func settledCost(t *testing.T, settled <-chan float64) float64 {
	t.Helper()
	return receive(t, settled, 5*time.Second, "no settlement")
}

// endingContext is a request's context that its handler ends, as the
// request's deadline passing (context.DeadlineExceeded) or the caller
// going away (context.Canceled) would.
type endingContext struct {
	context.Context
	done chan struct{}
	err  atomic.Pointer[error]
}

func newEndingContext() *endingContext {
	return &endingContext{Context: context.Background(), done: make(chan struct{})}
}

func (c *endingContext) Done() <-chan struct{} { return c.done }

func (c *endingContext) Err() error {
	if err := c.err.Load(); err != nil {
		return *err
	}
	return nil
}

// end ends the context with err.
func (c *endingContext) end(err error) {
	c.err.Store(&err)
	close(c.done)
}

// TestMiddlewareRefundsATimeoutNotAHangUp: "timeout" is the service not
// delivering — its deadline passed before the handler wrote any of the
// body, with no cost reported — never the caller hanging up, which it
// controls: a caller that read its answer and hung up before the handler
// returned is charged the cost reported, else the estimate.
func TestMiddlewareRefundsATimeoutNotAHangUp(t *testing.T) {
	c, settled := newHoldAPI(t, nil)
	mw := c.Middleware(client.MiddlewareOptions{Cost: func(*http.Request) int64 { return 100 }, RefundOn: []string{"timeout"}})
	cases := []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request, end func(error))
		want    float64
	}{
		{"the deadline passes before anything was written", func(w http.ResponseWriter, r *http.Request, end func(error)) {
			end(context.DeadlineExceeded)
		}, 0},
		{"the deadline passes after the status alone", func(w http.ResponseWriter, r *http.Request, end func(error)) {
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			end(context.DeadlineExceeded)
		}, 0},
		{"the deadline passes after a cost was reported", func(w http.ResponseWriter, r *http.Request, end func(error)) {
			client.ReportCost(r.Context(), 40)
			end(context.DeadlineExceeded)
		}, 40},
		{"the deadline passes after a cost in the header", func(w http.ResponseWriter, r *http.Request, end func(error)) {
			w.Header().Set(client.CostHeader, "40")
			end(context.DeadlineExceeded)
		}, 40},
		{"the deadline passes after some of the body was served", func(w http.ResponseWriter, r *http.Request, end func(error)) {
			_, _ = w.Write([]byte("data: part of it\n\n"))
			end(context.DeadlineExceeded)
		}, 100},
		{"the caller hangs up before anything was written", func(w http.ResponseWriter, r *http.Request, end func(error)) {
			end(context.Canceled)
		}, 100},
		{"the caller hangs up after the answer", func(w http.ResponseWriter, r *http.Request, end func(error)) {
			_, _ = w.Write([]byte("data: the whole answer\n\ndata: [DONE]\n\n"))
			http.NewResponseController(w).Flush()
			end(context.Canceled)
		}, 100},
		{"the caller hangs up after the answer and its cost", func(w http.ResponseWriter, r *http.Request, end func(error)) {
			client.ReportCost(r.Context(), 40)
			_, _ = w.Write([]byte("data: the whole answer\n\ndata: [DONE]\n\n"))
			end(context.Canceled)
		}, 40},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := newEndingContext()
			req := httptest.NewRequest(http.MethodPost, "/v1/complete", nil).WithContext(ctx)
			req.Header.Set("Authorization", "Bearer tg_x")
			mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tc.handler(w, r, ctx.end)
			})).ServeHTTP(httptest.NewRecorder(), req)
			if got := settledCost(t, settled); got != tc.want {
				t.Errorf("settled at %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMiddlewareTakesStatusAndCostAtTheFinalStatus: an informational
// answer (103 Early Hints) is sent with the headers set so far, and more
// follow: CostHeader never goes with it, and the status a 5xx refund
// looks at and the cost settled at are those of the final answer.
func TestMiddlewareTakesStatusAndCostAtTheFinalStatus(t *testing.T) {
	c, settled := newHoldAPI(t, nil)
	mw := c.Middleware(client.MiddlewareOptions{Cost: func(*http.Request) int64 { return 100 }, RefundOn: []string{"5xx"}})
	cases := []struct {
		name       string
		handler    http.HandlerFunc
		wantStatus int
		want       float64
	}{
		{"a cost set after Early Hints", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Set(client.CostHeader, "3")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("ok"))
		}, 200, 3},
		{"a cost set before Early Hints", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.Header().Set(client.CostHeader, "3")
			w.WriteHeader(http.StatusEarlyHints)
			_, _ = w.Write([]byte("ok"))
		}, 200, 3},
		{"a cost changed after Early Hints", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(client.CostHeader, "3")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Set(client.CostHeader, "5")
		}, 200, 5},
		{"a 502 after Early Hints", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			client.ReportCost(r.Context(), 40)
			w.WriteHeader(http.StatusBadGateway)
		}, 502, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(mw(tc.handler))
			defer srv.Close()
			var hints []http.Header
			trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
				hints = append(hints, http.Header(header))
				return nil
			}}
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, srv.URL+"/v1/complete", nil)
			req.Header.Set("Authorization", "Bearer tg_x")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			if len(hints) != 1 {
				t.Errorf("%d informational answers, want the 103", len(hints))
			}
			for _, h := range append(hints, resp.Header) {
				if v := h.Get(client.CostHeader); v != "" {
					t.Errorf("%s: %q reached the caller", client.CostHeader, v)
				}
			}
			if got := settledCost(t, settled); got != tc.want {
				t.Errorf("settled at %v, want %v", got, tc.want)
			}
		})
	}
}
