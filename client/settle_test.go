package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
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
	settled := make(chan float64, 1)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/settle" {
			settled <- body["cost"].(float64)
			_, _ = w.Write([]byte(`{"hold_id":"h1","estimate":100,"cost":0,"status":"settled","repeated":false}`))
			return
		}
		if body["hold"] != true || body["cost"] != 100.0 {
			t.Errorf("check body %v, want a hold of 100", body)
		}
		_, _ = w.Write([]byte(`{"allowed":true,"reason":"ok","tier":"authenticated","retry_after_ms":0,"degraded":false,"rules":[],"hold_id":"h1"}`))
	}))
	defer api.Close()
	c, err := client.New(api.URL, "token", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
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
			if got := <-settled; got != tc.want {
				t.Errorf("settled at %v, want %v", got, tc.want)
			}
			if rec.Header().Get(client.CostHeader) != "" {
				t.Errorf("the %s header reached the caller", client.CostHeader)
			}
		})
	}
}
