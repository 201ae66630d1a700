package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// upstream is the application behind a gateway: it answers 200 and keeps
// the headers of every request it saw; its answer says in X-Seen-Degraded
// what X-Tollgate-Degraded it got, if any.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []http.Header
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Clone())
		u.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		if v := r.Header.Get("X-Tollgate-Degraded"); v != "" {
			w.Header().Set("X-Seen-Degraded", v) // for tests that see only responses
		}
		io.WriteString(w, "hello from the upstream\n")
	}))
	t.Cleanup(u.Close)
	return u
}

// last returns the headers of the last request the upstream saw.
func (u *upstream) last() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		return nil
	}
	return u.seen[len(u.seen)-1]
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.seen)
}

// startNginx runs nginx in front of app with the recipe shipped in
// deploy/nginx (copied unchanged), asking the check API at api with the
// service token, and returns nginx's base URL. Its locations fail closed,
// except those below failOpenPath's first segment, which fail open.
func startNginx(t *testing.T, api, app, token string) string {
	t.Helper()
	return startNginxWith(t, api, app, token, fmt.Sprintf(`
        location / {
            include tollgate-protect-closed.conf;
            proxy_pass http://app;
        }
        location %s/ {
            include tollgate-protect-open.conf;
            proxy_pass http://app;
        }`, strings.TrimSuffix(failOpenPath, failClosedPath)))
}

// startNginxWith runs nginx with the recipe shipped in deploy/nginx
// (copied unchanged) and a server block of the given locations, whose
// upstream app is app and which asks the check API at api with the
// service token; it returns nginx's base URL.
func startNginxWith(t *testing.T, api, app, token, locations string) string {
	t.Helper()
	dir := nginxRecipe(t, token)
	addr := testenv.Nginx(t, dir, func(listen string) string {
		return fmt.Sprintf(`
    upstream tollgate { server %s; keepalive 8; }
    upstream app { server %s; }
    server {
        listen %s;
        include tollgate-auth.conf;%s
    }`, strings.TrimPrefix(api, "http://"), strings.TrimPrefix(app, "http://"), listen, locations)
	})
	return "http://" + addr
}

// nginxRecipe returns a directory holding the recipe shipped in
// deploy/nginx, copied unchanged, and a tollgate-token.conf with the
// service token.
func nginxRecipe(t *testing.T, token string) string {
	t.Helper()
	dir := t.TempDir()
	recipes, err := filepath.Glob("../../deploy/nginx/tollgate-*.conf")
	testenv.Must(t, err)
	if len(recipes) != 7 {
		t.Fatalf("deploy/nginx has %d tollgate-*.conf files, want 7", len(recipes))
	}
	for _, p := range recipes {
		b, err := os.ReadFile(p)
		testenv.Must(t, err)
		testenv.Must(t, os.WriteFile(filepath.Join(dir, filepath.Base(p)), b, 0o600))
	}
	testenv.Must(t, os.WriteFile(filepath.Join(dir, "tollgate-token.conf"),
		[]byte(fmt.Sprintf("proxy_set_header X-Tollgate-Service-Token %q;\n", token)), 0o600))
	return dir
}

// clientFrom returns an HTTP client whose connections come from the
// loopback address ip (127.0.0.0/8 is all loopback on Linux), so that
// nginx sees distinct clients.
func clientFrom(ip string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}}
}

type gatewayResponse struct {
	status int
	header http.Header
	body   string
}

