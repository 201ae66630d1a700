package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
)

// seen is one request the fake admin server received.
type seen struct {
	method, path, query, auth string
	// key is the Idempotency-Key header.
	key  string
	body map[string]any
}

// adminServer answers every request with status and body and records it.
func adminServer(t *testing.T, status int, body string) (*httptest.Server, *seen) {
	t.Helper()
	got := &seen{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.method, got.path, got.query, got.auth = r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Authorization")
		got.key = r.Header.Get("Idempotency-Key")
		raw, _ := io.ReadAll(r.Body)
		if len(raw) > 0 {
			if ct := r.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			if err := json.Unmarshal(raw, &got.body); err != nil {
				t.Errorf("body %q: %v", raw, err)
			}
		}
		ct := "application/json"
		if status >= 400 {
			ct = "application/problem+json"
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

const (
	tenantJSON = `{"id":"8f0e0c4e-5b8a-4c0e-9f49-3d6c1a0b2c01","name":"acme","plan_id":3,"status":"active",
		"created_at":"2026-10-01T12:00:00Z","updated_at":"2026-10-01T12:00:00Z"}`
	keyJSON = `{"id":"0c9d8a8e-1111-4222-8333-444455556666","tenant_id":"8f0e0c4e-5b8a-4c0e-9f49-3d6c1a0b2c01",
		"name":"prod","prefix":"tg_4fT9aQ2x","metadata":{"team":"search"},"created_at":"2026-10-01T12:00:00Z",
		"revoked_at":"2026-10-02T08:00:00Z"}`
	grantJSON = `{"id":"5b33a6a2-88fb-41f9-9843-6ed5731b5db6","tenant_id":"8f0e0c4e-5b8a-4c0e-9f49-3d6c1a0b2c01","amount":500,
		"remaining":500,"priority":2,"expires_at":"2027-01-01T00:00:00Z","expired_at":null,"cause":"March pack","created_at":"2026-10-01T12:00:00Z"}`
	planJSON = `{"id":3,"name":"pro","display_name":"Pro","currency":"USD","base_fee_minor":4900,"included_units":100000,
		"overage_unit_minor":1,"tiers":[{"up_to":1000000,"unit_minor":1},{"up_to":null,"unit_minor":0}],"quota_mode":"none",
		"rules":[{"id":7,"name":"hourly","algorithm":"gcra","limit":5000,"period_us":3600000000,"burst":5000,"resource":"*",
		"scope":"key","mode":"enforce","failure_mode":"open","options":{}}],
		"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-02T00:00:00Z"}`
)

var (
	oct1      = time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	marchPack = client.CreditGrant{ID: "5b33a6a2-88fb-41f9-9843-6ed5731b5db6", TenantID: acme.ID, Amount: 500, Remaining: 500, Priority: 2,
		ExpiresAt: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), Cause: "March pack", CreatedAt: oct1}
	acme = client.Tenant{ID: "8f0e0c4e-5b8a-4c0e-9f49-3d6c1a0b2c01", Name: "acme", PlanID: 3, Status: "active", CreatedAt: oct1, UpdatedAt: oct1}
	prod = client.Key{ID: "0c9d8a8e-1111-4222-8333-444455556666", TenantID: acme.ID, Name: "prod", Prefix: "tg_4fT9aQ2x",
		Metadata: map[string]string{"team": "search"}, CreatedAt: oct1, RevokedAt: time.Date(2026, 10, 2, 8, 0, 0, 0, time.UTC)}
)

func TestAdminCalls(t *testing.T) {
	jan1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name      string
		call      func(context.Context, *client.AdminClient) (any, error)
		status    int
		answer    string
		wantReq   seen
		wantValue any
	}{
		{"list plans", func(ctx context.Context, a *client.AdminClient) (any, error) {
			return a.ListPlans(ctx, client.ListOptions{Limit: 10, Cursor: "abc"})
		}, 200, `{"items":[` + planJSON + `],"next_cursor":"next"}`,
			seen{method: "GET", path: "/api/v1/plans", query: "cursor=abc&limit=10"},
			&client.Page[client.Plan]{NextCursor: "next", Items: []client.Plan{{
				ID: 3, Name: "pro", DisplayName: "Pro", Currency: "USD", BaseFeeMinor: 4900, IncludedUnits: 100000, OverageUnitMinor: 1,
				Tiers: []client.PriceTier{{UpTo: 1000000, UnitMinor: 1}, {UpTo: 0, UnitMinor: 0}}, QuotaMode: "none",
				Rules: []client.Rule{{ID: 7, Name: "hourly", Algorithm: "gcra", Limit: 5000, PeriodUS: 3600000000, Burst: 5000,
					Resource: "*", Scope: "key", Mode: "enforce", FailureMode: "open"}},
				CreatedAt: jan1, UpdatedAt: jan1.Add(24 * time.Hour),
			}}}},
		{"get plan", func(ctx context.Context, a *client.AdminClient) (any, error) {
			p, err := a.GetPlan(ctx, 3)
			if err != nil {
				return nil, err
			}
			return p.Name, nil
		}, 200, planJSON, seen{method: "GET", path: "/api/v1/plans/3"}, "pro"},
		{"list tenants", func(ctx context.Context, a *client.AdminClient) (any, error) {
			return a.ListTenants(ctx, client.TenantQuery{Search: "ac me", Status: "active", PlanID: 3})
		}, 200, `{"items":[` + tenantJSON + `],"next_cursor":null}`,
			seen{method: "GET", path: "/api/v1/tenants", query: "plan_id=3&q=ac+me&status=active"},
			&client.Page[client.Tenant]{Items: []client.Tenant{acme}}},
		{"create tenant", func(ctx context.Context, a *client.AdminClient) (any, error) {
			return a.CreateTenant(ctx, "acme", 3)
		}, 201, tenantJSON,
			seen{method: "POST", path: "/api/v1/tenants", body: map[string]any{"name": "acme", "plan_id": 3.0}}, &acme},
		{"issue key", func(ctx context.Context, a *client.AdminClient) (any, error) {
			return a.IssueKey(ctx, acme.ID, client.KeyInput{Name: "prod", Metadata: map[string]string{"team": "search"},
				ExpiresAt: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)})
		}, 201, `{"key":` + keyJSON + `,"secret":"tg_4fT9aQ2x00000000000000000000000000xy"}`,
			seen{method: "POST", path: "/api/v1/tenants/" + acme.ID + "/keys",
				body: map[string]any{"name": "prod", "metadata": map[string]any{"team": "search"}, "expires_at": "2027-01-01T00:00:00Z"}},
			&client.KeySecret{Key: prod, Secret: "tg_4fT9aQ2x00000000000000000000000000xy"}},
		{"issue key, no fields", func(ctx context.Context, a *client.AdminClient) (any, error) {
			k, err := a.IssueKey(ctx, acme.ID, client.KeyInput{})
			if err != nil {
				return nil, err
			}
			return k.Secret, nil
		}, 201, `{"key":` + keyJSON + `,"secret":"s"}`,
			seen{method: "POST", path: "/api/v1/tenants/" + acme.ID + "/keys", body: map[string]any{}}, "s"},
		{"list keys", func(ctx context.Context, a *client.AdminClient) (any, error) {
			return a.ListKeys(ctx, acme.ID, client.ListOptions{})
		}, 200, `{"items":[` + keyJSON + `],"next_cursor":null}`,
			seen{method: "GET", path: "/api/v1/tenants/" + acme.ID + "/keys"}, &client.Page[client.Key]{Items: []client.Key{prod}}},
		{"revoke key", func(ctx context.Context, a *client.AdminClient) (any, error) {
			return a.RevokeKey(ctx, acme.ID, prod.ID)
		}, 200, keyJSON, seen{method: "POST", path: "/api/v1/tenants/" + acme.ID + "/keys/" + prod.ID + "/revoke"}, &prod},
		{"path segments are escaped", func(ctx context.Context, a *client.AdminClient) (any, error) {
			return a.RevokeKey(ctx, "a/b", "c?d")
		}, 200, keyJSON, seen{method: "POST", path: "/api/v1/tenants/a%2Fb/keys/c%3Fd/revoke"}, &prod},
		{"grant credits", func(ctx context.Context, a *client.AdminClient) (any, error) {
			return a.GrantCredits(ctx, acme.ID, client.CreditGrantInput{Amount: 500, ExpiresAt: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
				Priority: 2, Cause: "March pack", IdempotencyKey: "order-4711"})
		}, 201, grantJSON,
			seen{method: "POST", path: "/api/v1/tenants/" + acme.ID + "/credits/grants", key: "order-4711",
				body: map[string]any{"amount": 500.0, "expires_at": "2027-01-01T00:00:00Z", "priority": 2.0, "cause": "March pack"}},
			&marchPack},
		{"grant credits without a key", func(ctx context.Context, a *client.AdminClient) (any, error) {
			return a.GrantCredits(ctx, acme.ID, client.CreditGrantInput{Amount: 500, Cause: "March pack"})
		}, 201, grantJSON,
			seen{method: "POST", path: "/api/v1/tenants/" + acme.ID + "/credits/grants", body: map[string]any{"amount": 500.0, "cause": "March pack"}},
			&marchPack},
		{"adjust credits", func(ctx context.Context, a *client.AdminClient) (any, error) {
			return a.AdjustCredits(ctx, acme.ID, client.CreditAdjustInput{Units: -30, Cause: "correction", IdempotencyKey: "fix-1"})
		}, 200, `{"tenant_id":"` + acme.ID + `","units":-30,"cause":"correction","balance":470}`,
			seen{method: "POST", path: "/api/v1/tenants/" + acme.ID + "/credits/adjustments", key: "fix-1",
				body: map[string]any{"units": -30.0, "cause": "correction"}},
			&client.CreditAdjustment{TenantID: acme.ID, Units: -30, Cause: "correction", Balance: 470}},
		{"usage totals", func(ctx context.Context, a *client.AdminClient) (any, error) {
			return a.UsageTotals(ctx, oct1, oct1.Add(time.Hour))
		}, 200, `{"from":"2026-10-01T12:00:00Z","to":"2026-10-01T13:00:00Z","totals":{"allowed":5,"denied":1,"allowed_units":7,"denied_units":1,
			"by_tenant":[{"tenant_id":"t","tenant_name":"acme","allowed":5,"denied":1,"allowed_units":7,"denied_units":1}],
			"by_tier":{"authenticated":{"allowed":5,"denied":1,"allowed_units":7,"denied_units":1}}}}`,
			seen{method: "GET", path: "/api/v1/usage/totals", query: "from=2026-10-01T12%3A00%3A00Z&to=2026-10-01T13%3A00%3A00Z"},
			&client.UsageTotals{From: oct1, To: oct1.Add(time.Hour), Totals: client.Totals{
				Counts:   client.Counts{Allowed: 5, Denied: 1, AllowedUnits: 7, DeniedUnits: 1},
				ByTenant: []client.TenantTotal{{TenantID: "t", TenantName: "acme", Counts: client.Counts{Allowed: 5, Denied: 1, AllowedUnits: 7, DeniedUnits: 1}}},
				ByTier:   map[string]client.Counts{"authenticated": {Allowed: 5, Denied: 1, AllowedUnits: 7, DeniedUnits: 1}},
			}}},
		{"usage totals, default range", func(ctx context.Context, a *client.AdminClient) (any, error) {
			u, err := a.UsageTotals(ctx, time.Time{}, time.Time{})
			if err != nil {
				return nil, err
			}
			return u.Totals.Allowed, nil
		}, 200, `{"from":"2026-10-01T12:00:00Z","to":"2026-10-01T13:00:00Z","totals":{"allowed":0,"denied":0,"allowed_units":0,"denied_units":0,"by_tenant":[],"by_tier":{}}}`,
			seen{method: "GET", path: "/api/v1/usage/totals"}, int64(0)},
		{"statement", func(ctx context.Context, a *client.AdminClient) (any, error) {
			s, err := a.GetStatement(ctx, acme.ID, "2026-10")
			if err != nil {
				return nil, err
			}
			return []any{s.Status, s.Currency, s.TotalMinor, s.Usage.AllowedUnits, s.UsageByKeyAndResource[0].Resource,
				s.PlanPeriods[0].Plan, s.PlanPeriods[0].Overage[0].AmountMinor, s.PeriodEnd.Month(),
				s.Usage.ExpiredHolds, s.UsageByKeyAndResource[0].ExpiredHoldUnits}, nil
		}, 200, `{"tenant_id":"` + acme.ID + `","tenant_name":"acme","month":"2026-10","period_start":"2026-10-01T00:00:00Z",
			"period_end":"2026-11-01T00:00:00Z","currency":"USD","status":"open",
			"usage":{"allowed":3,"denied":0,"allowed_units":3,"denied_units":0,"expired_holds":1},
			"usage_by_key_and_resource":[{"key_id":"k","key_prefix":"tg_4fT9aQ2x","resource":"GET /repos","allowed":3,"denied":0,"allowed_units":3,"denied_units":0,
			  "expired_holds":1,"expired_hold_units":2}],
			"plan_periods":[{"plan":"pro","plan_id":3,"from":"2026-10-01T00:00:00Z","to":"2026-11-01T00:00:00Z","span_us":1,"month_us":1,
			  "plan_base_fee_minor":4900,"base_fee_minor":4900,"plan_included_units":0,"included_units":0,"used_units":3,"overage_units":3,
			  "overage":[{"from_unit":1,"to_unit":3,"units":3,"unit_minor":1,"amount_minor":3}],"overage_minor":3,"total_minor":4903}],
			"base_fee_minor":4900,"overage_minor":3,"total_minor":4903,"rules":"…"}`,
			seen{method: "GET", path: "/api/v1/statements/" + acme.ID + "/2026-10", query: "format=json"},
			[]any{"open", "USD", int64(4903), int64(3), "GET /repos", "pro", int64(3), time.November, int64(1), int64(2)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, got := adminServer(t, c.status, c.answer)
			a, err := client.NewAdmin(srv.URL, client.AdminOptions{Token: "session"})
			if err != nil {
				t.Fatal(err)
			}
			v, err := c.call(context.Background(), a)
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			c.wantReq.auth = "Bearer session"
			if c.wantReq.body == nil {
				c.wantReq.body = got.body // no body expected: compared below
				if got.body != nil {
					t.Errorf("sent a body %v, want none", got.body)
				}
			}
			if !reflect.DeepEqual(*got, c.wantReq) {
				t.Errorf("request = %+v\nwant      %+v", *got, c.wantReq)
			}
			if !reflect.DeepEqual(v, c.wantValue) {
				t.Errorf("value = %+v\nwant    %+v", v, c.wantValue)
			}
		})
	}
}

