package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// operatorSetup starts a server with one operator and returns its token.
func operatorSetup(t *testing.T, settings map[string]string) (*adminServer, string) {
	t.Helper()
	srv := startAdmin(t, testenv.DatabaseURL(t), settings)
	u := createUser(t, srv.DB, "ops@example.com", auth.RoleOperator, "")
	return srv, sessionFor(t, srv.DB, u)
}

// acmeSetup is operatorSetup with a tenant "acme" on a plan "free" and a
// session of acme's tenant admin.
func acmeSetup(t *testing.T) (srv *adminServer, op string, acme tenants.Tenant, admin string) {
	t.Helper()
	return acmeSetupWith(t, nil)
}

func problemOf(t *testing.T, res response) httpx.Problem {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json (%s)", ct, res.Body)
	}
	var p httpx.Problem
	res.Decode(t, &p)
	return p
}

// wantFields fails unless res is a 422 naming every field.
func wantFields(t *testing.T, res response, fields ...string) {
	t.Helper()
	want(t, res, http.StatusUnprocessableEntity)
	p := problemOf(t, res)
	for _, f := range fields {
		if p.Errors[f] == "" {
			t.Errorf("problem %v does not name %s", p.Errors, f)
		}
	}
}

func TestLoginCookieAndLogout(t *testing.T) {
	srv := startAdmin(t, testenv.DatabaseURL(t), nil)
	u := createUser(t, srv.DB, "ops@example.com", auth.RoleOperator, "")
	login := func(password string, header http.Header) response {
		raw, _ := json.Marshal(map[string]string{"email": "OPS@example.com", "password": password})
		req, _ := http.NewRequest("POST", srv.URL+"/api/v1/login", strings.NewReader(string(raw)))
		for k, v := range header {
			req.Header[k] = v
		}
		return send(t, req)
	}
	res := login("wrong password!", nil)
	want(t, res, http.StatusUnauthorized)
	if p := problemOf(t, res); p.Code != "unauthorized" {
		t.Errorf("code = %q", p.Code)
	}

	res = login("password-ops@example.com", nil)
	want(t, res, http.StatusOK)
	var lr adminapi.LoginResponse
	res.Decode(t, &lr)
	if lr.Token == "" || lr.TokenType != "Bearer" || lr.User.ID != u.ID || lr.User.Role != auth.RoleOperator {
		t.Fatalf("login response = %+v", lr)
	}
	cookies := res.Cookies()
	if len(cookies) != 1 || cookies[0].Name != adminapi.SessionCookie || cookies[0].Value != lr.Token ||
		!cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteLaxMode || cookies[0].Secure {
		t.Fatalf("cookie = %+v; want HttpOnly, SameSite=Lax, not Secure over plain HTTP", cookies)
	}
	if raw := string(res.Body); strings.Contains(raw, "password") {
		t.Errorf("login response mentions the password: %s", raw)
	}
	behindTLS := login("password-ops@example.com", http.Header{"X-Forwarded-Proto": {"https"}})
	if c := behindTLS.Cookies(); len(c) != 1 || !c[0].Secure || c[0].Name != adminapi.SessionCookie {
		t.Errorf("cookie behind a TLS proxy = %+v, want Secure; __Host- only when the proxy is trusted", c)
	}

	// The cookie alone authenticates the browser.
	me, _ := http.NewRequest("GET", srv.URL+"/api/v1/me", nil)
	me.AddCookie(cookies[0])
	res = send(t, me)
	want(t, res, http.StatusOK)
	var mr adminapi.MeResponse
	res.Decode(t, &mr)
	if mr.User.Email != "ops@example.com" {
		t.Errorf("me = %+v", mr)
	}

	// A cookie-authenticated change from another site is refused.
	evil, _ := http.NewRequest("POST", srv.URL+"/api/v1/plans", strings.NewReader(`{"name":"x"}`))
	evil.AddCookie(cookies[0])
	evil.Header.Set("Origin", "https://evil.example")
	evil.Header.Set("Sec-Fetch-Site", "cross-site")
	want(t, send(t, evil), http.StatusForbidden)

	// Logout ends the session: the token stops working, the cookie goes.
	out, _ := http.NewRequest("POST", srv.URL+"/api/v1/logout", nil)
	out.AddCookie(cookies[0])
	res = send(t, out)
	want(t, res, http.StatusNoContent)
	wantCleared(t, res, adminapi.SessionCookie, adminapi.SecureSessionCookie)
	res = call(t, "GET", srv.URL+"/api/v1/me", lr.Token, nil)
	want(t, res, http.StatusUnauthorized)
	if res.Header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	// The other session is untouched.
	var other adminapi.LoginResponse
	behindTLS.Decode(t, &other)
	want(t, call(t, "GET", srv.URL+"/api/v1/me", other.Token, nil), http.StatusOK)
}

