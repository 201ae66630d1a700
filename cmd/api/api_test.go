package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/buildinfo"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/testkeys"
)

// fixture is a database with the demo plans, one tenant per paid plan with
// a key each, and a service token.
type fixture struct {
	dbURL   string
	db      *pgxpool.Pool
	token   string
	keys    map[string]string // plan → secret
	keyIDs  map[string]string // plan → key ID
	tenants map[string]tenants.Tenant
	prefix  string // Redis key prefix of this test
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{dbURL: testenv.DatabaseURL(t), keys: map[string]string{}, keyIDs: map[string]string{}, tenants: map[string]tenants.Tenant{}}
	var err error
	f.db, err = pgxpool.New(ctx, f.dbURL)
	testenv.Must(t, err)
	t.Cleanup(f.db.Close)
	ps, ts := plans.NewStore(f.db), tenants.NewStore(f.db)
	ids := map[string]int64{}
	for _, p := range plans.DemoPlans() {
		stored, err := ps.Put(ctx, p)
		testenv.Must(t, err)
		ids[p.Name] = stored.ID
	}
	for _, tier := range []string{"free", "pro", "enterprise"} {
		tn, err := ts.Create(ctx, "t-"+tier, ids[tier])
		testenv.Must(t, err)
		secret, k, err := ts.IssueKey(ctx, tn.ID, "k", nil)
		testenv.Must(t, err)
		f.keys[tier], f.keyIDs[tier], f.tenants[tier] = secret, k.ID, tn
	}
	f.token, _, err = auth.NewStore(f.db).WithSecretKeys(testkeys.SecretKeys(t)).IssueServiceToken(ctx, "test-gateway", time.Hour)
	testenv.Must(t, err)
	_, f.prefix = testenv.Redis(t)
	return f
}

// startAPI runs cmd/api's run() on a free port and returns its base URL.
// extra overrides environment variables.
func (f *fixture) startAPI(t *testing.T, extra map[string]string) string {
	t.Helper()
	return f.startAPIAddrs(t, extra)[0]
}

// startAPIAddrs is startAPI returning every address run() reports: the
// check API's base URL, then the Envoy gRPC service's address when
// TOLLGATE_ENVOY_GRPC_ADDR is set.
func (f *fixture) startAPIAddrs(t *testing.T, extra map[string]string) []string {
	t.Helper()
	addrs, stop := f.startAPIStoppable(t, extra)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("api run: %v", err)
		}
	})
	return addrs
}

// startAPIStoppable is startAPIAddrs returning the function that stops the
// server (and returns run's error), for a test that stops it early; a
// server still running when the test ends is stopped then, its error
// ignored. Stopping twice does nothing more.
func (f *fixture) startAPIStoppable(t *testing.T, extra map[string]string) ([]string, func() error) {
	t.Helper()
	env := map[string]string{
		"TOLLGATE_API_ADDR":        "127.0.0.1:0",
		"TOLLGATE_DATABASE_URL":    f.dbURL,
		"TOLLGATE_REDIS_ADDR":      testenv.RedisAddr(t),
		"TOLLGATE_KEY_PREFIX":      f.prefix,
		"TOLLGATE_SNAPSHOT_RELOAD": "30s",
		"TOLLGATE_LOG_LEVEL":       "error",
	}
	for k, v := range extra {
		env[k] = v
	}
	n := 1
	if env["TOLLGATE_ENVOY_GRPC_ADDR"] != "" {
		n = 2 // the gRPC listener's address follows the HTTP one
	}
	addrs, stop := testenv.StartN(t, "api", n, func(ctx context.Context, ready chan<- string) error {
		return run(ctx, nil, func(k string) string { return env[k] }, io.Discard, io.Discard, ready)
	})
	t.Cleanup(func() { _ = stop() })
	addrs[0] = "http://" + addrs[0]
	return addrs, stop
}

type checkResponse struct {
	status  int
	header  http.Header
	body    map[string]any
	problem map[string]any
}

