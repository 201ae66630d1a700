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