// wantCleared fails unless res clears exactly the cookies called names.
func wantCleared(t *testing.T, res response, names ...string) {
	t.Helper()
	cleared := map[string]bool{}
	for _, c := range res.Cookies() {
		if c.MaxAge >= 0 || c.Value != "" || c.Path != "/" {
			t.Errorf("logout cookie = %+v, want it cleared", c)
		}
		cleared[c.Name] = true
	}
	for _, name := range names {
		if !cleared[name] {
			t.Errorf("logout cleared %v, not %s", res.Cookies(), name)
		}
	}
	if len(cleared) != len(names) {
		t.Errorf("logout cookies = %v, want %v cleared", res.Cookies(), names)
	}
}

// TestHostPrefixedSessionCookie: over HTTPS (here a trusted proxy's
// X-Forwarded-Proto) the session cookie is __Host-tollgate_session,
// Secure, Path=/ and without Domain; a client that is not a trusted proxy
// cannot ask for it, plain HTTP keeps tollgate_session, both names are
// read, and signing out clears both.
func TestHostPrefixedSessionCookie(t *testing.T) {
	srv := startAdmin(t, testenv.DatabaseURL(t), map[string]string{"TOLLGATE_TRUSTED_PROXIES": "127.0.0.1/32"})
	createUser(t, srv.DB, "ops@example.com", auth.RoleOperator, "")
	login := func(header http.Header) *http.Cookie {
		t.Helper()
		raw, _ := json.Marshal(map[string]string{"email": "ops@example.com", "password": "password-ops@example.com"})
		req, _ := http.NewRequest("POST", srv.URL+"/api/v1/login", strings.NewReader(string(raw)))
		req.Header = header
		res := send(t, req)
		want(t, res, http.StatusOK)
		if c := res.Cookies(); len(c) == 1 {
			return c[0]
		}
		t.Fatalf("login cookies = %v, want one", res.Cookies())
		return nil
	}
	secure := login(http.Header{"X-Forwarded-Proto": {"https"}})
	if secure.Name != "__Host-tollgate_session" || !secure.Secure || secure.Path != "/" || secure.Domain != "" ||
		!secure.HttpOnly || secure.SameSite != http.SameSiteLaxMode {
		t.Errorf("cookie over HTTPS = %+v, want __Host-tollgate_session, Secure, Path=/, no Domain", secure)
	}
	plain := login(http.Header{})
	if plain.Name != adminapi.SessionCookie || plain.Secure {
		t.Errorf("cookie over plain HTTP = %+v, want tollgate_session, not Secure", plain)
	}

	for _, c := range []*http.Cookie{secure, plain} {
		me, _ := http.NewRequest("GET", srv.URL+"/api/v1/me", nil)
		me.AddCookie(c)
		want(t, send(t, me), http.StatusOK)
		out, _ := http.NewRequest("POST", srv.URL+"/api/v1/logout", nil)
		out.AddCookie(c)
		res := send(t, out)
		want(t, res, http.StatusNoContent)
		wantCleared(t, res, adminapi.SessionCookie, adminapi.SecureSessionCookie)
		for _, k := range res.Cookies() {
			if k.Name == adminapi.SecureSessionCookie && !k.Secure {
				t.Errorf("clearing %+v without Secure: browsers ignore it", k)
			}
		}
		me, _ = http.NewRequest("GET", srv.URL+"/api/v1/me", nil)
		me.AddCookie(c)
		want(t, send(t, me), http.StatusUnauthorized)
	}
}

// TestPlantedPlainCookieIsIgnoredOverHTTPS: over HTTPS only the __Host-
// cookie carries a session. The plain cookie, which a sibling subdomain
// or a plain-HTTP page can set, would otherwise sign a victim in as
// whoever planted it.
func TestPlantedPlainCookieIsIgnoredOverHTTPS(t *testing.T) {
	srv := startAdmin(t, testenv.DatabaseURL(t), map[string]string{"TOLLGATE_TRUSTED_PROXIES": "127.0.0.1/32"})
	u := createUser(t, srv.DB, "ops@example.com", auth.RoleOperator, "")
	planted := &http.Cookie{Name: adminapi.SessionCookie, Value: sessionFor(t, srv.DB, u)}
	me := func(header http.Header) response {
		req, _ := http.NewRequest("GET", srv.URL+"/api/v1/me", nil)
		req.Header = header
		req.AddCookie(planted)
		return send(t, req)
	}
	want(t, me(http.Header{}), http.StatusOK)
	want(t, me(http.Header{"X-Forwarded-Proto": {"https"}}), http.StatusUnauthorized)
}