func post(t *testing.T, base, token, body string) checkResponse {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/check", strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/check: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := checkResponse{status: resp.StatusCode, header: resp.Header}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("response %d is not JSON: %q", resp.StatusCode, raw)
	}
	if resp.StatusCode == http.StatusOK {
		out.body = m
	} else {
		out.problem = m
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("error %d has Content-Type %q, want application/problem+json", resp.StatusCode, ct)
		}
	}
	return out
}

func checkBody(key, ip, resource string) string {
	m := map[string]any{}
	if key != "" {
		m["key"] = key
	}
	if ip != "" {
		m["ip"] = ip
	}
	if resource != "" {
		m["resource"] = resource
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func TestCheckAuthentication(t *testing.T) {
	f := newFixture(t)
	base := f.startAPI(t, nil)
	ctx := context.Background()
	as := auth.NewStore(f.db).WithSecretKeys(testkeys.SecretKeys(t))
	revoked, st, err := as.IssueServiceToken(ctx, "revoked", time.Hour)
	testenv.Must(t, err)
	testenv.Must(t, as.RevokeServiceToken(ctx, st.ID))
	// Signed with HMAC using the public key bytes as secret: the classic
	// algorithm-confusion attack must fail because EdDSA is pinned.
	keys, err := as.PublicKeys(ctx)
	testenv.Must(t, err)
	var kid string
	var pub []byte
	for k, v := range keys {
		kid, pub = k, v
	}
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{Issuer: auth.Issuer,
		Audience: jwt.ClaimStrings{auth.CheckAudience}, ID: st.ID, ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))})
	hs.Header["kid"] = kid
	confused, _ := hs.SignedString(pub)
	none := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.RegisteredClaims{Issuer: auth.Issuer,
		Audience: jwt.ClaimStrings{auth.CheckAudience}, ID: st.ID, ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))})
	unsigned, _ := none.SignedString(jwt.UnsafeAllowNoneSignatureType)

	cases := []struct {
		name  string
		token string
	}{
		{"missing", ""},
		{"garbage", "not-a-jwt"},
		{"tampered", f.token[:len(f.token)-4] + "AAAA"},
		{"hs256 confusion", confused},
		{"alg none", unsigned},
		{"revoked", revoked},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			waitFor(t, func() bool {
				return post(t, base, c.token, checkBody(f.keys["pro"], "", "")).status == http.StatusUnauthorized
			})
			r := post(t, base, c.token, checkBody(f.keys["pro"], "", ""))
			if r.problem["code"] != "unauthorized" {
				t.Errorf("problem code = %v, want unauthorized", r.problem["code"])
			}
		})
	}
	if r := post(t, base, f.token, checkBody(f.keys["pro"], "", "")); r.status != http.StatusOK {
		t.Fatalf("valid token: status %d, want 200", r.status)
	}
}

// waitFor polls cond for up to a second: the longest the contract lets a
// change take to reach the API.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, time.Second, "condition", cond)
}

var (
	policyHeader = regexp.MustCompile(`^"[A-Za-z0-9_.-]+";q=\d+;w=\d+$`)
	limitHeader  = regexp.MustCompile(`^"[A-Za-z0-9_.-]+";r=\d+;t=\d+$`)
	digits       = regexp.MustCompile(`^\d+$`)
)

func checkHeaders(t *testing.T, r checkResponse, denied bool) {
	t.Helper()
	checkHeadersWithin(t, r, denied, time.Hour)
}