func through(t *testing.T, c *http.Client, method, url string, headers map[string]string) gatewayResponse {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	testenv.Must(t, err)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	// A header Tollgate did not send reaches the client neither as the
	// text of a gateway's placeholder nor, a rate-limit one, empty.
	for k, vs := range resp.Header {
		for _, v := range vs {
			if strings.Contains(v, "{http.") || v == "" && strings.Contains(k, "Ratelimit") {
				t.Errorf("%s %s: the client got %s: %q", method, url, k, v)
			}
		}
	}
	return gatewayResponse{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func (g gatewayResponse) check() checkResponse {
	return checkResponse{status: g.status, header: g.header}
}

// TestNginxForwardAuth puts real nginx (auth_request, with the recipe in
// deploy/nginx) in front of an upstream, asking the real check server.
func TestNginxForwardAuth(t *testing.T) { testGatewayForwardAuth(t, startNginx) }

// testGatewayForwardAuth puts a real gateway in front of an upstream,
// asking the real check server: limits are enforced with their headers at
// the client, the upstream learns who is calling from Tollgate only, and
// nothing a client sends (X-Forwarded-For, X-Tollgate-*) helps it.
func testGatewayForwardAuth(t *testing.T, start startGateway) {
	f := newFixture(t)
	api := f.startAPI(t, nil)
	app := newUpstream(t)
	gw := start(t, api, app.URL, f.token)

	t.Run("the 61st anonymous request from one address is a 429 at the client", func(t *testing.T) {
		client := clientFrom("127.0.0.2")
		// Everything a client could try in its own headers to be someone
		// else, cost nothing or name another resource changes nothing.
		spoof := func(i int) map[string]string {
			return map[string]string{
				"X-Forwarded-For": fmt.Sprintf("198.51.100.%d", i+1), "X-Real-IP": "198.51.100.250",
				"X-Tollgate-Cost": "0", "X-Forwarded-Uri": "/elsewhere", "X-Original-URI": "/elsewhere",
				"X-Tollgate-Tenant": "forged", "X-Tollgate-Deny-Status": "403",
			}
		}
		for i := range 60 {
			r := through(t, client, "GET", gw+"/repos?page="+strconv.Itoa(i), spoof(i))
			if r.status != http.StatusOK || !strings.Contains(r.body, "hello from the upstream") {
				t.Fatalf("request %d: %d %q, want 200 from the upstream", i+1, r.status, r.body)
			}
			checkHeaders(t, r.check(), false)
			if got, want := r.header.Get("X-RateLimit-Remaining"), strconv.Itoa(59-i); got != want {
				t.Fatalf("request %d: X-RateLimit-Remaining %s, want %s", i+1, got, want)
			}
		}
		if h := app.last(); h.Get("X-Tollgate-Tenant") != "" || h.Get("X-Tollgate-Plan") != "anonymous" {
			t.Errorf("upstream saw tenant %q plan %q, want no tenant (the forged one removed) and plan anonymous",
				h.Get("X-Tollgate-Tenant"), h.Get("X-Tollgate-Plan"))
		}
		seen := app.count()
		r := through(t, client, "GET", gw+"/repos", spoof(61))
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("61st: %d %q, want 429", r.status, r.body)
		}
		checkHeaders(t, r.check(), true)
		if ra, _ := strconv.Atoi(r.header.Get("Retry-After")); ra < 59 || ra > 60 {
			t.Errorf("Retry-After = %q, want 60", r.header.Get("Retry-After"))
		}
		if got := r.header.Get("RateLimit-Policy"); got != `"hourly";q=60;w=3600` {
			t.Errorf("RateLimit-Policy = %q", got)
		}
		if r.header.Get("X-Tollgate-Reason") != "rate_limited" || !strings.Contains(r.body, `"status":429`) {
			t.Errorf("429 reason %q body %q", r.header.Get("X-Tollgate-Reason"), r.body)
		}
		if app.count() != seen {
			t.Error("the upstream saw the denied request")
		}
		// Another address has its own allowance: nginx's own address is not
		// what is limited.
		if r := through(t, clientFrom("127.0.0.3"), "GET", gw+"/repos", nil); r.status != http.StatusOK {
			t.Errorf("another client: %d, want 200", r.status)
		}
	})

	t.Run("a pro key gets its headers and the upstream learns the tenant", func(t *testing.T) {
		r := through(t, http.DefaultClient, "GET", gw+"/repos", map[string]string{
			"Authorization": "Bearer " + f.keys["pro"], "X-Tollgate-Tenant": "forged", "X-Tollgate-Plan": "enterprise"})
		if r.status != http.StatusOK {
			t.Fatalf("pro: %d %q", r.status, r.body)
		}
		checkHeaders(t, r.check(), false)
		if got := r.header.Get("RateLimit-Policy"); got != `"hourly";q=5000;w=3600` {
			t.Errorf("RateLimit-Policy = %q, want pro's hourly", got)
		}
		h := app.last()
		if h.Get("X-Tollgate-Tenant") != f.tenants["pro"].ID || h.Get("X-Tollgate-Key-Id") != f.keyIDs["pro"] ||
			h.Get("X-Tollgate-Plan") != "pro" {
			t.Errorf("upstream saw tenant %q key %q plan %q, want %s %s pro", h.Get("X-Tollgate-Tenant"),
				h.Get("X-Tollgate-Key-Id"), h.Get("X-Tollgate-Plan"), f.tenants["pro"].ID, f.keyIDs["pro"])
		}
		if h.Get("X-Tollgate-Service-Token") != "" {
			t.Error("the upstream saw the gateway's service token")
		}
		if h.Get("Authorization") == "" {
			t.Error("the upstream did not get the client's Authorization header")
		}
	})

	t.Run("the original method and path pick the rule", func(t *testing.T) {
		// pro's search rule (POST /v1/search, 10/s) applies to POST only,
		// also when the path is spelled differently.
		var limited gatewayResponse
		for i := range 40 {
			path := []string{"/v1/search", "/v1//search/", "/v1/./search", "/v1/%73earch"}[i%4]
			r := through(t, http.DefaultClient, "POST", gw+path, map[string]string{"X-API-Key": f.keys["pro"]})
			if r.status == http.StatusTooManyRequests {
				limited = r
				break
			}
			if r.status != http.StatusOK {
				t.Fatalf("search %d: %d %q", i+1, r.status, r.body)
			}
			if got := r.header.Get("RateLimit-Policy"); got != `"search";q=10;w=1` {
				t.Fatalf("POST %s: RateLimit-Policy %q, want the search rule", path, got)
			}
		}
		if limited.status != http.StatusTooManyRequests {
			t.Fatal("40 quick searches were never limited")
		}
		checkHeadersWithin(t, limited.check(), true, time.Second)
		if r := through(t, http.DefaultClient, "GET", gw+"/v1/search", map[string]string{"X-API-Key": f.keys["pro"]}); r.status != http.StatusOK ||
			r.header.Get("RateLimit-Policy") != `"hourly";q=5000;w=3600` {
			t.Errorf("GET /v1/search: %d policy %q, want 200 under hourly only", r.status, r.header.Get("RateLimit-Policy"))
		}
	})

	t.Run("a revoked key gets 403, an unknown one 401", func(t *testing.T) {
		revoked := f.revokedKey(t)
		var r gatewayResponse
		waitFor(t, func() bool {
			r = through(t, http.DefaultClient, "GET", gw+"/repos", map[string]string{"Authorization": "Bearer " + revoked})
			return r.status == http.StatusForbidden
		})
		if r.header.Get("X-Tollgate-Reason") != "key_revoked" {
			t.Errorf("revoked: reason %q, want key_revoked", r.header.Get("X-Tollgate-Reason"))
		}
		unknown, _, _ := tenants.GenerateKey()
		r = through(t, http.DefaultClient, "GET", gw+"/repos", map[string]string{"X-API-Key": unknown})
		if r.status != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("unknown key: %d WWW-Authenticate %q, want 401 with a Bearer challenge", r.status, r.header.Get("WWW-Authenticate"))
		}
	})
}