// TestPlanQuotaModeAPI: a plan's monthly quota mode is taken on create
// and on update, and validated.
func TestPlanQuotaModeAPI(t *testing.T) {
	srv, op := operatorSetup(t, nil)
	base := srv.URL + "/api/v1/plans"
	// The monthly quota mode is taken on create and on update.
	quota := map[string]any{"name": "metered", "included_units": 1000, "quota_mode": "hard",
		"rules": []map[string]any{{"name": "hourly", "limit": 100, "period_us": limiter.HourUS}}}
	res := call(t, "POST", base, op, quota)
	want(t, res, http.StatusCreated)
	var metered plans.Plan
	res.Decode(t, &metered)
	if metered.QuotaMode != plans.QuotaHard {
		t.Errorf("created quota_mode = %q, want hard", metered.QuotaMode)
	}
	quota["quota_mode"] = "overage"
	res = call(t, "PUT", fmt.Sprintf("%s/%d", base, metered.ID), op, quota)
	want(t, res, http.StatusOK)
	res.Decode(t, &metered)
	if metered.QuotaMode != plans.QuotaOverage {
		t.Errorf("updated quota_mode = %q, want overage", metered.QuotaMode)
	}
	quota["included_units"] = 0
	wantFields(t, call(t, "PUT", fmt.Sprintf("%s/%d", base, metered.ID), op, quota), "included_units")

}

func TestPlansAPI(t *testing.T) {
	srv, op := operatorSetup(t, nil)
	base := srv.URL + "/api/v1/plans"

	res := call(t, "POST", base, op, map[string]any{
		"name": "Bad Name", "base_fee_minor": -1,
		"tiers": []map[string]any{{"up_to": 10, "unit_minor": -5}},
		"rules": []map[string]any{
			{"name": "a", "algorithm": "magic", "limit": 1, "period_us": 1},
			{"name": "b", "limit": 1, "period_us": 0},
			{"name": "c", "limit": 1, "period_us": 1, "burst": -1},
			{"name": "d", "limit": 1, "period_us": 1, "resource": "get /x"},
		},
	})
	wantFields(t, res, "name", "base_fee_minor", "tiers[0].unit_minor", "rules[0].algorithm",
		"rules[1].period_us", "rules[2].burst", "rules[3].resource")
	res = call(t, "POST", base, op, map[string]any{"name": "routed",
		"routes": []string{"GET /repos/{owner}/{repo}", "GET /a/", "* /v1/*/x", "GET /repos/{owner}/{repo}"}})
	wantFields(t, res, "routes[1]", "routes[2]", "routes[3]")
	if p := problemOf(t, res); p.Errors["routes[0]"] != "" {
		t.Errorf("a valid route refused: %v", p.Errors)
	}
	res = call(t, "POST", base, op, map[string]any{"name": "x", "base_fee_minor": 1.5})
	want(t, res, http.StatusBadRequest)
	if p := problemOf(t, res); p.Errors["base_fee_minor"] == "" {
		t.Errorf("a fractional amount: %v, want base_fee_minor named", p.Errors)
	}
	res = call(t, "POST", base, op, map[string]any{"name": "x", "surprise": true})
	want(t, res, http.StatusBadRequest)

	plan := map[string]any{"name": "gold", "display_name": "Gold", "base_fee_minor": 9900,
		"rules": []map[string]any{{"name": "hourly", "limit": 100, "period_us": limiter.HourUS}}}
	res = call(t, "POST", base, op, plan)
	want(t, res, http.StatusCreated)
	var gold plans.Plan
	res.Decode(t, &gold)
	if gold.Rules[0].Burst != 100 || res.Header.Get("Location") != fmt.Sprintf("/api/v1/plans/%d", gold.ID) {
		t.Errorf("created %+v at %s", gold, res.Header.Get("Location"))
	}
	want(t, call(t, "POST", base, op, plan), http.StatusConflict)

	plan["rules"] = []map[string]any{{"name": "hourly", "limit": 200, "period_us": limiter.HourUS}}
	res = call(t, "PUT", fmt.Sprintf("%s/%d", base, gold.ID), op, plan)
	want(t, res, http.StatusOK)
	res.Decode(t, &gold)
	if gold.Rules[0].Limit != 200 {
		t.Errorf("updated limit = %d", gold.Rules[0].Limit)
	}
	if gold.Routes == nil || len(gold.Routes) != 0 {
		t.Errorf("a plan without routes: routes %#v, want []", gold.Routes)
	}
	plan["routes"] = []string{"GET /repos/{owner}/{repo}", "POST /v1/search", "GET /static/*", "* /v1/admin/*"}
	res = call(t, "PUT", fmt.Sprintf("%s/%d", base, gold.ID), op, plan)
	want(t, res, http.StatusOK)
	res = call(t, "GET", fmt.Sprintf("%s/%d", base, gold.ID), op, nil)
	want(t, res, http.StatusOK)
	res.Decode(t, &gold)
	if fmt.Sprint(gold.Routes) != fmt.Sprint(plan["routes"]) {
		t.Errorf("routes read back %v, want %v in the order declared", gold.Routes, plan["routes"])
	}
	want(t, call(t, "GET", base+"/999999", op, nil), http.StatusNotFound)
	want(t, call(t, "GET", base+"/not-a-number", op, nil), http.StatusNotFound)

	// In use: 409 on delete; archive instead; archived plans are not assignable.
	res = call(t, "POST", srv.URL+"/api/v1/tenants", op, map[string]any{"name": "acme", "plan_id": gold.ID})
	want(t, res, http.StatusCreated)
	var acme tenants.Tenant
	res.Decode(t, &acme)
	res = call(t, "DELETE", fmt.Sprintf("%s/%d", base, gold.ID), op, nil)
	want(t, res, http.StatusConflict)
	if p := problemOf(t, res); !strings.Contains(p.Detail, "archive") {
		t.Errorf("409 detail = %q, want advice to archive", p.Detail)
	}
	res = call(t, "POST", fmt.Sprintf("%s/%d/archive", base, gold.ID), op, nil)
	want(t, res, http.StatusOK)
	res.Decode(t, &gold)
	if gold.ArchivedAt == nil {
		t.Fatal("archive did not set archived_at")
	}
	wantFields(t, call(t, "POST", srv.URL+"/api/v1/tenants", op, map[string]any{"name": "late", "plan_id": gold.ID}), "plan_id")
	silver := call(t, "POST", base, op, map[string]any{"name": "silver"})
	want(t, silver, http.StatusCreated)
	var sp plans.Plan
	silver.Decode(t, &sp)
	want(t, call(t, "POST", srv.URL+"/api/v1/tenants/"+acme.ID+"/plan", op, map[string]any{"plan_id": sp.ID}), http.StatusOK)
	wantFields(t, call(t, "POST", srv.URL+"/api/v1/tenants/"+acme.ID+"/plan", op, map[string]any{"plan_id": gold.ID}), "plan_id")

	// Listing pages through every plan; archived=false hides gold.
	res = call(t, "GET", base+"?limit=1", op, nil)
	want(t, res, http.StatusOK)
	var pg struct {
		Items      []plans.Plan `json:"items"`
		NextCursor *string      `json:"next_cursor"`
	}
	res.Decode(t, &pg)
	if len(pg.Items) != 1 || pg.Items[0].Name != "gold" || pg.NextCursor == nil {
		t.Fatalf("page 1 = %+v", pg)
	}
	res = call(t, "GET", base+"?limit=1&cursor="+url.QueryEscape(*pg.NextCursor), op, nil)
	res.Decode(t, &pg)
	if len(pg.Items) != 1 || pg.Items[0].Name != "silver" || pg.NextCursor != nil {
		t.Fatalf("page 2 = %+v", pg)
	}
	res = call(t, "GET", base+"?archived=false", op, nil)
	res.Decode(t, &pg)
	if len(pg.Items) != 1 || pg.Items[0].Name != "silver" {
		t.Errorf("archived=false lists %+v", pg.Items)
	}
	wantFields(t, call(t, "GET", base+"?limit=0", op, nil), "limit")
	wantFields(t, call(t, "GET", base+"?cursor=garbage", op, nil), "cursor")
	wantFields(t, call(t, "GET", base+"?archived=maybe", op, nil), "archived")
}