// checkHeadersWithin checks the rate-limit headers of r, whose rule resets
// within horizon.
func checkHeadersWithin(t *testing.T, r checkResponse, denied bool, horizon time.Duration) {
	t.Helper()
	if h := r.header.Get("RateLimit-Policy"); !policyHeader.MatchString(h) {
		t.Errorf("RateLimit-Policy = %q, malformed", h)
	}
	if h := r.header.Get("RateLimit"); !limitHeader.MatchString(h) {
		t.Errorf("RateLimit = %q, malformed", h)
	}
	for _, name := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Used", "X-RateLimit-Reset"} {
		if h := r.header.Get(name); !digits.MatchString(h) {
			t.Errorf("%s = %q, want an integer", name, h)
		}
	}
	reset, _ := strconv.ParseInt(r.header.Get("X-RateLimit-Reset"), 10, 64)
	if now := time.Now().Unix(); reset < now || reset > now+int64(horizon.Seconds())+5 {
		t.Errorf("X-RateLimit-Reset = %d, want epoch seconds within %v after %d", reset, horizon, now)
	}
	ra := r.header.Get("Retry-After")
	if denied && !digits.MatchString(ra) {
		t.Errorf("denied: Retry-After = %q, want delay-seconds", ra)
	}
	if !denied && ra != "" {
		t.Errorf("allowed: Retry-After = %q, want none", ra)
	}
}

func TestCheckReasons(t *testing.T) {
	f := newFixture(t)
	base := f.startAPI(t, nil)
	ctx := context.Background()
	ts := tenants.NewStore(f.db)

	revokedKey, expiredKey := f.deadKeys(t)
	suspendedKey, _, err := ts.IssueKey(ctx, f.tenants["enterprise"].ID, "suspended", nil)
	testenv.Must(t, err)
	_, err = ts.SetStatus(ctx, f.tenants["enterprise"].ID, tenants.StatusSuspended)
	testenv.Must(t, err)
	unknown, _, _ := tenants.GenerateKey()

	cases := []struct {
		name, body, reason, tier string
		allowed                  bool
	}{
		{"ok", checkBody(f.keys["free"], "", "GET /repos"), tollgate.ReasonOK, "authenticated", true},
		{"malformed key", checkBody("tg_not-a-key", "", ""), tollgate.ReasonInvalidKey, "authenticated", false},
		{"unknown key", checkBody(unknown, "", ""), tollgate.ReasonInvalidKey, "authenticated", false},
		{"revoked", checkBody(revokedKey, "", ""), tollgate.ReasonKeyRevoked, "authenticated", false},
		{"expired", checkBody(expiredKey, "", ""), tollgate.ReasonKeyExpired, "authenticated", false},
		{"suspended", checkBody(suspendedKey, "", ""), tollgate.ReasonTenantSuspended, "authenticated", false},
		{"anonymous", checkBody("", "198.51.100.1", ""), tollgate.ReasonOK, "anonymous", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r checkResponse
			waitFor(t, func() bool { r = post(t, base, f.token, c.body); return r.body["reason"] == c.reason })
			if r.body["allowed"] != c.allowed || r.body["tier"] != c.tier {
				t.Errorf("got allowed=%v tier=%v, want %v %v (%v)", r.body["allowed"], r.body["tier"], c.allowed, c.tier, r.body)
			}
			if c.allowed {
				checkHeaders(t, r, false)
			}
		})
	}

	t.Run("rate_limited", func(t *testing.T) {
		// pro's search rule: token bucket 10/s, burst 10.
		var last checkResponse
		for range 11 {
			last = post(t, base, f.token, checkBody(f.keys["pro"], "", "POST /v1/search"))
		}
		if last.body["allowed"] != false || last.body["reason"] != tollgate.ReasonRateLimited || last.body["policy"] != "search" {
			t.Fatalf("11th search: %v, want denied by search", last.body)
		}
		if got := last.body["retry_after_ms"].(float64); got <= 0 || got > 100 {
			t.Errorf("retry_after_ms = %v, want in (0, 100]", got)
		}
		checkHeaders(t, last, true)
	})
}

