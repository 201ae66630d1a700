package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestNginxDeprecatedProtectInclude: a configuration written for the
// recipe before each location chose to fail open or closed, which
// includes tollgate-protect.conf, still starts with today's files, is
// enforced, and fails closed (503 problem+json with Retry-After) when
// Tollgate cannot be asked, as it did.
func TestNginxDeprecatedProtectInclude(t *testing.T) {
	f := newFixture(t)
	addrs, stop := f.startAPIStoppable(t, nil)
	app := newUpstream(t)
	// The locations of the recipe's example.conf of that time.
	gw := startNginxWith(t, addrs[0], app.URL, f.token, `
        location / {
            include tollgate-protect.conf;
            proxy_pass http://app;
        }`)

	r := through(t, clientFrom("127.0.0.4"), "GET", gw+"/repos", nil)
	if r.status != http.StatusOK || !strings.Contains(r.body, "hello from the upstream") {
		t.Fatalf("through the deprecated include: %d %q, want 200 from the upstream", r.status, r.body)
	}
	checkHeaders(t, r.check(), false)
	if h := app.last(); h.Get("X-Tollgate-Plan") != "anonymous" {
		t.Errorf("upstream saw plan %q, want anonymous", h.Get("X-Tollgate-Plan"))
	}

	if err := stop(); err != nil {
		t.Fatalf("api run: %v", err)
	}
	seen := app.count()
	r = through(t, clientFrom("127.0.0.4"), "GET", gw+"/repos", nil)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" ||
		!strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
		t.Errorf("Tollgate stopped: %d Retry-After %q Content-Type %q, want a 503 problem+json with Retry-After 1 (fail closed)",
			r.status, r.header.Get("Retry-After"), r.header.Get("Content-Type"))
	}
	if app.count() != seen {
		t.Error("the upstream saw a request while Tollgate could not be asked")
	}
}