func TestTenantsAPI(t *testing.T) {
	srv, op := operatorSetup(t, nil)
	ctx := context.Background()
	free, err := plans.NewStore(srv.DB).Create(ctx, plans.Plan{Name: "free", Rules: []plans.Rule{{Name: "hourly", Limit: 100, PeriodUS: limiter.HourUS}}})
	testenv.Must(t, err)
	pro, err := plans.NewStore(srv.DB).Create(ctx, plans.Plan{Name: "pro"})
	testenv.Must(t, err)
	base := srv.URL + "/api/v1/tenants"

	wantFields(t, call(t, "POST", base, op, map[string]any{"name": " "}), "name", "plan_id")
	wantFields(t, call(t, "POST", base, op, map[string]any{"name": "x", "plan_id": 999999}), "plan_id")
	var acme tenants.Tenant
	res := call(t, "POST", base, op, map[string]any{"name": "Acme Corp", "plan_id": free.ID})
	want(t, res, http.StatusCreated)
	res.Decode(t, &acme)
	want(t, call(t, "POST", base, op, map[string]any{"name": "Acme Corp", "plan_id": free.ID}), http.StatusConflict)
	want(t, call(t, "POST", base, op, map[string]any{"name": "Globex", "plan_id": free.ID}), http.StatusCreated)

	var list struct {
		Items []tenants.Tenant `json:"items"`
	}
	call(t, "GET", base+"?q=ACME", op, nil).Decode(t, &list)
	if len(list.Items) != 1 || list.Items[0].ID != acme.ID {
		t.Errorf("?q=ACME = %+v", list.Items)
	}
	call(t, "GET", base+"?q="+acme.ID, op, nil).Decode(t, &list)
	if len(list.Items) != 1 || list.Items[0].ID != acme.ID {
		t.Errorf("?q=<id> = %+v", list.Items)
	}
	wantFields(t, call(t, "GET", base+"?status=gone", op, nil), "status")

	// Plan changes: recorded with their effective time, kept as history.
	tenantURL := base + "/" + acme.ID
	wantFields(t, call(t, "POST", tenantURL+"/plan", op, map[string]any{"plan_id": pro.ID, "effective_at": time.Now().Add(time.Hour)}), "effective_at")
	wantFields(t, call(t, "POST", tenantURL+"/plan", op, map[string]any{"plan_id": pro.ID, "effective_at": acme.CreatedAt.Add(-time.Hour)}), "effective_at")
	past := acme.CreatedAt.Add(time.Millisecond) // backdated, but not before the tenant's latest change
	res = call(t, "POST", tenantURL+"/plan", op, map[string]any{"plan_id": pro.ID, "effective_at": past})
	want(t, res, http.StatusOK)
	var moved tenants.Tenant
	res.Decode(t, &moved)
	if moved.PlanID != pro.ID {
		t.Errorf("plan_id = %d, want %d", moved.PlanID, pro.ID)
	}
	var history struct {
		Items []tenants.PlanChange `json:"items"`
	}
	call(t, "GET", tenantURL+"/plan-changes", op, nil).Decode(t, &history)
	if len(history.Items) != 2 || history.Items[0].PlanName != "pro" || !history.Items[0].EffectiveAt.Equal(past) ||
		history.Items[1].PlanName != "free" {
		t.Errorf("history = %+v", history.Items)
	}

	// Suspend and resume.
	res = call(t, "POST", tenantURL+"/suspend", op, nil)
	want(t, res, http.StatusOK)
	res.Decode(t, &moved)
	if moved.Status != tenants.StatusSuspended {
		t.Errorf("status = %s", moved.Status)
	}
	call(t, "POST", tenantURL+"/resume", op, nil).Decode(t, &moved)
	if moved.Status != tenants.StatusActive {
		t.Errorf("status = %s", moved.Status)
	}

	// Overrides: validated per field; replaced as a whole; readable back.
	wantFields(t, call(t, "PUT", tenantURL+"/overrides", op, map[string]any{"rules": []map[string]any{{"name": "hourly", "algorithm": "nope", "limit": 1, "period_us": 1}}}), "rules[0].algorithm")
	wantFields(t, call(t, "PUT", tenantURL+"/overrides", op, map[string]any{}), "rules")
	res = call(t, "PUT", tenantURL+"/overrides", op, map[string]any{"rules": []map[string]any{{"name": "hourly", "limit": 7, "period_us": limiter.HourUS}}})
	want(t, res, http.StatusOK)
	var ov struct {
		Rules []plans.Rule `json:"rules"`
	}
	call(t, "GET", tenantURL+"/overrides", op, nil).Decode(t, &ov)
	if len(ov.Rules) != 1 || ov.Rules[0].Limit != 7 || ov.Rules[0].Burst != 7 {
		t.Errorf("overrides = %+v", ov.Rules)
	}
	want(t, call(t, "GET", base+"/00000000-0000-0000-0000-000000000000", op, nil), http.StatusNotFound)

	// No plan change in a month closed for billing: its statements are
	// frozen. (Closing this very month cannot happen, but makes the point.)
	thisMonth := time.Now().UTC().Format("2006-01") + "-01"
	_, err = srv.DB.Exec(ctx, `INSERT INTO usage_closed_months (month, statements) VALUES ($1, 0)`, thisMonth)
	testenv.Must(t, err)
	res = call(t, "POST", tenantURL+"/plan", op, map[string]any{"plan_id": free.ID})
	want(t, res, http.StatusConflict)
	if p := problemOf(t, res); p.Errors["effective_at"] == "" {
		t.Errorf("409 problem %+v does not name effective_at", p)
	}
}

