package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/testkeys"
)

// TestNginxGatewayTokenRefused: nginx's service token revoked (or expired).
func TestNginxGatewayTokenRefused(t *testing.T) { testGatewayTokenRefused(t, startNginx) }

// TestCaddyGatewayTokenRefused: Caddy's service token revoked (or expired).
func TestCaddyGatewayTokenRefused(t *testing.T) { testGatewayTokenRefused(t, startCaddy) }

// testGatewayTokenRefused: once Tollgate refuses the gateway's own service
// token, that is the operator's failure, not the client's: the fail-open
// location lets requests through marked X-Tollgate-Degraded, the
// fail-closed one answers 503 problem+json with Retry-After, no client
// gets a 401 saying its key is bad, and /metrics counts the refusals.
func testGatewayTokenRefused(t *testing.T, start startGateway) {
	f := newFixture(t)
	ctx := context.Background()
	as := auth.NewStore(f.db).WithSecretKeys(testkeys.SecretKeys(t))
	token, st, err := as.IssueServiceToken(ctx, "gateway-to-revoke", time.Hour)
	testenv.Must(t, err)
	api := f.startAPI(t, nil)
	app := newUpstream(t)
	gw := start(t, api, app.URL, token)
	pro := map[string]string{"X-API-Key": f.keys["pro"]}

	for _, path := range []string{failClosedPath, failOpenPath} {
		if r := through(t, http.DefaultClient, "GET", gw+path, pro); r.status != http.StatusOK || r.header.Get("X-Seen-Degraded") != "" {
			t.Fatalf("%s with a valid token: %d degraded %q, want 200, not degraded", path, r.status, r.header.Get("X-Seen-Degraded"))
		}
	}

	testenv.Must(t, as.RevokeServiceToken(ctx, st.ID))
	var r gatewayResponse
	waitFor(t, func() bool {
		r = through(t, http.DefaultClient, "GET", gw+failClosedPath, pro)
		return r.status != http.StatusOK
	})
	seen := app.count()
	for i := range 3 {
		if i > 0 {
			r = through(t, http.DefaultClient, "GET", gw+failClosedPath, pro)
		}
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" ||
			!strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") || !strings.Contains(r.body, `"status":503`) {
			t.Fatalf("fail-closed, token revoked: %d Retry-After %q Content-Type %q %q, want a 503 problem+json with Retry-After 1",
				r.status, r.header.Get("Retry-After"), r.header.Get("Content-Type"), r.body)
		}
	}
	if app.count() != seen {
		t.Error("the upstream saw a fail-closed request while the gateway's token was refused")
	}
	for _, headers := range []map[string]string{pro, nil, {"X-Tollgate-Degraded": "false"}} {
		r := through(t, clientFrom("127.0.0.5"), "GET", gw+failOpenPath, headers)
		if r.status != http.StatusOK || !strings.Contains(r.body, "hello from the upstream") || r.header.Get("X-Seen-Degraded") != "true" {
			t.Errorf("fail-open, token revoked: %d degraded %q %q, want 200 from the upstream marked degraded",
				r.status, r.header.Get("X-Seen-Degraded"), r.body)
		}
	}
	if h := app.last(); h.Get("X-Tollgate-Tenant") != "" || h.Get("X-Tollgate-Service-Token") != "" {
		t.Errorf("upstream saw tenant %q and a service token %v, want neither", h.Get("X-Tollgate-Tenant"), h.Get("X-Tollgate-Service-Token") != "")
	}

	if n := metricValue(t, api, "tollgate_gateway_token_refused_total"); n < 4 {
		t.Errorf("tollgate_gateway_token_refused_total = %d, want at least 4", n)
	}
}

// metricValue returns the value of an unlabelled counter or gauge in the
// check API's /metrics.
func metricValue(t *testing.T, base, name string) int64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	testenv.Must(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("/metrics lacks %s", name)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	testenv.Must(t, err)
	return int64(v)
}