func TestCheckBadInput(t *testing.T) {
	f := newFixture(t)
	base := f.startAPI(t, nil)
	cases := []struct {
		name   string
		body   string
		status int
		field  string
	}{
		{"malformed json", `{"key":`, 400, "body"},
		{"unknown field", `{"ip":"1.2.3.4","colour":"red"}`, 400, "colour"},
		{"wrong type", `{"ip":"1.2.3.4","cost":"one"}`, 400, "cost"},
		{"two values", `{"ip":"1.2.3.4"}{}`, 400, "body"},
		{"negative cost", `{"ip":"1.2.3.4","cost":-1}`, 422, "cost"},
		{"bad ip", `{"ip":"999.1.1.1"}`, 422, "ip"},
		{"neither key nor ip", `{"resource":"GET /"}`, 422, "ip"},
		{"empty key", `{"key":""}`, 422, "key"},
		{"NUL in resource", `{"ip":"1.2.3.4","resource":"GET /x\u0000"}`, 422, "resource"},
		{"control character in resource", `{"ip":"1.2.3.4","resource":"GET /x\n"}`, 422, "resource"},
		{"long resource", `{"ip":"1.2.3.4","resource":"` + strings.Repeat("a", 1025) + `"}`, 422, "resource"},
		{"too large", `{"ip":"1.2.3.4","resource":"` + strings.Repeat("a", 17<<10) + `"}`, 413, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := post(t, base, f.token, c.body)
			if r.status != c.status {
				t.Fatalf("status %d, want %d (%v)", r.status, c.status, r.problem)
			}
			if c.field != "" {
				errs, _ := r.problem["errors"].(map[string]any)
				if _, ok := errs[c.field]; !ok {
					t.Errorf("problem %v does not name field %q", r.problem, c.field)
				}
			}
		})
	}
}

// TestResourceWithoutRules: a resource no rule of the plan matches is
// allowed, unlimited, and says so.
func TestResourceWithoutRules(t *testing.T) {
	f := newFixture(t)
	key := f.keyOnPlan(t, plans.Plan{Name: "narrow", Rules: []plans.Rule{{Name: "search",
		Algorithm: limiter.GCRA, Limit: 1, PeriodUS: limiter.HourUS, Resource: "POST /v1/search"}}}, "narrow-co")
	base := f.startAPI(t, nil)
	for range 3 {
		r := post(t, base, f.token, checkBody(key, "", "GET /repos"))
		if r.body["allowed"] != true || r.body["reason"] != tollgate.ReasonOK || len(r.body["rules"].([]any)) != 0 {
			t.Fatalf("unlimited resource: %v, want allowed ok with no rules", r.body)
		}
		if h := r.header.Get("RateLimit"); h != "" {
			t.Errorf("RateLimit %q without a rule", h)
		}
	}
}

func TestAnonymousTier(t *testing.T) {
	f := newFixture(t)
	base := f.startAPI(t, nil)
	for i := 1; i <= 60; i++ {
		r := post(t, base, f.token, checkBody("", "203.0.113.9", "GET /"))
		if r.body["allowed"] != true {
			t.Fatalf("request %d denied: %v", i, r.body)
		}
	}
	r := post(t, base, f.token, checkBody("", "203.0.113.9", "GET /"))
	if r.body["allowed"] != false || r.body["tier"] != "anonymous" || r.body["reason"] != "rate_limited" {
		t.Fatalf("61st: %v, want denied anonymous rate_limited", r.body)
	}
	checkHeaders(t, r, true)
	// 60/hour: one more unit after 60 s.
	if ra, _ := strconv.Atoi(r.header.Get("Retry-After")); ra < 59 || ra > 60 {
		t.Errorf("Retry-After = %d, want 60", ra)
	}
	// Another IP has its own allowance.
	if r := post(t, base, f.token, checkBody("", "203.0.113.10", "GET /")); r.body["allowed"] != true {
		t.Errorf("other IP denied: %v", r.body)
	}
}