func TestAdminLogin(t *testing.T) {
	srv := httptest.NewServer(fakeAdmin())
	defer srv.Close()
	a, err := client.NewAdmin(srv.URL, client.AdminOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := a.ListTenants(ctx, client.TenantQuery{}); !isProblem(err, 401) {
		t.Errorf("before login: %v, want a 401 problem", err)
	}
	if _, err := a.Login(ctx, "ops@example.com", "wrong"); !isProblem(err, 401) || a.Token() != "" {
		t.Errorf("wrong password: %v (token %q), want a 401 problem and no token", err, a.Token())
	}
	s, err := a.Login(ctx, "ops@example.com", "correct horse")
	if err != nil {
		t.Fatalf("Login: %v", err)
	}
	if s.User.Role != "operator" || s.TokenType != "Bearer" || a.Token() != s.Token || !s.ExpiresAt.Equal(oct1) {
		t.Errorf("Login = %+v (client token %q)", s, a.Token())
	}
	if _, err := a.ListTenants(ctx, client.TenantQuery{}); err != nil {
		t.Errorf("after login: %v", err)
	}
}

func TestAdminProblems(t *testing.T) {
	cases := []struct {
		name    string
		status  int
		header  map[string]string
		body    string
		wantMsg string
		want    client.ProblemError
	}{
		{"not found", 404, nil, `{"type":"about:blank","title":"Not Found","status":404,"detail":"no such tenant","code":"not_found"}`,
			"tollgate: list keys of tenant x: 404 not_found: no such tenant",
			client.ProblemError{Status: 404, Type: "about:blank", Title: "Not Found", Detail: "no such tenant", Code: "not_found"}},
		{"login limited", 429, map[string]string{"Retry-After": "12"},
			`{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"too many login attempts","code":"rate_limited"}`,
			"tollgate: list keys of tenant x: 429 rate_limited: too many login attempts",
			client.ProblemError{Status: 429, Type: "about:blank", Title: "Too Many Requests", Detail: "too many login attempts", Code: "rate_limited", RetryAfter: 12 * time.Second}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range c.header {
					w.Header().Set(k, v)
				}
				writeTestProblemRaw(w, c.status, c.body)
			}))
			defer srv.Close()
			a, _ := client.NewAdmin(srv.URL, client.AdminOptions{Token: "t"})
			_, err := a.ListKeys(context.Background(), "x", client.ListOptions{})
			var p *client.ProblemError
			if !errors.As(err, &p) || !reflect.DeepEqual(*p, c.want) {
				t.Fatalf("error = %#v, want %+v", err, c.want)
			}
			if err.Error() != c.wantMsg {
				t.Errorf("message = %q, want %q", err.Error(), c.wantMsg)
			}
		})
	}
}

func writeTestProblemRaw(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

func isProblem(err error, status int) bool {
	var p *client.ProblemError
	return errors.As(err, &p) && p.Status == status
}

func TestNewAdminRefusesBadURL(t *testing.T) {
	if _, err := client.NewAdmin("localhost:8081", client.AdminOptions{}); err == nil || !strings.Contains(err.Error(), "base URL") {
		t.Errorf("NewAdmin error = %v, want one about the base URL", err)
	}
}