func TestKeysAPI(t *testing.T) {
	srv, op, acme, tok := acmeSetup(t) // a tenant admin manages its own keys
	keys := srv.URL + "/api/v1/tenants/" + acme.ID + "/keys"

	wantFields(t, call(t, "POST", keys, tok, map[string]any{"expires_at": time.Now().Add(-time.Hour)}), "expires_at")
	wantFields(t, call(t, "POST", keys, tok, map[string]any{"name": strings.Repeat("n", 201)}), "name")
	res := call(t, "POST", keys, tok, map[string]any{"name": "ci", "metadata": map[string]string{"team": "build"}})
	want(t, res, http.StatusCreated)
	var made adminapi.KeySecretResponse
	res.Decode(t, &made)
	if !tenants.WellFormed(made.Secret) || made.Key.Prefix != tenants.DisplayPrefix(made.Secret) || made.Key.Metadata["team"] != "build" {
		t.Fatalf("issued %+v", made)
	}

	// Listed and read with the display prefix only: never the secret or its hash.
	for _, path := range []string{keys, keys + "/" + made.Key.ID} {
		res := call(t, "GET", path, tok, nil)
		want(t, res, http.StatusOK)
		body := string(res.Body)
		if strings.Contains(body, made.Secret) || strings.Contains(body, `"secret"`) || strings.Contains(body, `"hash"`) {
			t.Errorf("GET %s shows the secret or the hash: %s", path, body)
		}
		if !strings.Contains(body, made.Key.Prefix) {
			t.Errorf("GET %s lacks the display prefix: %s", path, body)
		}
	}

	keyURL := keys + "/" + made.Key.ID
	exp := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Second)
	var k tenants.Key
	call(t, "PATCH", keyURL, tok, map[string]any{"expires_at": exp, "name": "deploy"}).Decode(t, &k)
	if k.ExpiresAt == nil || !k.ExpiresAt.Equal(exp) || k.Name != "deploy" || k.Metadata["team"] != "build" {
		t.Errorf("patched %+v", k)
	}
	// A tenant admin may not clear an expiry (see TestKeyExpiryRules); an
	// operator may.
	res = call(t, "PATCH", keyURL, tok, map[string]any{"expires_at": nil})
	want(t, res, http.StatusForbidden)
	problemOf(t, res)
	k = tenants.Key{}
	call(t, "PATCH", keyURL, op, map[string]any{"expires_at": nil}).Decode(t, &k)
	if k.ExpiresAt != nil || k.Name != "deploy" {
		t.Errorf("clearing the expiry: %+v", k)
	}
	wantFields(t, call(t, "PATCH", keyURL, tok, map[string]any{}), "body")

	// Rotation: a new secret; the old key works for the grace period.
	wantFields(t, call(t, "POST", keyURL+"/rotate", tok, map[string]any{"grace_period_s": -1}), "grace_period_s")
	// 18446744074 s overflows time.Duration and would wrap to 0.29 s.
	wantFields(t, call(t, "POST", keyURL+"/rotate", tok, map[string]any{"grace_period_s": int64(18446744074)}), "grace_period_s")
	before := time.Now()
	res = call(t, "POST", keyURL+"/rotate", tok, map[string]any{"grace_period_s": 3600})
	want(t, res, http.StatusCreated)
	var rotated adminapi.KeySecretResponse
	res.Decode(t, &rotated)
	if rotated.Secret == made.Secret || rotated.Key.ID == made.Key.ID || rotated.Key.Name != "deploy" || rotated.Previous == nil {
		t.Fatalf("rotated %+v", rotated)
	}
	if e := rotated.Previous.ExpiresAt; e == nil || e.Before(before.Add(time.Hour-time.Second)) || e.After(time.Now().Add(time.Hour)) {
		t.Errorf("old key expires %v, want now+1h", e)
	}
	// A key is rotated once: a second rotation would be one more live key.
	res = call(t, "POST", keyURL+"/rotate", tok, map[string]any{"grace_period_s": 3600})
	want(t, res, http.StatusConflict)
	if p := problemOf(t, res); !strings.Contains(p.Detail, "rotated") {
		t.Errorf("409 detail = %q, want it to say the key was rotated", p.Detail)
	}
	// Without a body: the default grace of a day.
	res = call(t, "POST", keys+"/"+rotated.Key.ID+"/rotate", tok, nil)
	want(t, res, http.StatusCreated)
	var again adminapi.KeySecretResponse
	res.Decode(t, &again)
	if e := again.Previous.ExpiresAt; e == nil || e.Before(before.Add(tenants.DefaultRotationGrace-time.Minute)) {
		t.Errorf("default grace: old key expires %v", e)
	}

	res = call(t, "POST", keyURL+"/revoke", tok, nil)
	want(t, res, http.StatusOK)
	res.Decode(t, &k)
	if k.RevokedAt == nil {
		t.Error("revoked_at not set")
	}
	want(t, call(t, "POST", keyURL+"/rotate", tok, nil), http.StatusConflict)
	want(t, call(t, "GET", keys+"/00000000-0000-0000-0000-000000000000", tok, nil), http.StatusNotFound)
	var all struct {
		Items []tenants.Key `json:"items"`
	}
	call(t, "GET", keys, op, nil).Decode(t, &all) // operators see every tenant's keys
	if len(all.Items) != 3 {
		t.Errorf("operator lists %d keys, want 3", len(all.Items))
	}
}

