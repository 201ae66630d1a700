package main

import (
	"context"
	"net/http"
	"testing"

	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestNginxHeadersTollgateDidNotSend: see testGatewayHeadersNotSent.
func TestNginxHeadersTollgateDidNotSend(t *testing.T) {
	testGatewayHeadersNotSent(t, startNginx)
}

// TestCaddyHeadersTollgateDidNotSend: see testGatewayHeadersNotSent.
func TestCaddyHeadersTollgateDidNotSend(t *testing.T) {
	testGatewayHeadersNotSent(t, startCaddy)
}

// testGatewayHeadersNotSent: a request no rule of its plan governs (the
// llm plan limits POST /v1/complete and GET /*, not a DELETE) is let
// through with no rate-limit header at the client: not one empty, and
// not the text of a gateway's placeholder (through checks every
// response for those).
func testGatewayHeadersNotSent(t *testing.T, start startGateway) {
	f := newFixture(t)
	ctx := context.Background()
	llm, err := plans.NewStore(f.db).GetByName(ctx, "llm")
	testenv.Must(t, err)
	ts := tenants.NewStore(f.db)
	tn, err := ts.Create(ctx, "t-llm", llm.ID)
	testenv.Must(t, err)
	key, _, err := ts.IssueKey(ctx, tn.ID, "k", nil)
	testenv.Must(t, err)
	api := f.startAPI(t, nil)
	app := newUpstream(t)
	gw := start(t, api, app.URL, f.token)
	for _, path := range []string{failClosedPath, failOpenPath} {
		r := through(t, http.DefaultClient, "DELETE", gw+path, map[string]string{"X-API-Key": key})
		if r.status != http.StatusOK || r.header.Get("X-Seen-Degraded") != "" {
			t.Errorf("DELETE %s: %d, degraded %q; want 200, not degraded", path, r.status, r.header.Get("X-Seen-Degraded"))
		}
		for _, h := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Used", "X-RateLimit-Reset"} {
			if v, ok := r.header[http.CanonicalHeaderKey(h)]; ok {
				t.Errorf("DELETE %s: %s %q at the client, which Tollgate did not send", path, h, v)
			}
		}
	}
}