func TestAllOrNothing(t *testing.T) {
	f := newFixture(t)
	base := f.startAPI(t, nil)
	hourlyRemaining := func(r checkResponse) float64 {
		for _, rule := range r.body["rules"].([]any) {
			m := rule.(map[string]any)
			if m["name"] == "hourly" {
				return m["remaining"].(float64)
			}
		}
		t.Fatalf("no hourly rule in %v", r.body)
		return 0
	}
	for range 10 {
		post(t, base, f.token, checkBody(f.keys["pro"], "", "POST /v1/search"))
	}
	before := hourlyRemaining(post(t, base, f.token, `{"key":"`+f.keys["pro"]+`","cost":0}`))
	for range 5 {
		r := post(t, base, f.token, checkBody(f.keys["pro"], "", "POST /v1/search"))
		if r.body["allowed"] != false {
			t.Fatalf("search after burst allowed: %v", r.body)
		}
	}
	after := hourlyRemaining(post(t, base, f.token, `{"key":"`+f.keys["pro"]+`","cost":0}`))
	if after != before {
		t.Errorf("hourly remaining %v after denied searches, want unchanged %v", after, before)
	}
	if before != 4990 {
		t.Errorf("hourly remaining after 10 searches = %v, want 4990", before)
	}
}

// TestExactnessAcrossServers: three API processes share one Redis; 200
// concurrent checks on one anonymous IP (60/hour) admit exactly 60.
func TestExactnessAcrossServers(t *testing.T) {
	f := newFixture(t)
	bases := []string{f.startAPI(t, nil), f.startAPI(t, nil), f.startAPI(t, nil)}
	var allowed, denied atomic.Int64
	testenv.AtOnce(200, func(i int) {
		r := post(t, bases[i%3], f.token, checkBody("", "192.0.2.77", "GET /"))
		if r.body["allowed"] == true {
			allowed.Add(1)
		} else {
			denied.Add(1)
		}
	})
	if allowed.Load() != 60 || denied.Load() != 140 {
		t.Errorf("allowed %d, denied %d; want exactly 60 and 140", allowed.Load(), denied.Load())
	}
}

func TestRevocationReachesAPI(t *testing.T) {
	f := newFixture(t)
	base := f.startAPI(t, nil)
	ctx := context.Background()
	ts := tenants.NewStore(f.db)
	if r := post(t, base, f.token, checkBody(f.keys["free"], "", "")); r.body["allowed"] != true {
		t.Fatalf("before revocation: %v", r.body)
	}
	testenv.Must(t, ts.RevokeKey(ctx, f.keyIDs["free"]))
	revokedAt := time.Now()
	waitFor(t, func() bool {
		return post(t, base, f.token, checkBody(f.keys["free"], "", "")).body["reason"] == tollgate.ReasonKeyRevoked
	})
	t.Logf("revocation seen after %v", time.Since(revokedAt))

	// A key issued after the snapshot works at once.
	secret, _, err := ts.IssueKey(ctx, f.tenants["free"].ID, "new", nil)
	testenv.Must(t, err)
	if r := post(t, base, f.token, checkBody(secret, "", "")); r.body["allowed"] != true {
		t.Errorf("new key: %v, want allowed", r.body)
	}
}

// failClosedKey returns the secret of a key of a new tenant whose plan's
// one rule (100 an hour) fails closed when the store is unreachable.
// revokedKey issues a key of the tenant "free" and revokes it, returning
// its secret.
func (f *fixture) revokedKey(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	ts := tenants.NewStore(f.db)
	secret, k, err := ts.IssueKey(ctx, f.tenants["free"].ID, "revoked", nil)
	testenv.Must(t, err)
	testenv.Must(t, ts.RevokeKey(ctx, k.ID))
	return secret
}

func (f *fixture) failClosedKey(t *testing.T) string {
	t.Helper()
	return f.keyOnPlan(t, plans.Plan{Name: "strict", Rules: []plans.Rule{{Name: "hourly",
		Algorithm: limiter.GCRA, Limit: 100, PeriodUS: limiter.HourUS, FailureMode: plans.FailClosed}}}, "strict-co")
}