func TestServiceTokensAndAuditAPI(t *testing.T) {
	srv, op := operatorSetup(t, nil)
	base := srv.URL + "/api/v1/service-tokens"
	wantFields(t, call(t, "POST", base, op, map[string]any{"name": "", "ttl_s": 1}), "name", "ttl_s")
	res := call(t, "POST", base, op, map[string]any{"name": "edge", "ttl_s": 3600})
	want(t, res, http.StatusCreated)
	var made adminapi.ServiceTokenResponse
	res.Decode(t, &made)
	if strings.Count(made.Token, ".") != 2 || made.ServiceToken.Name != "edge" {
		t.Fatalf("issued %+v", made)
	}
	var list struct {
		Items []auth.ServiceToken `json:"items"`
	}
	res = call(t, "GET", base, op, nil)
	res.Decode(t, &list)
	if len(list.Items) != 1 || strings.Contains(string(res.Body), made.Token) {
		t.Errorf("list = %s", res.Body)
	}
	res = call(t, "POST", base+"/"+made.ServiceToken.ID+"/revoke", op, nil)
	want(t, res, http.StatusOK)
	var st auth.ServiceToken
	res.Decode(t, &st)
	if st.RevokedAt == nil {
		t.Error("revoked_at not set")
	}
	want(t, call(t, "POST", base+"/00000000-0000-0000-0000-000000000000/revoke", op, nil), http.StatusNotFound)

	var entries struct {
		Items []struct {
			Action, Actor, TargetType, TargetID string
			ActorID                             string          `json:"actor_id"`
			Before                              json.RawMessage `json:"before"`
			After                               json.RawMessage `json:"after"`
		} `json:"items"`
		NextCursor *string `json:"next_cursor"`
	}
	call(t, "GET", srv.URL+"/api/v1/audit?actor=ops@example.com&action=service_token.*", op, nil).Decode(t, &entries)
	if len(entries.Items) != 2 || entries.Items[0].Action != "service_token.revoke" || entries.Items[1].Action != "service_token.create" {
		t.Fatalf("audit = %+v", entries.Items)
	}
	rev := entries.Items[0]
	if string(rev.Before) != `{"revoked_at":null}` || !strings.Contains(string(rev.After), "revoked_at") {
		t.Errorf("revoke diff = %s → %s", rev.Before, rev.After)
	}
	call(t, "GET", srv.URL+"/api/v1/audit?target=service_token:"+made.ServiceToken.ID+"&limit=1", op, nil).Decode(t, &entries)
	if len(entries.Items) != 1 || entries.NextCursor == nil {
		t.Errorf("target filter, limit 1: %+v", entries)
	}
	from := url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339))
	call(t, "GET", srv.URL+"/api/v1/audit?from="+from, op, nil).Decode(t, &entries)
	if len(entries.Items) != 0 {
		t.Errorf("from the future: %d entries", len(entries.Items))
	}
	wantFields(t, call(t, "GET", srv.URL+"/api/v1/audit?from=yesterday", op, nil), "from")
	wantFields(t, call(t, "GET", srv.URL+"/api/v1/audit?from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z", op, nil), "to")
}

