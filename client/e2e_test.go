package client_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
)

// TestMain removes the programs the tests built.
func TestMain(m *testing.M) { admintest.Main(m) }

// TestEndToEnd drives the SDK against the real programs: cmd/api and
// cmd/admin are built, the demo is seeded with `admin seed demo --json
// --usage=false` (the test counts usage of its own) in a fresh database,
// and a service protected by the middleware is called the way its callers
// would.
func TestEndToEnd(t *testing.T) {
	for _, name := range []string{"TOLLGATE_TEST_DATABASE_URL", "TOLLGATE_TEST_REDIS_ADDR"} {
		if os.Getenv(name) == "" {
			t.Skipf("%s is unset: this end-to-end test needs the Postgres and Redis that `make test` (scripts/services.sh test) starts", name)
		}
	}
	ctx := context.Background()
	dbURL := testenv.DatabaseURL(t)
	_, prefix := testenv.Redis(t)

	var seed struct {
		ServiceToken string            `json:"service_token"`
		Keys         map[string]string `json:"keys"`
		Users        map[string]struct {
			Email, Password string
		} `json:"users"`
	}
	out, err := admintest.RunAdmin(t, dbURL, "seed", "demo", "--json", "--usage=false")
	if err != nil {
		t.Fatalf("admin seed demo: %v", err)
	}
	if err := json.Unmarshal([]byte(out), &seed); err != nil || seed.ServiceToken == "" || seed.Keys["pro"] == "" {
		t.Fatalf("admin seed demo --json printed %q (%v)", out, err)
	}

	apiURL := admintest.StartCheckAPI(t, dbURL, []string{
		"TOLLGATE_KEY_PREFIX=" + prefix,
		// Usage straight to Postgres, often, so the admin API sees it soon.
		"TOLLGATE_USAGE_SINK=postgres",
		"TOLLGATE_USAGE_FLUSH=100ms",
	})
	adminURL := admintest.StartAdmin(t, dbURL, map[string]string{"TOLLGATE_KEY_PREFIX": prefix}).URL

	// The protected service. Round trips to the check API are counted to
	// see denials answered from memory.
	var roundTrips atomic.Int64
	tg, err := client.New(apiURL, seed.ServiceToken, client.Options{
		HTTPClient: &http.Client{Transport: countingTransport{&roundTrips, http.DefaultTransport}},
	})
	testenv.Must(t, err)
	service := httptest.NewServer(tg.Middleware(client.MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := client.DecisionFrom(r.Context())
		if !ok {
			t.Error("handler: no decision in the request's context")
			return
		}
		fmt.Fprintf(w, "%s %s %d", d.Tier, d.Plan, d.Remaining)
	})))
	defer service.Close()
	get := func(t *testing.T, header ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", service.URL+"/v1/repos", nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	t.Run("anonymous callers: 60 an hour per address, then 429", func(t *testing.T) {
		for i := 1; i <= 60; i++ {
			resp := get(t)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("anonymous request %d: status %d, want 200", i, resp.StatusCode)
			}
			if i == 1 {
				wantHeaders(t, resp.Header, map[string]string{
					"RateLimit-Policy": `"hourly";q=60;w=3600`, "X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "59",
					"X-RateLimit-Used": "1", "Retry-After": "",
				})
			}
		}
		resp := get(t)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("61st anonymous request: status %d, want 429", resp.StatusCode)
		}
		retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || retry < 1 || retry > 60 {
			t.Errorf("Retry-After = %q, want 1–60 seconds (60/hour refills one a minute)", resp.Header.Get("Retry-After"))
		}
		wantHeaders(t, resp.Header, map[string]string{
			"Content-Type": "application/problem+json", "RateLimit-Policy": `"hourly";q=60;w=3600`,
			"X-RateLimit-Remaining": "0",
		})
		if got := roundTrips.Load(); got != 61 {
			t.Errorf("round trips after 61 requests = %d, want 61", got)
		}

		// Told to wait: denied again without asking.
		again := get(t)
		if again.StatusCode != http.StatusTooManyRequests || roundTrips.Load() != 61 {
			t.Errorf("62nd request: status %d after %d round trips, want 429 without a round trip", again.StatusCode, roundTrips.Load())
		}
		if r, _ := strconv.Atoi(again.Header.Get("Retry-After")); r < 1 || r > retry {
			t.Errorf("62nd request: Retry-After %q, want 1–%d", again.Header.Get("Retry-After"), retry)
		}
	})

	t.Run("a pro key passes with its plan's headers", func(t *testing.T) {
		resp := get(t, "Authorization", "Bearer "+seed.Keys["pro"])
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
		wantHeaders(t, resp.Header, map[string]string{
			"RateLimit-Policy": `"hourly";q=5000;w=3600`, "X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "4999",
			"RateLimit": `"hourly";r=4999;t=1`,
		})
		d, err := tg.Check(ctx, client.CheckRequest{Key: seed.Keys["pro"], Resource: "POST /v1/search", DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || d.Tier != client.TierAuthenticated || d.Plan != "pro" || d.TenantID == "" || d.KeyID == "" || len(d.Rules) != 2 {
			t.Errorf("dry-run decision = %+v, want pro's two rules", d)
		}
	})

	t.Run("an unknown key is a 401", func(t *testing.T) {
		resp := get(t, "X-API-Key", "tg_000000000000000000000000000000000000")
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("status %d (%s), want 401 problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	})

	t.Run("an over-long key is a 401, not the 500 of a body too large", func(t *testing.T) {
		resp := get(t, "X-API-Key", strings.Repeat("k", 17<<10))
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("status %d, WWW-Authenticate %q; want a 401 with WWW-Authenticate", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
		// The check API itself denies a long key that fits its body.
		d, err := tg.Check(ctx, client.CheckRequest{Key: strings.Repeat("k", client.MaxKeyLength), Resource: "GET /v1/repos"})
		if err != nil || d.Allowed || d.Reason != client.ReasonInvalidKey {
			t.Errorf("a key of MaxKeyLength bytes: %+v, %v; want the check API's invalid_key", d, err)
		}
	})

	t.Run("refusals of the check API are problems naming the fields", func(t *testing.T) {
		_, err := tg.Check(ctx, client.CheckRequest{Resource: "GET /"})
		var p *client.ProblemError
		if !errors.As(err, &p) || p.Status != 422 || p.Errors["ip"] == "" {
			t.Errorf("no key and no ip: %v, want a 422 naming ip", err)
		}
		bad, err := client.New(apiURL, "not-a-token", client.Options{})
		testenv.Must(t, err)
		if _, err := bad.Check(ctx, client.CheckRequest{IP: "203.0.113.7"}); !errors.As(err, &p) || p.Status != 401 || p.Code != "unauthorized" {
			t.Errorf("bad service token: %v, want a 401 unauthorized", err)
		}
	})

	// operator signs the demo operator in through the admin client and
	// finds the demo plan named plan.
	operator := func(t *testing.T, plan string) (*client.AdminClient, int64) {
		t.Helper()
		admin, err := client.NewAdmin(adminURL, client.AdminOptions{})
		testenv.Must(t, err)
		op := seed.Users["operator"]
		if _, err := admin.Login(ctx, op.Email, op.Password); err != nil {
			t.Fatalf("login: %v", err)
		}
		plans, err := admin.ListPlans(ctx, client.ListOptions{Limit: 200})
		testenv.Must(t, err)
		for _, p := range plans.Items {
			if p.Name == plan {
				return admin, p.ID
			}
		}
		t.Fatalf("no demo plan %s", plan)
		return nil, 0
	}

	t.Run("admin API: a new tenant's key works until revoked", func(t *testing.T) {
		admin, proID := operator(t, "pro")
		pro, err := admin.GetPlan(ctx, proID)
		testenv.Must(t, err)
		if len(pro.Rules) != 2 || pro.Rules[0].Limit == 0 || pro.Currency != "USD" {
			t.Errorf("pro plan = %+v", pro)
		}
		tenant, err := admin.CreateTenant(ctx, "sdk-e2e", proID)
		testenv.Must(t, err)
		found, err := admin.ListTenants(ctx, client.TenantQuery{Search: "sdk-e2e"})
		testenv.Must(t, err)
		if len(found.Items) != 1 || found.Items[0].ID != tenant.ID || found.Items[0].Status != "active" {
			t.Errorf("tenants named sdk-e2e = %+v, want the new one", found.Items)
		}
		if _, err := admin.CreateTenant(ctx, "sdk-e2e", proID); !isProblem(err, http.StatusConflict) {
			t.Errorf("a taken name: %v, want a 409", err)
		}
		issued, err := admin.IssueKey(ctx, tenant.ID, client.KeyInput{Name: "sdk", Metadata: map[string]string{"by": "e2e"}})
		testenv.Must(t, err)
		if !strings.HasPrefix(issued.Secret, issued.Key.Prefix) || issued.Key.Metadata["by"] != "e2e" {
			t.Errorf("issued key = %+v", issued)
		}
		waitStatus(t, func() int { return get(t, "X-API-Key", issued.Secret).StatusCode }, http.StatusOK)

		if _, err := admin.RevokeKey(ctx, tenant.ID, issued.Key.ID); err != nil {
			t.Fatalf("revoke: %v", err)
		}
		waitStatus(t, func() int { return get(t, "X-API-Key", issued.Secret).StatusCode }, http.StatusForbidden)
		keys, err := admin.ListKeys(ctx, tenant.ID, client.ListOptions{})
		testenv.Must(t, err)
		if len(keys.Items) != 1 || keys.Items[0].RevokedAt.IsZero() {
			t.Errorf("keys = %+v, want the revoked one", keys.Items)
		}

		month := time.Now().UTC().Format("2006-01")
		st, err := admin.GetStatement(ctx, tenant.ID, month)
		testenv.Must(t, err)
		if st.Status != "open" || st.TenantName != "sdk-e2e" || st.Currency != "USD" || len(st.PlanPeriods) != 1 || st.PlanPeriods[0].Plan != "pro" {
			t.Errorf("statement = %+v", st)
		}
		if _, err := admin.GetStatement(ctx, "00000000-0000-4000-8000-000000000000", month); !isProblem(err, http.StatusNotFound) {
			t.Errorf("statement of no tenant: %v, want a 404", err)
		}

		// Every anonymous decision the service asked for is counted: 60
		// allowed and the one denial; the denial answered from memory is
		// not.
		testenv.Eventually(t, time.Now(), 10*time.Second, "60 allowed and 1 denied anonymous checks in usage", func() (bool, string) {
			u, err := admin.UsageTotals(ctx, time.Time{}, time.Time{})
			testenv.Must(t, err)
			anon := u.Totals.ByTier[client.TierAnonymous]
			return anon.Allowed == 60 && anon.Denied == 1, fmt.Sprintf("%+v", anon)
		})
	})

	t.Run("admin API: a grant retried with its idempotency key grants once", func(t *testing.T) {
		admin, proID := operator(t, "pro")
		tenant, err := admin.CreateTenant(ctx, "sdk-e2e-credits", proID)
		testenv.Must(t, err)
		in := client.CreditGrantInput{Amount: 500, ExpiresAt: time.Now().Add(720 * time.Hour).UTC().Truncate(time.Second),
			Cause: "March pack", IdempotencyKey: "order-4711"}
		first, err := admin.GrantCredits(ctx, tenant.ID, in)
		testenv.Must(t, err)
		again, err := admin.GrantCredits(ctx, tenant.ID, in)
		testenv.Must(t, err)
		if first.Replayed || !again.Replayed || again.ID != first.ID || !again.CreatedAt.Equal(first.CreatedAt) {
			t.Errorf("grant %+v, then %+v; want the first grant replayed", first, again)
		}
		in.Amount = 5000
		if _, err := admin.GrantCredits(ctx, tenant.ID, in); !isProblem(err, http.StatusConflict) {
			t.Errorf("the key with another amount: %v, want a 409", err)
		}
		adj := client.CreditAdjustInput{Units: -30, Cause: "correction", IdempotencyKey: "fix-1"}
		a1, err := admin.AdjustCredits(ctx, tenant.ID, adj)
		testenv.Must(t, err)
		a2, err := admin.AdjustCredits(ctx, tenant.ID, adj)
		testenv.Must(t, err)
		if a1.Balance != 470 || a1.Replayed || !a2.Replayed || a2.Balance != 470 {
			t.Errorf("adjustment %+v, then %+v; want a balance of 470, the second replayed", a1, a2)
		}
		if _, err := admin.GrantCredits(ctx, tenant.ID, client.CreditGrantInput{Amount: 1, Cause: "x", IdempotencyKey: "clé"}); !isProblem(err, http.StatusUnprocessableEntity) {
			t.Errorf("a key that is not ASCII: %v, want a 422", err)
		}
	})

	// llmKey makes a tenant name on the llm plan and a key of it, waits
	// until the key is allowed, and returns a check that fails the test on
	// an error and a request of the key on POST /v1/complete.
	llmKey := func(t *testing.T, name string) (func(*testing.T, client.CheckRequest) *client.Decision, client.CheckRequest) {
		t.Helper()
		admin, llmID := operator(t, "llm")
		tenant, err := admin.CreateTenant(ctx, name, llmID)
		testenv.Must(t, err)
		issued, err := admin.IssueKey(ctx, tenant.ID, client.KeyInput{Name: "sdk"})
		testenv.Must(t, err)
		check := func(t *testing.T, req client.CheckRequest) *client.Decision {
			t.Helper()
			d, err := tg.Check(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		one := client.CheckRequest{Key: issued.Secret, Resource: "POST /v1/complete"}
		testenv.Eventually(t, time.Now(), 2*time.Second, "the new key allowed", func() (bool, string) {
			d := check(t, client.CheckRequest{Key: one.Key, Resource: one.Resource, DryRun: true})
			return d.Allowed, d.Reason
		})
		return check, one
	}

	// The llm plan: POST /v1/complete is held (a tokens rule of 100,000 a
	// minute) and at most 4 requests of a key are in flight (leases of
	// 30 s). Denials that a give-back can end are seen to end at once.
	t.Run("llm: a freed slot and a settled hold end denials at once", func(t *testing.T) {
		check, one := llmKey(t, "sdk-e2e-llm")

		t.Run("a denial by the in-flight rule is not remembered", func(t *testing.T) {
			var leases []string
			defer func() {
				for _, id := range leases {
					_, _ = tg.Release(ctx, id)
				}
			}()
			for i := range 4 {
				d := check(t, one)
				if !d.Allowed || d.LeaseID == "" {
					t.Fatalf("request %d in flight: %+v, want allowed with a lease", i+1, d)
				}
				leases = append(leases, d.LeaseID)
			}
			d := check(t, one)
			if d.Allowed || d.Policy != "inflight" || d.RetryAfterMS <= 1000 {
				t.Fatalf("a fifth request in flight: %+v, want denied by inflight until a lease expires", d)
			}
			// Another process's request ends: its slot is free at once.
			other, err := client.New(apiURL, seed.ServiceToken, client.Options{})
			testenv.Must(t, err)
			if l, err := other.Release(ctx, leases[0]); err != nil || !l.Released {
				t.Fatalf("release elsewhere: %+v, %v", l, err)
			}
			again := check(t, one)
			if !again.Allowed || again.Remembered {
				t.Fatalf("after a slot was freed: allowed %v, remembered %v (%s); want asked and allowed", again.Allowed, again.Remembered, again.Reason)
			}
			leases[0] = again.LeaseID
		})

		t.Run("settling a hold forgets the denials it caused", func(t *testing.T) {
			all := client.CheckRequest{Key: one.Key, Resource: one.Resource, Cost: 100_000}
			held, err := tg.Hold(ctx, all)
			if err != nil || !held.Allowed || held.HoldID == "" {
				t.Fatalf("hold of a minute's tokens: %+v, %v", held, err)
			}
			d := check(t, all)
			if d.Allowed || d.Remembered || d.Policy != "tokens" || d.RetryAfterMS <= 1000 {
				t.Fatalf("while held: %+v, want the server's denial by tokens", d)
			}
			if d := check(t, all); !d.Remembered {
				t.Errorf("again while held: %+v, want the denial remembered", d)
			}
			if _, err := tg.Settle(ctx, held.HoldID, 0); err != nil {
				t.Fatal(err)
			}
			after := check(t, all)
			if !after.Allowed || after.Remembered {
				t.Errorf("after settling at 0: allowed %v, remembered %v (%s); want asked and allowed", after.Allowed, after.Remembered, after.Reason)
			}
			if after.LeaseID != "" {
				_, _ = tg.Release(ctx, after.LeaseID)
			}
		})
	})

	// HoldTTL with AutoHold is the TTL of the hold a rule asks for
	// (the tokens rule's own is 300 s); a check that opens no hold
	// accepts it too, and without hold or auto_hold it is refused.
	// The lease's TTL comes with its expiry, for renewals that do
	// not depend on the local clock.
	t.Run("llm: auto_hold takes hold_ttl_s; leases carry their TTL", func(t *testing.T) {
		check, one := llmKey(t, "sdk-e2e-autohold")
		asked := time.Now()
		d := check(t, client.CheckRequest{Key: one.Key, Resource: one.Resource, Cost: 10, AutoHold: true, HoldTTL: time.Minute})
		if !d.Allowed || d.HoldID == "" || d.HoldExpiresAt.Before(asked.Add(55*time.Second)) || d.HoldExpiresAt.After(asked.Add(65*time.Second)) {
			t.Fatalf("auto hold for a minute: %+v, want a hold expiring a minute after %v", d, asked)
		}
		if d.LeaseID == "" || d.LeaseTTLMS != 30_000 {
			t.Errorf("lease %q, lease_ttl_ms %d; want a lease of the inflight rule's 30 s", d.LeaseID, d.LeaseTTLMS)
		}
		if l, err := tg.Renew(ctx, d.LeaseID); err != nil || l.TTLMS <= 29_000 || l.TTLMS > 30_000 {
			t.Errorf("renewal: %+v, %v; want a ttl_ms of 30 s", l, err)
		}
		if _, err := tg.Settle(ctx, d.HoldID, 10); err != nil {
			t.Fatal(err)
		}
		plain := check(t, client.CheckRequest{Key: one.Key, Resource: "GET /v1/models", AutoHold: true, HoldTTL: time.Minute})
		if !plain.Allowed || plain.HoldID != "" {
			t.Errorf("auto hold where no rule holds: %+v, want allowed without a hold", plain)
		}
		if plain.LeaseID != "" {
			_, _ = tg.Release(ctx, plain.LeaseID)
		}
		for _, req := range []client.CheckRequest{
			{Key: one.Key, Resource: one.Resource, HoldTTL: time.Minute},
			{Key: one.Key, Resource: one.Resource, AutoHold: true, HoldTTL: 86_401 * time.Second},
		} {
			var p *client.ProblemError
			if _, err := tg.Check(ctx, req); !errors.As(err, &p) || p.Status != http.StatusUnprocessableEntity || p.Errors["hold_ttl_s"] == "" {
				t.Errorf("check %+v: %v, want a 422 naming hold_ttl_s", req, err)
			}
		}
	})

	// A WAF in front of the check API blocks the body of a check whose
	// key looks like an attack with its own 403 page and passes the
	// others on. Its refusal is no outage for the fail mode to decide:
	// fail open, it would let whoever sends such a key past every limit.
	t.Run("a WAF's 403 in front of the check API is a 500, never a pass", func(t *testing.T) {
		target, err := url.Parse(apiURL)
		testenv.Must(t, err)
		proxy := httputil.NewSingleHostReverseProxy(target)
		waf := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if bytes.Contains(body, []byte("' OR 1=1")) {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(http.StatusForbidden)
				io.WriteString(w, "<html><body>403 Forbidden - Request blocked</body></html>")
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			proxy.ServeHTTP(w, r)
		}))
		defer waf.Close()
		behind, err := client.New(waf.URL, seed.ServiceToken, client.Options{FailMode: client.FailOpen})
		testenv.Must(t, err)
		var served atomic.Int64
		protected := httptest.NewServer(behind.Middleware(client.MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			served.Add(1)
			io.WriteString(w, "the protected answer")
		})))
		defer protected.Close()
		for _, tc := range []struct {
			name, key  string
			wantStatus int
			wantServed bool
		}{
			{"a pro key, through the WAF", seed.Keys["pro"], http.StatusOK, true},
			{"an unknown key, through the WAF", "tg_000000000000000000000000000000000000", http.StatusUnauthorized, false},
			{"a key the WAF blocks", "' OR 1=1 --", http.StatusInternalServerError, false},
		} {
			before := served.Load()
			req, _ := http.NewRequest(http.MethodGet, protected.URL+"/v1/repos", nil)
			req.Header.Set("Authorization", "Bearer "+tc.key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus || (served.Load() > before) != tc.wantServed {
				t.Errorf("%s: status %d, served %v; want %d, served %v", tc.name, resp.StatusCode, served.Load() > before, tc.wantStatus, tc.wantServed)
			}
		}
	})

	// The llm plan's tokens rule holds POST /v1/complete and asks for a
	// refund on a 5xx or a timeout (refund_on). settling starts a service
	// on a key of a new llm tenant, protected by a client that passes each
	// settlement the check API answers to the channel returned, with an
	// estimate of 50.
	settling := func(t *testing.T, tenantName string, handler http.HandlerFunc) (svcURL, key string, settled <-chan client.Settlement) {
		t.Helper()
		admin, llmID := operator(t, "llm")
		tenant, err := admin.CreateTenant(ctx, tenantName, llmID)
		testenv.Must(t, err)
		issued, err := admin.IssueKey(ctx, tenant.ID, client.KeyInput{Name: "sdk"})
		testenv.Must(t, err)
		answers := make(chan client.Settlement, 10)
		holding, err := client.New(apiURL, seed.ServiceToken, client.Options{
			HTTPClient: &http.Client{Transport: settlements{answers, http.DefaultTransport}}, MemorySize: -1})
		testenv.Must(t, err)
		testenv.Eventually(t, time.Now(), 2*time.Second, "the new key allowed", func() (bool, string) {
			d, err := holding.Check(ctx, client.CheckRequest{Key: issued.Secret, Resource: "POST /v1/complete", DryRun: true})
			testenv.Must(t, err)
			return d.Allowed, d.Reason
		})
		svc := httptest.NewServer(holding.Middleware(client.MiddlewareOptions{Cost: func(*http.Request) int64 { return 50 }})(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if d, _ := client.DecisionFrom(r.Context()); d == nil || d.HoldID == "" || !slices.Contains(d.HoldRefundOn, "timeout") {
					t.Errorf("decision %+v, want a hold its rules refund on a timeout", d)
				}
				handler(w, r)
			})))
		t.Cleanup(svc.Close)
		return svc.URL, issued.Secret, answers
	}
	nextSettlement := func(t *testing.T, settled <-chan client.Settlement) client.Settlement {
		t.Helper()
		return receive(t, settled, 10*time.Second, "no settlement")
	}

	// A caller that reads a streamed answer to its end and hangs up before
	// the handler returns was served: it is charged the cost reported,
	// else the estimate, never refunded as a timeout.
	t.Run("llm: a caller that hangs up after its answer is charged", func(t *testing.T) {
		svcURL, key, settled := settling(t, "sdk-e2e-hangup", func(w http.ResponseWriter, r *http.Request) {
			if v := r.Header.Get("X-Report"); v != "" {
				n, _ := strconv.ParseInt(v, 10, 64)
				client.ReportCost(r.Context(), n)
			}
			io.WriteString(w, "data: the whole completion\n\ndata: [DONE]\n\n")
			_ = http.NewResponseController(w).Flush()
			// The handler's tail (closing the upstream stream, logging)
			// outlasts the caller, who has what it came for.
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
				t.Error("the caller's hang-up went unseen")
			}
		})
		for _, tc := range []struct {
			name, report string
			want         int64
		}{
			{"with a cost reported", "30", 30},
			{"with no cost reported: the estimate", "", 50},
		} {
			t.Run(tc.name, func(t *testing.T) {
				req, _ := http.NewRequest(http.MethodPost, svcURL+"/v1/complete", nil)
				req.Header.Set("Authorization", "Bearer "+key)
				if tc.report != "" {
					req.Header.Set("X-Report", tc.report)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body := bufio.NewReader(resp.Body)
				for {
					line, err := body.ReadString('\n')
					if err != nil {
						t.Fatalf("reading the answer: %v", err)
					}
					if strings.Contains(line, "[DONE]") {
						break
					}
				}
				resp.Body.Close() // hang up, the answer in hand, before the handler returns
				if st := nextSettlement(t, settled); st.Cost != tc.want || st.Estimate != 50 || st.Status != "settled" {
					t.Errorf("settled at %d (%s, estimate %d), want %d", st.Cost, st.Status, st.Estimate, tc.want)
				}
			})
		}
	})

	// An informational answer goes out with the headers set so far:
	// Tollgate-Cost must not, and the cost and the status a refund looks
	// at are the final answer's.
	t.Run("llm: after Early Hints, the final answer's cost and status are settled", func(t *testing.T) {
		svcURL, key, settled := settling(t, "sdk-e2e-hints", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			if r.Header.Get("X-Fail") != "" {
				client.ReportCost(r.Context(), 30)
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			w.Header().Set(client.CostHeader, "3")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "ok")
		})
		for _, tc := range []struct {
			name       string
			fail       bool
			wantStatus int
			want       int64
		}{
			{"a cost in the header", false, http.StatusOK, 3},
			{"a 502: refunded", true, http.StatusBadGateway, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				req, _ := http.NewRequest(http.MethodPost, svcURL+"/v1/complete", nil)
				req.Header.Set("Authorization", "Bearer "+key)
				if tc.fail {
					req.Header.Set("X-Fail", "1")
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tc.wantStatus || resp.Header.Get(client.CostHeader) != "" {
					t.Errorf("status %d, %s %q; want %d without it", resp.StatusCode, client.CostHeader, resp.Header.Get(client.CostHeader), tc.wantStatus)
				}
				if st := nextSettlement(t, settled); st.Cost != tc.want || st.Status != "settled" {
					t.Errorf("settled at %d (%s, estimate %d), want %d", st.Cost, st.Status, st.Estimate, tc.want)
				}
			})
		}
	})

	// With every in-flight slot of the key but one taken, a caller that
	// sends each request once it has the answer to the one before is
	// never denied: its response ends once its hold is settled, which
	// frees its slot.
	t.Run("llm: a caller's next request finds its slot free", func(t *testing.T) {
		svcURL, key, settled := settling(t, "sdk-e2e-sequential", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "ok")
		})
		for i := range 3 {
			d, err := tg.Check(ctx, client.CheckRequest{Key: key, Resource: "POST /v1/complete"})
			if err != nil || !d.Allowed || d.LeaseID == "" {
				t.Fatalf("slot %d taken apart: %+v, %v; want allowed with a lease", i+1, d, err)
			}
			t.Cleanup(func() { _, _ = tg.Release(ctx, d.LeaseID) })
		}
		for i := 1; i <= 8; i++ {
			if status, body := postAs(t, svcURL+"/v1/complete", key); status != http.StatusOK {
				t.Fatalf("request %d: %d %s, want 200: the slot of the request before was still taken", i, status, body)
			}
			select {
			case st := <-settled:
				if st.Cost != 50 || st.Status != "settled" {
					t.Errorf("request %d settled at %d (%s), want 50", i, st.Cost, st.Status)
				}
			default:
				t.Fatalf("request %d answered before its hold was settled", i)
			}
		}
	})
}

// settlements is a transport that passes each settlement the check API
// answers to settled.
type settlements struct {
	settled chan<- client.Settlement
	next    http.RoundTripper
}

func (s settlements) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	if err != nil || r.URL.Path != "/v1/settle" {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var st client.Settlement
	if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &st) == nil {
		s.settled <- st
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// countingTransport counts the requests it sends.
type countingTransport struct {
	n    *atomic.Int64
	next http.RoundTripper
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

func wantHeaders(t *testing.T, h http.Header, want map[string]string) {
	t.Helper()
	for name, v := range want {
		if got := h.Get(name); got != v {
			t.Errorf("%s = %q, want %q", name, got, v)
		}
	}
}

// waitStatus polls status until it returns want, for up to 2 s: a key
// issued or revoked reaches the check API within a second.
func waitStatus(t *testing.T, status func() int, want int) {
	t.Helper()
	testenv.Eventually(t, time.Now(), 2*time.Second, fmt.Sprintf("status %d", want), func() (bool, string) {
		got := status()
		return got == want, fmt.Sprintf("status %d", got)
	})
}