// keyOnPlan stores the plan p, makes a tenant named tenant on it and
// issues that tenant a key, returning the key's secret.
func (f *fixture) keyOnPlan(t *testing.T, p plans.Plan, tenant string) string {
	t.Helper()
	ctx := context.Background()
	stored, err := plans.NewStore(f.db).Put(ctx, p)
	testenv.Must(t, err)
	return f.tenantKey(t, stored.ID, tenant)
}

// tenantKey stores a tenant on plan planID and a key of it, and returns
// the key.
func (f *fixture) tenantKey(t *testing.T, planID int64, tenant string) string {
	t.Helper()
	ctx := context.Background()
	ts := tenants.NewStore(f.db)
	tn, err := ts.Create(ctx, tenant, planID)
	testenv.Must(t, err)
	key, _, err := ts.IssueKey(ctx, tn.ID, "k", nil)
	testenv.Must(t, err)
	return key
}

// TestStoreOutage: with Redis unreachable, fail-open rules allow with
// degraded=true and fail-closed rules deny with reason unavailable.
func TestStoreOutage(t *testing.T) {
	f := newFixture(t)
	strictKey := f.failClosedKey(t)
	base := f.startAPI(t, map[string]string{"TOLLGATE_REDIS_ADDR": "127.0.0.1:1", "TOLLGATE_REDIS_TIMEOUT": "100ms"})

	r := post(t, base, f.token, checkBody(f.keys["pro"], "", ""))
	if r.body["allowed"] != true || r.body["degraded"] != true {
		t.Errorf("fail-open: %v, want allowed and degraded", r.body)
	}
	r = post(t, base, f.token, checkBody(strictKey, "", ""))
	if r.body["allowed"] != false || r.body["degraded"] != true || r.body["reason"] != tollgate.ReasonUnavailable {
		t.Errorf("fail-closed: %v, want denied, degraded, unavailable", r.body)
	}
	if ra := r.header.Get("Retry-After"); ra != "1" || r.body["retry_after_ms"] != float64(1000) {
		t.Errorf("fail-closed: Retry-After %q, retry_after_ms %v; want 1 and 1000", ra, r.body["retry_after_ms"])
	}
}

func TestHealthAndMetrics(t *testing.T) {
	f := newFixture(t)
	base := f.startAPI(t, nil)
	post(t, base, f.token, checkBody(f.keys["pro"], "", ""))
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200, "/nope": 404} {
		resp, err := http.Get(base + path)
		testenv.Must(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s = %d, want %d", path, resp.StatusCode, want)
		}
		if path == "/metrics" {
			for _, m := range []string{`tollgate_checks_total{decision="allowed",reason="ok"} 1`,
				"tollgate_check_duration_seconds_bucket", "tollgate_store_errors_total 0", "tollgate_snapshot_age_seconds",
				`tollgate_build_info{go_version="` + runtime.Version() + `",revision="`, `",version="` + buildinfo.Version + `"} 1`} {
				if !bytes.Contains(body, []byte(m)) {
					t.Errorf("/metrics lacks %q", m)
				}
			}
		}
	}
}

// TestVersionHelpAndHealthcheck: --version, --help on stdout, and the
// healthcheck subcommand that container health checks run: 0 while the
// server on TOLLGATE_API_ADDR answers, an error otherwise.
func TestVersionHelpAndHealthcheck(t *testing.T) {
	cli := func(env map[string]string, args ...string) (string, error) {
		var stdout bytes.Buffer
		err := run(context.Background(), args, func(k string) string { return env[k] }, &stdout, io.Discard, nil)
		return stdout.String(), err
	}
	if out, err := cli(nil, "--version"); err != nil || out != "api "+buildinfo.Read().String()+"\n" {
		t.Errorf("--version: %q, %v", out, err)
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"healthcheck", "--help"}} {
		if out, err := cli(nil, args...); err != nil || !strings.Contains(out, "api healthcheck") || !strings.Contains(out, "-version") {
			t.Errorf("%v: %q, %v", args, out, err)
		}
	}
	if _, err := cli(nil, "frobnicate"); err == nil || !strings.Contains(err.Error(), "frobnicate") {
		t.Errorf("an unknown command: %v", err)
	}
	f := newFixture(t)
	base := f.startAPI(t, nil)
	addr := strings.TrimPrefix(base, "http://")
	if _, err := cli(map[string]string{"TOLLGATE_API_ADDR": addr}, "healthcheck"); err != nil {
		t.Errorf("healthcheck of a running server: %v", err)
	}
	closed := testenv.FreeAddr(t)
	if _, err := cli(map[string]string{"TOLLGATE_API_ADDR": closed}, "healthcheck"); err == nil {
		t.Error("healthcheck of a port nobody listens on succeeded")
	}
}

