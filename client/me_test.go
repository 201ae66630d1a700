package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate/tollgate/client"
)

// TestMe sends the API key, not the service token, to GET /v1/me and
// reads the standing, or the problem of a refusal.
func TestMe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/me" {
			t.Errorf("%s %s, want GET /v1/me", r.Method, r.URL.Path)
		}
		switch r.Header.Get("Authorization") {
		case "Bearer tg_good":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"tenant_id":"t1","tenant":"acme","key_id":"k1","plan":"pro",
				"rules":[{"name":"hourly","algorithm":"gcra","mode":"enforce","resource":"*","scope":"key",
				"limit":5000,"window_s":3600,"remaining":4990,"reset_after_ms":7200}],
				"quota":{"mode":"enforce","included_units":100000,"used":10,"remaining":99990,"reset_after_ms":1000},
				"credits":{"mode":"overage","balance":250,"overdraft":50}}`))
		default:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"type":"about:blank","title":"Forbidden","status":403,"detail":"the API key has been revoked","code":"forbidden"}`))
		}
	}))
	defer srv.Close()
	c, err := client.New(srv.URL+"/", "service-token", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Me(context.Background(), "tg_good")
	if err != nil {
		t.Fatal(err)
	}
	if st.Tenant != "acme" || st.Plan != "pro" || len(st.Rules) != 1 || st.Rules[0].Remaining != 4990 ||
		st.Quota == nil || st.Quota.Used != 10 ||
		st.Credits == nil || *st.Credits != (client.CreditsStanding{Mode: "overage", Balance: 250, Overdraft: 50}) {
		t.Errorf("Me = %+v", st)
	}
	_, err = c.Me(context.Background(), "tg_revoked")
	var p *client.ProblemError
	if !errors.As(err, &p) || p.Status != http.StatusForbidden || p.Detail != "the API key has been revoked" {
		t.Errorf("Me with a revoked key: %v, want the 403 problem", err)
	}
}