// TestConcurrentKeyRotations: of many rotations of one key at once, one
// makes a new key; the others are 409. The audit log links the rotated
// key to its replacement.
func TestConcurrentKeyRotations(t *testing.T) {
	srv, op, acme, _ := acmeSetup(t)
	ctx := context.Background()
	_, k, err := tenants.NewStore(srv.DB).CreateKey(ctx, acme.ID, tenants.KeySpec{Name: "ci"})
	testenv.Must(t, err)
	keyURL := srv.URL + "/api/v1/tenants/" + acme.ID + "/keys/" + k.ID

	const n = 8
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { statuses[i] = call(t, "POST", keyURL+"/rotate", op, nil).StatusCode })
	}
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	if count[http.StatusCreated] != 1 || count[http.StatusConflict] != n-1 {
		t.Errorf("statuses of %d concurrent rotations: %v; want one 201 and the rest 409", n, count)
	}
	keys, err := tenants.NewStore(srv.DB).ListKeys(ctx, acme.ID)
	testenv.Must(t, err)
	if len(keys) != 2 {
		t.Fatalf("%d keys after the rotations, want 2", len(keys))
	}
	var after string
	testenv.Must(t, srv.DB.QueryRow(ctx, `SELECT after->>'replaced_by' FROM audit_log WHERE action = 'key.rotate' AND target_id = $1`,
		k.ID).Scan(&after))
	if after != keys[0].ID {
		t.Errorf("audit of the rotation: replaced_by %q, want the new key %s", after, keys[0].ID)
	}
}