// TestNginxUnauthorizedProblem: a 401 through nginx (an unknown key) is a
// problem+json naming its reason, with Tollgate's Bearer challenge, on
// fail-open and fail-closed locations alike, as a 403 or 429 is.
func TestNginxUnauthorizedProblem(t *testing.T) {
	f := newFixture(t)
	api := f.startAPI(t, nil)
	app := newUpstream(t)
	gw := startNginx(t, api, app.URL, f.token)
	unknown, _, _ := tenants.GenerateKey()
	for _, path := range []string{failClosedPath, failOpenPath} {
		for _, headers := range []map[string]string{{"X-API-Key": unknown}, {"Authorization": "Bearer " + unknown}} {
			r := through(t, http.DefaultClient, "GET", gw+path, headers)
			if r.status != http.StatusUnauthorized || r.header.Get("X-Tollgate-Reason") != "invalid_key" ||
				r.header.Get("Content-Type") != "application/problem+json" || !strings.Contains(r.body, `"status":401`) ||
				!strings.Contains(r.body, "invalid_key") {
				t.Errorf("%s, unknown key: %d reason %q Content-Type %q %q, want a 401 problem+json naming invalid_key",
					path, r.status, r.header.Get("X-Tollgate-Reason"), r.header.Get("Content-Type"), r.body)
			}
			if got := r.header.Values("WWW-Authenticate"); len(got) != 1 || !strings.HasPrefix(got[0], "Bearer") {
				t.Errorf("%s, unknown key: WWW-Authenticate %q, want one Bearer challenge", path, got)
			}
		}
	}
}

// TestNginxGatewayRequestRefused: a request Tollgate refuses as malformed
// because of nginx's own configuration (here a $tollgate_cost map giving
// a value that is not a number: a 400) is Tollgate failing for that
// location, not nginx's HTML 500: the fail-open location goes on to the
// upstream marked degraded, the fail-closed one answers its 503.
func TestNginxGatewayRequestRefused(t *testing.T) {
	f := newFixture(t)
	api := f.startAPI(t, nil)
	app := newUpstream(t)
	dir := nginxRecipe(t, f.token)
	// The recipe's way to charge some requests more, with a typo.
	ask := filepath.Join(dir, "tollgate-ask.conf")
	b, err := os.ReadFile(ask)
	testenv.Must(t, err)
	fixed := strings.Replace(string(b), `proxy_set_header X-Tollgate-Cost "";`, `proxy_set_header X-Tollgate-Cost $tollgate_cost;`, 1)
	if fixed == string(b) {
		t.Fatal("tollgate-ask.conf no longer clears X-Tollgate-Cost")
	}
	testenv.Must(t, os.WriteFile(ask, []byte(fixed), 0o600))
	addr := testenv.Nginx(t, dir, func(listen string) string {
		return fmt.Sprintf(`
    map "$request_method $request_uri" $tollgate_cost { default 1; "~^GET /bad" "5O"; }
    upstream tollgate { server %s; keepalive 8; }
    upstream app { server %s; }
    server {
        listen %s;
        include tollgate-auth.conf;
        location /bad/closed {
            include tollgate-protect-closed.conf;
            proxy_pass http://app;
        }
        location /bad/open {
            include tollgate-protect-open.conf;
            proxy_pass http://app;
        }
    }`, strings.TrimPrefix(api, "http://"), strings.TrimPrefix(app.URL, "http://"), listen)
	})
	gw := "http://" + addr
	r := through(t, http.DefaultClient, "GET", gw+"/bad/open", nil)
	if r.status != http.StatusOK || r.header.Get("X-Seen-Degraded") != "true" {
		t.Errorf("fail-open, Tollgate answering 400: %d degraded %q %q, want 200 from the upstream marked degraded",
			r.status, r.header.Get("X-Seen-Degraded"), r.body)
	}
	r = through(t, http.DefaultClient, "GET", gw+"/bad/closed", nil)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("fail-closed, Tollgate answering 400: %d Content-Type %q, want a 503 problem+json", r.status, r.header.Get("Content-Type"))
	}
}

// TestCaddyTokenNotInConfig: the service token is read from Caddy's
// environment on each request, so it is not part of the configuration
// Caddy loads (which its admin endpoint serves and autosave.json keeps).
func TestCaddyTokenNotInConfig(t *testing.T) {
	bin, err := exec.LookPath("caddy")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("caddy not found")
		}
		t.Skip("caddy not found: install Debian's caddy to run the gateway tests")
	}
	dir := t.TempDir()
	for _, name := range []string{"Caddyfile", "tollgate.caddy"} {
		b, err := os.ReadFile(filepath.Join("../../deploy/caddy", name))
		testenv.Must(t, err)
		testenv.Must(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}
	const token = "tg-secret-service-token-value"
	cmd := exec.Command(bin, "adapt", "--adapter", "caddyfile", "--config", filepath.Join(dir, "Caddyfile"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir,
		"TOLLGATE_API=127.0.0.1:1", "TOLLGATE_SERVICE_TOKEN="+token)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("caddy adapt: %v\n%s", err, out)
	}
	if strings.Contains(string(out), token) {
		t.Errorf("the adapted configuration holds the service token:\n%s", out)
	}
	if !strings.Contains(string(out), "{env.TOLLGATE_SERVICE_TOKEN}") {
		t.Errorf("the adapted configuration does not read the token from the environment:\n%s", out)
	}
}