func TestConfigErrorsNameTheSetting(t *testing.T) {
	for name, val := range map[string]string{
		"TOLLGATE_STORE": "etcd", "TOLLGATE_REDIS_TIMEOUT": "soon", "TOLLGATE_KEY_PREFIX": "{x}",
		"TOLLGATE_TRUSTED_PROXIES": "proxy.internal", "TOLLGATE_FORWARD_KEY_HEADERS": "X-API-Key,Bad Header",
		"TOLLGATE_FORWARD_KEY_QUERY": "a=b",
	} {
		err := run(context.Background(), nil, func(k string) string {
			if k == name {
				return val
			}
			return ""
		}, io.Discard, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: error %v does not name the setting", name, val, err)
		}
	}
}

// TestStoresBehindTheAPI runs the anonymous-tier check through the API on
// Redis Cluster and on the in-memory store (single-node mode).
func TestStoresBehindTheAPI(t *testing.T) {
	for name, env := range map[string]func(t *testing.T) map[string]string{
		"cluster": func(t *testing.T) map[string]string {
			_, prefix := testenv.RedisCluster(t)
			return map[string]string{"TOLLGATE_REDIS_CLUSTER_ADDRS": strings.Join(testenv.RedisClusterAddrs(t), ","),
				"TOLLGATE_KEY_PREFIX": prefix}
		},
		"memory": func(t *testing.T) map[string]string {
			return map[string]string{"TOLLGATE_STORE": "memory", "TOLLGATE_REDIS_ADDR": "127.0.0.1:1"}
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			base := f.startAPI(t, env(t))
			for i := 1; i <= 61; i++ {
				r := post(t, base, f.token, checkBody("", "203.0.113.50", "GET /"))
				if got, want := r.body["allowed"], i <= 60; got != want {
					t.Fatalf("request %d: allowed=%v, want %v (%v)", i, got, want, r.body)
				}
			}
			// A multi-rule check (pro: hourly + search) on one call.
			r := post(t, base, f.token, checkBody(f.keys["pro"], "", "POST /v1/search"))
			if r.body["allowed"] != true || len(r.body["rules"].([]any)) != 2 {
				t.Errorf("pro search: %v, want allowed with two rules", r.body)
			}
			resp, err := http.Get(base + "/readyz")
			testenv.Must(t, err)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("/readyz = %d, want 200", resp.StatusCode)
			}
		})
	}
}