// TestLiveKeyLimitAPI: a tenant with tenants.MaxLiveKeys live keys gets no
// more through the API (409), not even by rotation, until it revokes one;
// operators' CLI is not limited.
func TestLiveKeyLimitAPI(t *testing.T) {
	srv, op, acme, admin := acmeSetup(t)
	ctx := context.Background()
	keys := srv.URL + "/api/v1/tenants/" + acme.ID + "/keys"
	var first adminapi.KeySecretResponse
	call(t, "POST", keys, admin, map[string]any{"name": "first"}).Decode(t, &first)
	// The rest straight into the table, plus some that do not count.
	_, err := srv.DB.Exec(ctx, `INSERT INTO api_keys (tenant_id, hash, prefix, expires_at, revoked_at)
		SELECT $1, sha256(convert_to('k' || g, 'UTF8')), 'tg_test', CASE WHEN g % 2 = 0 THEN now() - interval '1 hour' END,
			CASE WHEN g % 2 = 1 THEN now() END
		FROM generate_series(1, 30) g`, acme.ID)
	testenv.Must(t, err)
	_, err = srv.DB.Exec(ctx, `INSERT INTO api_keys (tenant_id, hash, prefix)
		SELECT $1, sha256(convert_to('live' || g, 'UTF8')), 'tg_test' FROM generate_series(2, $2) g`, acme.ID, tenants.MaxLiveKeys)
	testenv.Must(t, err)

	for _, tok := range []string{admin, op} {
		res := call(t, "POST", keys, tok, map[string]any{"name": "one too many"})
		want(t, res, http.StatusConflict)
		if p := problemOf(t, res); !strings.Contains(p.Detail, "live keys") {
			t.Errorf("409 detail = %q, want it to name the live keys", p.Detail)
		}
		want(t, call(t, "POST", keys+"/"+first.Key.ID+"/rotate", tok, nil), http.StatusConflict)
	}
	// Rotation without grace ends the old key at once: no more live keys.
	want(t, call(t, "POST", keys+"/"+first.Key.ID+"/rotate", admin, map[string]any{"grace_period_s": 0}), http.StatusCreated)
	if _, err := runAdmin(t, srv.DBURL, "", "keys", "issue", "--tenant", acme.ID); err != nil {
		t.Errorf("keys issue over the API's limit: %v", err)
	}
	var page struct {
		Items []tenants.Key `json:"items"`
	}
	call(t, "GET", keys+"?limit=1", admin, nil).Decode(t, &page)
	want(t, call(t, "POST", keys+"/"+page.Items[0].ID+"/revoke", admin, nil), http.StatusOK)
	want(t, call(t, "POST", keys, admin, map[string]any{"name": "room again"}), http.StatusConflict) // the CLI went one over
	call(t, "GET", keys+"?limit=2", admin, nil).Decode(t, &page)
	want(t, call(t, "POST", keys+"/"+page.Items[1].ID+"/revoke", admin, nil), http.StatusOK)
	want(t, call(t, "POST", keys, admin, map[string]any{"name": "room again"}), http.StatusCreated)
}

// TestKeyExpiryRules: a tenant admin may set an expiry on a key without
// one, or bring it forward; clearing or extending it, or touching an
// expired key's, is for operators (403 otherwise) — so a tenant admin
// cannot undo a rotation's grace period or an operator's expiry.
func TestKeyExpiryRules(t *testing.T) {
	srv, op, acme, admin := acmeSetup(t)
	keys := srv.URL + "/api/v1/tenants/" + acme.ID + "/keys"
	newKey := func(body map[string]any) string {
		t.Helper()
		var made adminapi.KeySecretResponse
		res := call(t, "POST", keys, op, body)
		want(t, res, http.StatusCreated)
		res.Decode(t, &made)
		return keys + "/" + made.Key.ID
	}
	forbidden := func(url string, body map[string]any) {
		t.Helper()
		res := call(t, "PATCH", url, admin, body)
		want(t, res, http.StatusForbidden)
		if p := problemOf(t, res); p.Code != "forbidden" || !strings.Contains(p.Detail, "operators") {
			t.Errorf("403 problem = %+v", p)
		}
	}
	now := time.Now().UTC().Truncate(time.Second)

	// An operator's expiry: neither cleared nor extended by the tenant.
	limited := newKey(map[string]any{"expires_at": now.Add(2 * time.Hour)})
	forbidden(limited, map[string]any{"expires_at": nil})
	forbidden(limited, map[string]any{"expires_at": now.Add(3 * time.Hour)})
	forbidden(limited, map[string]any{"expires_at": now.Add(3 * time.Hour), "name": "renamed"})
	var k tenants.Key
	call(t, "GET", limited, admin, nil).Decode(t, &k)
	if k.ExpiresAt == nil || !k.ExpiresAt.Equal(now.Add(2*time.Hour)) || k.Name != "" {
		t.Errorf("after refused changes: %+v", k)
	}
	res := call(t, "PATCH", limited, admin, map[string]any{"expires_at": now.Add(time.Hour)})
	want(t, res, http.StatusOK)
	want(t, call(t, "PATCH", limited, admin, map[string]any{"name": "still mine"}), http.StatusOK)

	// A key without an expiry: the tenant may set one.
	open := newKey(map[string]any{})
	want(t, call(t, "PATCH", open, admin, map[string]any{"expires_at": now.Add(time.Hour)}), http.StatusOK)
	want(t, call(t, "PATCH", open, admin, map[string]any{"expires_at": nil}), http.StatusForbidden)

	// A rotated key's grace period cannot be undone.
	res = call(t, "POST", open+"/rotate", admin, map[string]any{"grace_period_s": 60})
	want(t, res, http.StatusCreated)
	forbidden(open, map[string]any{"expires_at": nil})
	forbidden(open, map[string]any{"expires_at": now.Add(24 * time.Hour)})

	// An expired key stays expired.
	expired := newKey(map[string]any{"expires_at": now.Add(time.Hour)})
	want(t, call(t, "PATCH", expired, op, map[string]any{"expires_at": now.Add(-time.Hour)}), http.StatusOK)
	forbidden(expired, map[string]any{"expires_at": now.Add(time.Hour)})
	forbidden(expired, map[string]any{"expires_at": nil})

	// Operators may do all of it.
	for _, url := range []string{limited, open, expired} {
		want(t, call(t, "PATCH", url, op, map[string]any{"expires_at": nil}), http.StatusOK)
	}
}