// TestEveryAlgorithmThroughTheCheckAPI: a plan with one rule per algorithm
// (each on its own resource) is enforced through POST /v1/check: each
// admits exactly its allowance, then denies with a retry, and a shaping
// leaky bucket answers delay_ms.
func TestEveryAlgorithmThroughTheCheckAPI(t *testing.T) {
	f := newFixture(t)
	rule := func(name string, alg limiter.Algorithm, limit int64, opts plans.Options) plans.Rule {
		return plans.Rule{Name: name, Algorithm: alg, Limit: limit, PeriodUS: limiter.HourUS, Burst: limit,
			Resource: "GET /" + name, Options: opts}
	}
	zoo := plans.Plan{Name: "zoo", Rules: []plans.Rule{
		rule("gcra", limiter.GCRA, 3, plans.Options{}),
		rule("bucket", limiter.TokenBucket, 3, plans.Options{}),
		rule("police", limiter.LeakyBucket, 3, plans.Options{}),
		rule("shape", limiter.LeakyBucket, 3, plans.Options{LeakyMode: "shape"}),
		rule("window", limiter.FixedWindow, 3, plans.Options{}),
		rule("month", limiter.FixedWindow, 3, plans.Options{Calendar: "month"}),
		rule("anchored", limiter.FixedWindow, 3, plans.Options{Anchor: "first_request"}),
		rule("log", limiter.SlidingWindowLog, 3, plans.Options{}),
		rule("counter", limiter.SlidingWindowCounter, 3, plans.Options{}),
		rule("inflight", limiter.Concurrency, 3, plans.Options{}),
	}}
	key := f.keyOnPlan(t, zoo, "zoo-keeper")
	base := f.startAPI(t, nil)

	for _, r := range zoo.Rules {
		t.Run(r.Name, func(t *testing.T) {
			var delays []float64
			for i := 1; i <= 4; i++ {
				res := post(t, base, f.token, checkBody(key, "", "GET /"+r.Name))
				rules := res.body["rules"].([]any)
				if len(rules) != 1 || rules[0].(map[string]any)["algorithm"] != string(r.Algorithm) {
					t.Fatalf("check %d: rules %v, want only %s (%s)", i, rules, r.Name, r.Algorithm)
				}
				if got, want := res.body["allowed"], i <= 3; got != want {
					t.Fatalf("check %d: allowed=%v, want %v (%v)", i, got, want, res.body)
				}
				if i <= 3 {
					d, _ := res.body["delay_ms"].(float64)
					delays = append(delays, d)
					continue
				}
				if retry := res.body["retry_after_ms"].(float64); retry <= 0 {
					t.Errorf("denied with retry_after_ms %v, want > 0", retry)
				}
				horizon := time.Hour
				switch r.Name {
				case "month":
					horizon = 31 * 24 * time.Hour
				case "counter": // the current and the next window
					horizon = 2 * time.Hour
				}
				checkHeadersWithin(t, res, true, horizon)
			}
			wantDelays := []float64{0, 0, 0}
			if r.Name == "shape" {
				// 3 per hour: one every 20 minutes.
				wantDelays = []float64{0, 1_200_000, 2_400_000}
			}
			// Real time passes between the checks: a delay may be short by
			// that much, never longer.
			for i := range delays {
				if delays[i] > wantDelays[i] || delays[i] < wantDelays[i]-5000 {
					t.Errorf("delays %v, want %v (less at most the test's own run time)", delays, wantDelays)
					break
				}
			}
		})
	}
}

// TestReadyzReportsTheSchema: an api process whose schema is migrated
// down under it keeps deciding checks from the snapshot it holds, so it
// stays ready, but /readyz says what is wrong with Postgres.
func TestReadyzReportsTheSchema(t *testing.T) {
	f := newFixture(t)
	base := f.startAPI(t, nil)
	// The version migrate down would leave (the migration itself can
	// deadlock with the process's own queries: that is what "under it"
	// risks).
	_, err := f.db.Exec(context.Background(), `UPDATE schema_migrations SET version = version - 1`)
	testenv.Must(t, err)
	resp, err := http.Get(base + "/readyz")
	testenv.Must(t, err)
	var body map[string]string
	testenv.Must(t, json.NewDecoder(resp.Body).Decode(&body))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(body["postgres"], "but this binary expects") ||
		!strings.Contains(body["postgres"], "serving from the last snapshot") {
		t.Errorf("/readyz one migration behind: %d %v, want 200 saying the schema is behind", resp.StatusCode, body)
	}
	if r := post(t, base, f.token, checkBody(f.keys["pro"], "", "")); r.body["allowed"] != true {
		t.Errorf("a check one migration behind: %v, want it decided from the snapshot", r.body)
	}
}
