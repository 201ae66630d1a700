package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/demo"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
	"github.com/tollgate/tollgate/internal/testenv/stripetest"
)

// TestEveryChangeIsAudited: every change the admin API, the console and
// the CLI can make writes exactly one audit entry, naming who made it and
// what it changed; a refused change (access denied, invalid input) writes
// none. The routes come from the admin server's own router and the
// commands from the CLI's own table, so a route or command added without
// a case here fails the test.
func TestEveryChangeIsAudited(t *testing.T) {
	srv, op, acme, admin := acmeSetupWith(t, stripetest.Start(t).Settings())
	viewer := sessionFor(t, srv.DB, createUser(t, srv.DB, "viewer@acme.example", auth.RoleTenantViewer, acme.ID))
	t.Run("api", func(t *testing.T) { testAPIChanges(t, srv, op, admin, viewer, acme) })
	t.Run("console", func(t *testing.T) { testConsoleChanges(t, srv, op, admin, viewer, acme) })
	t.Run("cli", func(t *testing.T) { testCLIChanges(t, srv, acme) })
}

// routeCase is one mutating route of the admin server made once.
type routeCase struct {
	route string // "POST /api/v1/plans", as the router lists it
	as    string // the session token that makes the change
	path  func() string
	body  any // JSON for the API, url.Values for the console
	// status is the success's; action and target the entry's.
	status int
	action string
	target func(res response) string
	// invalid, when not nil, is a body the operation refuses.
	invalid any
}

// mutatingRoutes lists the admin server's routes that may change
// something, from the router itself: the API's (console false) or the
// console's. Sign-in and sign-out are left out: they change no object
// (they are audited all the same, as user.login and user.logout, and
// TestAuditHasNoSecrets sees them).
func mutatingRoutes(t *testing.T, console bool) []string {
	t.Helper()
	var routes []string
	for _, r := range admintest.Routes(t, console) {
		switch {
		case r.Method == "GET" || r.Method == "HEAD" || r.Method == "OPTIONS":
		case strings.HasSuffix(r.Pattern, "/login") || strings.HasSuffix(r.Pattern, "/logout"):
		case r.Pattern == providerWebhookRoute:
			// The payment provider's webhook: signed, no session; what its
			// events change is audited by the operations they call
			// (TestInvoicesThroughTheAdminServer).
		default:
			routes = append(routes, r.String())
		}
	}
	return routes
}

// wantCases fails unless cases name exactly the routes.
func wantCases(t *testing.T, routes []string, cases []routeCase) {
	t.Helper()
	var covered []string
	for _, c := range cases {
		covered = append(covered, c.route)
	}
	for _, r := range routes {
		if !slices.Contains(covered, r) {
			t.Errorf("%s changes something but has no case here: add one", r)
		}
		covered = slices.DeleteFunc(covered, func(c string) bool { return c == r })
	}
	if len(covered) > 0 {
		t.Errorf("cases for routes the router does not have: %v", covered)
	}
}

func testAPIChanges(t *testing.T, srv *adminServer, op, admin, viewer string, acme tenants.Tenant) {
	ctx := context.Background()
	ps, ts := plans.NewStore(srv.DB), tenants.NewStore(srv.DB)
	spare, err := ps.Create(ctx, plans.Plan{Name: "spare"})
	testenv.Must(t, err)
	doomed, err := ps.Create(ctx, plans.Plan{Name: "doomed"})
	testenv.Must(t, err)
	key := func(name string) string {
		_, k, err := ts.CreateKey(ctx, acme.ID, tenants.KeySpec{Name: name})
		testenv.Must(t, err)
		return k.ID
	}
	updated, revoked, rotated := key("to update"), key("to revoke"), key("to rotate")
	disabled := createUser(t, srv.DB, "leaver@example.com", auth.RoleOperator, "")
	signedOut := createUser(t, srv.DB, "roamer@example.com", auth.RoleOperator, "")
	var tokenID string

	api := srv.URL + "/api/v1"
	fixed := func(s string) func() string { return func() string { return s } }
	id := func(s string) func(response) string { return func(response) string { return s } }
	idOf := func(path ...string) func(response) string {
		return func(res response) string { return jsonField(t, res.Body, path...) }
	}
	planPath := func(p plans.Plan, suffix string) func() string {
		return fixed(api + "/plans/" + itoa(p.ID) + suffix)
	}
	tenantPath := api + "/tenants/" + acme.ID
	cases := []routeCase{
		{route: "POST /api/v1/plans", as: op, path: fixed(api + "/plans"), body: map[string]any{"name": "new"},
			status: 201, action: "plan.create", target: idOf("id"), invalid: map[string]any{"name": "Not A Name"}},
		{route: "PUT /api/v1/plans/{planID}", as: op, path: planPath(spare, ""), body: map[string]any{"name": "spare", "display_name": "Spare"},
			status: 200, action: "plan.update", target: id(itoa(spare.ID)), invalid: map[string]any{"name": ""}},
		{route: "POST /api/v1/plans/{planID}/archive", as: op, path: planPath(spare, "/archive"),
			status: 200, action: "plan.archive", target: id(itoa(spare.ID))},
		{route: "POST /api/v1/plans/{planID}/unarchive", as: op, path: planPath(spare, "/unarchive"),
			status: 200, action: "plan.unarchive", target: id(itoa(spare.ID))},
		{route: "DELETE /api/v1/plans/{planID}", as: op, path: planPath(doomed, ""),
			status: 204, action: "plan.delete", target: id(itoa(doomed.ID))},
		{route: "PUT /api/v1/plans/{planID}/quota", as: op, path: planPath(spare, "/quota"),
			body:   map[string]any{"thresholds": []any{map[string]any{"percent": 80}}, "spend_cap_max_minor": 5000},
			status: 200, action: "plan.quota", target: id(itoa(spare.ID)),
			invalid: map[string]any{"thresholds": []any{map[string]any{"percent": 80, "units": 5}}}},
		{route: "POST /api/v1/tenants", as: op, path: fixed(api + "/tenants"), body: map[string]any{"name": "globex", "plan_id": spare.ID},
			status: 201, action: "tenant.create", target: idOf("id"), invalid: map[string]any{"name": " "}},
		{route: "POST /api/v1/tenants/{tenantID}/plan", as: op, path: fixed(tenantPath + "/plan"), body: map[string]any{"plan_id": spare.ID},
			status: 200, action: "tenant.plan_change", target: id(acme.ID), invalid: map[string]any{"plan_id": 0}},
		{route: "POST /api/v1/tenants/{tenantID}/suspend", as: op, path: fixed(tenantPath + "/suspend"),
			status: 200, action: "tenant.suspend", target: id(acme.ID)},
		{route: "POST /api/v1/tenants/{tenantID}/resume", as: op, path: fixed(tenantPath + "/resume"),
			status: 200, action: "tenant.resume", target: id(acme.ID)},
		{route: "PUT /api/v1/tenants/{tenantID}/overrides", as: op, path: fixed(tenantPath + "/overrides"),
			body: map[string]any{"rules": []any{}}, status: 200, action: "tenant.overrides_set", target: id(acme.ID),
			invalid: map[string]any{}},
		{route: "PUT /api/v1/tenants/{tenantID}/quota", as: admin, path: fixed(tenantPath + "/quota"),
			body:   map[string]any{"thresholds": []any{map[string]any{"remaining": 100}}, "spend_cap_minor": 0},
			status: 200, action: "tenant.quota", target: id(acme.ID), invalid: map[string]any{"spend_cap_minor": -1}},
		{route: "PUT /api/v1/plans/{planID}/credits", as: op, path: planPath(spare, "/credits"),
			body: map[string]any{"mode": "deny", "overdraft": 10}, status: 200, action: "plan.credits", target: id(itoa(spare.ID)),
			invalid: map[string]any{"mode": "sometimes"}},
		{route: "POST /api/v1/tenants/{tenantID}/credits/grants", as: op, path: fixed(tenantPath + "/credits/grants"),
			body: map[string]any{"amount": 100, "cause": "top-up"}, status: 201, action: "credits.grant", target: idOf("id"),
			invalid: map[string]any{"amount": 0, "cause": "top-up"}},
		{route: "POST /api/v1/tenants/{tenantID}/credits/adjustments", as: op, path: fixed(tenantPath + "/credits/adjustments"),
			body: map[string]any{"units": -5, "cause": "correction"}, status: 200, action: "credits.adjust", target: id(acme.ID),
			invalid: map[string]any{"units": 0, "cause": "correction"}},
		{route: "POST /api/v1/tenants/{tenantID}/keys", as: admin, path: fixed(tenantPath + "/keys"), body: map[string]any{"name": "new"},
			status: 201, action: "key.create", target: idOf("key", "id"), invalid: map[string]any{"expires_at": "2000-01-01T00:00:00Z"}},
		{route: "PATCH /api/v1/tenants/{tenantID}/keys/{keyID}", as: admin, path: fixed(tenantPath + "/keys/" + updated),
			body: map[string]any{"name": "renamed"}, status: 200, action: "key.update", target: id(updated),
			invalid: map[string]any{"name": strings.Repeat("n", tenants.MaxKeyNameLen+1)}},
		{route: "POST /api/v1/tenants/{tenantID}/keys/{keyID}/revoke", as: admin, path: fixed(tenantPath + "/keys/" + revoked + "/revoke"),
			status: 200, action: "key.revoke", target: id(revoked)},
		{route: "POST /api/v1/tenants/{tenantID}/keys/{keyID}/rotate", as: admin, path: fixed(tenantPath + "/keys/" + rotated + "/rotate"),
			status: 201, action: "key.rotate", target: id(rotated), invalid: map[string]any{"grace_period_s": -1}},
		{route: "POST /api/v1/service-tokens", as: op, path: fixed(api + "/service-tokens"), body: map[string]any{"name": "edge"},
			status: 201, action: "service_token.create", target: func(res response) string {
				tokenID = idOf("service_token", "id")(res)
				return tokenID
			}, invalid: map[string]any{"name": "edge", "ttl_s": 1}},
		{route: "POST /api/v1/service-tokens/{tokenID}/revoke", as: op, path: func() string { return api + "/service-tokens/" + tokenID + "/revoke" },
			status: 200, action: "service_token.revoke", target: func(response) string { return tokenID }},
		{route: "POST /api/v1/users", as: op, path: fixed(api + "/users"), body: map[string]any{"email": "new@example.com", "role": "operator"},
			status: 201, action: "user.create", target: idOf("user", "id"), invalid: map[string]any{"email": "new@example.com", "role": "root"}},
		{route: "POST /api/v1/users/{userID}/disable", as: op, path: fixed(api + "/users/" + disabled.ID + "/disable"),
			status: 200, action: "user.disable", target: id(disabled.ID)},
		{route: "POST /api/v1/users/{userID}/sessions/revoke", as: op, path: fixed(api + "/users/" + signedOut.ID + "/sessions/revoke"),
			status: 200, action: "user.sessions_revoke", target: id(signedOut.ID)},
		{route: "POST /api/v1/months/{month}/close", as: op, path: fixed(api + "/months/2020-01/close"),
			status: 200, action: "month.close", target: id("2020-01")},
	}
	cases = append(cases, webhookCases(t, srv, api, op, "", acme)...)
	cases = append(cases, webhookCases(t, srv, tenantPath, admin, "/tenants/{tenantID}", acme)...)
	cases = append(cases, billingAPICases(t, srv, tenantPath, op, admin, acme)...)

	wantCases(t, mutatingRoutes(t, false), cases)

	makeCases(t, srv, cases, viewer, actorsOf(op, admin), func(c routeCase, token string, body any) response {
		method, _, _ := strings.Cut(c.route, " ")
		return call(t, method, c.path(), token, body)
	})
}

// makeCases makes each change of cases, in order, after trying it as
// viewer, who may change nothing, and with its invalid body: each refused
// attempt must write no entry, and the change exactly one, by
// actors[c.as] (the email of the token's user) and on c's target. send
// sends c's request with a session token and a body.
func makeCases(t *testing.T, srv *adminServer, cases []routeCase, viewer string, actors map[string]string,
	send func(c routeCase, token string, body any) response) {
	t.Helper()
	for _, c := range cases {
		last := lastAuditID(t, srv)
		if res := send(c, viewer, c.body); res.StatusCode != 403 && res.StatusCode != 404 {
			t.Errorf("%s as a tenant viewer = %d, want 403 or 404", c.route, res.StatusCode)
		}
		if c.invalid != nil {
			if res := send(c, c.as, c.invalid); res.StatusCode < 400 || res.StatusCode >= 500 {
				t.Errorf("%s with %v = %d, want it refused", c.route, c.invalid, res.StatusCode)
			}
		}
		if got := auditSince(t, srv, last); len(got) != 0 {
			t.Errorf("%s refused wrote %v, want no entry", c.route, got)
		}
		res := send(c, c.as, c.body)
		if res.StatusCode != c.status {
			t.Errorf("%s = %d %s, want %d", c.route, res.StatusCode, res.Body, c.status)
			continue
		}
		wantEntry(t, c.route, auditSince(t, srv, last), actors[c.as], c.action, c.target(res))
	}
}

// testConsoleChanges is testAPIChanges for the console's forms: posted
// with the session cookie and the CSRF token, confirmed; c.body is the
// form (url.Values).
func testConsoleChanges(t *testing.T, srv *adminServer, op, admin, viewer string, acme tenants.Tenant) {
	ctx := context.Background()
	ps, ts := plans.NewStore(srv.DB), tenants.NewStore(srv.DB)
	spare, err := ps.Create(ctx, plans.Plan{Name: "console-spare"})
	testenv.Must(t, err)
	_, rotated, err := ts.CreateKey(ctx, acme.ID, tenants.KeySpec{Name: "console rotate"})
	testenv.Must(t, err)
	_, revoked, err := ts.CreateKey(ctx, acme.ID, tenants.KeySpec{Name: "console revoke"})
	testenv.Must(t, err)
	disabled := createUser(t, srv.DB, "console-leaver@example.com", auth.RoleOperator, "")
	signedOut := createUser(t, srv.DB, "console-roamer@example.com", auth.RoleOperator, "")
	var tokenID string

	fixed := func(s string) func() string { return func() string { return s } }
	id := func(s string) func(response) string { return func(response) string { return s } }
	located := func(prefix string) func(response) string {
		return func(res response) string { return strings.TrimPrefix(res.Header.Get("Location"), prefix) }
	}
	named := func(query, name string) func(response) string {
		return func(response) string {
			var id string
			testenv.Must(t, srv.DB.QueryRow(ctx, query, name).Scan(&id))
			return id
		}
	}
	rule := url.Values{"rule_count": {"1"}, "rules[0].name": {"hourly"}, "rules[0].algorithm": {"gcra"},
		"rules[0].limit": {"10"}, "rules[0].period": {"1"}, "rules[0].period_unit": {"h"}, "rules[0].burst": {"1"},
		"rules[0].resource": {"*"}, "rules[0].scope": {"key"}, "rules[0].mode": {"enforce"}, "rules[0].failure_mode": {"open"}}
	plan := func(name string) url.Values {
		v := url.Values{"name": {name}, "currency": {"USD"}, "pricing": {"flat"}, "quota_mode": {"none"}}
		for k, vs := range rule {
			v[k] = vs
		}
		return v
	}
	badRule := plan("console-bad")
	badRule.Set("rules[0].limit", "ten")
	planPath := "/plans/" + itoa(spare.ID)
	tenantPath := "/tenants/" + acme.ID
	cases := []routeCase{
		{route: "POST /plans", as: op, path: fixed("/plans"), body: plan("console-new"),
			status: 303, action: "plan.create", target: located("/plans/"), invalid: plan("Not A Name")},
		{route: "POST /plans/{planID}", as: op, path: fixed(planPath), body: plan("console-spare"),
			status: 303, action: "plan.update", target: id(itoa(spare.ID)), invalid: badRule},
		{route: "POST /plans/{planID}/archive", as: op, path: fixed(planPath + "/archive"),
			status: 303, action: "plan.archive", target: id(itoa(spare.ID))},
		{route: "POST /plans/{planID}/unarchive", as: op, path: fixed(planPath + "/unarchive"),
			status: 303, action: "plan.unarchive", target: id(itoa(spare.ID))},
		{route: "POST /plans/{planID}/quota", as: op, path: fixed(planPath + "/quota"),
			body: url.Values{"thresholds[0].kind": {"percent"}, "thresholds[0].value": {"80"},
				"spend_cap_default_minor": {"500"}, "spend_cap_max_minor": {"900"}},
			status: 303, action: "plan.quota", target: id(itoa(spare.ID)),
			invalid: url.Values{"thresholds[0].kind": {"percent"}, "thresholds[0].value": {"80"},
				"spend_cap_default_minor": {"1000"}, "spend_cap_max_minor": {"900"}}},
		{route: "POST /tenants", as: op, path: fixed("/tenants"), body: url.Values{"name": {"console-globex"}, "plan_id": {itoa(spare.ID)}},
			status: 303, action: "tenant.create", target: located("/tenants/"), invalid: url.Values{"name": {" "}, "plan_id": {itoa(spare.ID)}}},
		{route: "POST /tenants/{tenantID}/plan", as: op, path: fixed(tenantPath + "/plan"), body: url.Values{"plan_id": {itoa(spare.ID)}},
			status: 303, action: "tenant.plan_change", target: id(acme.ID), invalid: url.Values{"plan_id": {"0"}}},
		{route: "POST /tenants/{tenantID}/credits", as: op, path: fixed(tenantPath + "/credits"),
			body:   url.Values{"amount": {"250"}, "expires_at": {"2999-01-01T00:00"}, "cause": {"console top-up"}},
			status: 303, action: "credits.grant", target: named(`SELECT id::text FROM credit_grants WHERE cause = $1`, "console top-up"),
			invalid: url.Values{"amount": {"-3"}, "cause": {"console top-up"}}},
		{route: "POST /tenants/{tenantID}/suspend", as: op, path: fixed(tenantPath + "/suspend"),
			status: 303, action: "tenant.suspend", target: id(acme.ID)},
		{route: "POST /tenants/{tenantID}/resume", as: op, path: fixed(tenantPath + "/resume"),
			status: 303, action: "tenant.resume", target: id(acme.ID)},
		{route: "POST /tenants/{tenantID}/overrides", as: op, path: fixed(tenantPath + "/overrides"), body: rule,
			status: 303, action: "tenant.overrides_set", target: id(acme.ID), invalid: func() url.Values {
				v := url.Values{}
				for k, vs := range rule {
					v[k] = vs
				}
				v.Set("rules[0].period_unit", "fortnight")
				return v
			}()},
		{route: "POST /tenants/{tenantID}/keys", as: admin, path: fixed(tenantPath + "/keys"), body: url.Values{"name": {"console key"}},
			status: 201, action: "key.create", target: named(`SELECT id FROM api_keys WHERE name = $1`, "console key"),
			invalid: url.Values{"name": {"k"}, "expires_at": {"2000-01-01T00:00"}}},
		{route: "POST /tenants/{tenantID}/keys/{keyID}/rotate", as: admin, path: fixed(tenantPath + "/keys/" + rotated.ID + "/rotate"),
			status: 201, action: "key.rotate", target: id(rotated.ID), invalid: url.Values{"grace_period_s": {"-1"}}},
		{route: "POST /tenants/{tenantID}/keys/{keyID}/revoke", as: admin, path: fixed(tenantPath + "/keys/" + revoked.ID + "/revoke"),
			status: 303, action: "key.revoke", target: id(revoked.ID)},
		{route: "POST /months/{month}/close", as: op, path: fixed("/months/2020-03/close"),
			status: 303, action: "month.close", target: id("2020-03")},
		{route: "POST /service-tokens", as: op, path: fixed("/service-tokens"), body: url.Values{"name": {"console-edge"}, "ttl_s": {"86400"}},
			status: 201, action: "service_token.create", target: func(res response) string {
				tokenID = named(`SELECT id FROM service_tokens WHERE name = $1`, "console-edge")(res)
				return tokenID
			}, invalid: url.Values{"name": {"console-edge"}, "ttl_s": {"1"}}},
		{route: "POST /service-tokens/{tokenID}/revoke", as: op, path: func() string { return "/service-tokens/" + tokenID + "/revoke" },
			status: 303, action: "service_token.revoke", target: func(response) string { return tokenID }},
		{route: "POST /users", as: op, path: fixed("/users"), body: url.Values{"email": {"console-new@example.com"}, "role": {"operator"}},
			status: 201, action: "user.create", target: named(`SELECT id FROM users WHERE email = $1`, "console-new@example.com"),
			invalid: url.Values{"email": {"console-new@example.com"}, "role": {"root"}}},
		{route: "POST /users/{userID}/disable", as: op, path: fixed("/users/" + disabled.ID + "/disable"),
			status: 303, action: "user.disable", target: id(disabled.ID)},
		{route: "POST /users/{userID}/sessions/revoke", as: op, path: fixed("/users/" + signedOut.ID + "/sessions/revoke"),
			status: 303, action: "user.sessions_revoke", target: id(signedOut.ID)},
		{route: "POST /tenants/{tenantID}/alerts/thresholds", as: admin, path: fixed(tenantPath + "/alerts/thresholds"),
			body:   url.Values{"thresholds[0].kind": {"percent"}, "thresholds[0].value": {"80"}},
			status: 303, action: "tenant.quota", target: id(acme.ID),
			invalid: url.Values{"thresholds[0].kind": {"percent"}, "thresholds[0].value": {"5000"}}},
		// The API's case lowered acme's cap to 0: a tenant admin may keep it.
		{route: "POST /tenants/{tenantID}/alerts/spend-cap", as: admin, path: fixed(tenantPath + "/alerts/spend-cap"),
			body: url.Values{"spend_cap_minor": {"0"}}, status: 303, action: "tenant.quota", target: id(acme.ID),
			invalid: url.Values{"spend_cap_minor": {"1"}}},
	}
	cases = append(cases, consoleWebhookCases(t, srv, op, "", "")...)
	cases = append(cases, consoleWebhookCases(t, srv, admin, tenantPath, acme.ID)...)
	cases = append(cases, billingConsoleCases(t, srv, tenantPath, op, admin, acme)...)
	wantCases(t, mutatingRoutes(t, true), cases)

	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	csrf := map[string]string{}
	for _, token := range []string{op, admin, viewer} {
		req, err := http.NewRequest("GET", srv.URL+tenantPath, nil)
		testenv.Must(t, err)
		req.AddCookie(&http.Cookie{Name: adminapi.SessionCookie, Value: token})
		m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(sendWith(t, client, req).Body)
		if m == nil {
			t.Fatal("no CSRF token on the tenant's page")
		}
		csrf[token] = string(m[1])
	}
	post := func(path, token string, form any) response {
		v := url.Values{}
		if form != nil {
			for k, vs := range form.(url.Values) {
				v[k] = vs
			}
		}
		v.Set("csrf", csrf[token])
		v.Set("confirmed", "yes")
		req, err := http.NewRequest("POST", srv.URL+path, strings.NewReader(v.Encode()))
		testenv.Must(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(&http.Cookie{Name: adminapi.SessionCookie, Value: token})
		return sendWith(t, client, req)
	}
	makeCases(t, srv, cases, viewer, actorsOf(op, admin), func(c routeCase, token string, body any) response {
		return post(c.path(), token, body)
	})
}

// cliCase is one change made with the CLI.
type cliCase struct {
	args   func() []string
	target func(out string) string
	// refused, when not nil, are arguments the command refuses.
	refused []string
}

// notChanges are the CLI's commands that make no change the audit log
// tracks, and why.
var notChanges = map[string]string{
	"migrate":          "changes the schema, not data",
	"tenants list":     "reads",
	"plans list":       "reads",
	"plans export":     "reads",
	"keys list":        "reads",
	"webhooks list":    "reads",
	"tokens list":      "reads",
	"secrets generate": "prints a fresh key; touches no database",
	"serve":            "serves the admin API and console, whose changes the api cases cover",
	"worker":           "applies usage, which is counted, not audited",
	"healthcheck":      "probes a server",
	"report":           "reads",
	"usage set-aside":  "reads",
	"credits list":     "reads",
	"credits ledger":   "reads",
	"invoices push":    "sends pending invoices to Stripe, as serve does; the invoices record their push state",
	"invoices list":    "reads",
	"reconcile":        "reads",
}

func testCLIChanges(t *testing.T, srv *adminServer, acme tenants.Tenant) {
	ctx := context.Background()
	ts := tenants.NewStore(srv.DB)
	_, revoked, err := ts.CreateKey(ctx, acme.ID, tenants.KeySpec{Name: "cli revoke"})
	testenv.Must(t, err)
	leaver := createUser(t, srv.DB, "cli-leaver@example.com", auth.RoleOperator, "")
	roamer := createUser(t, srv.DB, "cli-roamer@example.com", auth.RoleOperator, "")
	id := func(s string) func(string) string { return func(string) string { return s } }
	jsonID := func(path ...string) func(string) string {
		return func(out string) string { return jsonField(t, []byte(out), path...) }
	}
	argv := func(args ...string) func() []string { return func() []string { return args } }
	var tokenID string    // issued by tokens issue, revoked by tokens revoke
	var endpointID string // made by webhooks create, replayed by webhooks replay
	var planID string     // made by plans create, changed by the other plans commands
	planFile, badPlanFile := filepath.Join(t.TempDir(), "plans.yaml"), filepath.Join(t.TempDir(), "bad.yaml")
	testenv.Must(t, os.WriteFile(planFile, []byte("plans:\n  - name: cli-plan\n    display_name: Applied\n    included_units: 10\n"), 0o600))
	testenv.Must(t, os.WriteFile(badPlanFile, []byte("plans:\n  - name: cli-plan\n    included_units: -1\n"), 0o600))
	planTarget := func(string) string { return planID }
	endpoint := func(args ...string) func() []string {
		return func() []string { return append([]string{"--endpoint", endpointID}, args...) }
	}
	endpointTarget := func(string) string { return endpointID }
	cases := map[string]cliCase{
		"plans create": {args: argv("--name", "cli-plan", "--included-units", "10"), target: func(out string) string {
			planID = jsonField(t, []byte(out), "id")
			return planID
		}, refused: []string{"--name", "Not A Name"}},
		"plans update": {args: argv("--plan", "cli-plan", "--display-name", "CLI plan"), target: planTarget,
			refused: []string{"--plan", "cli-plan", "--base-fee-minor", "-1"}},
		"plans apply":            {args: argv("-f", planFile), target: planTarget, refused: []string{"-f", badPlanFile}},
		"plans archive":          {args: argv("--plan", "cli-plan"), target: planTarget, refused: []string{"--plan", "nope"}},
		"plans unarchive":        {args: argv("--plan", "cli-plan", "--json"), target: planTarget, refused: []string{"--plan", "nope"}},
		"tenants plan":           {args: argv("--tenant", "acme", "--plan", "pro"), target: id(acme.ID), refused: []string{"--tenant", "acme", "--plan", "nope"}},
		"tenants suspend":        {args: argv("--tenant", "acme"), target: id(acme.ID), refused: []string{"--tenant", "nobody"}},
		"tenants resume":         {args: argv("--tenant", "acme", "--json"), target: id(acme.ID), refused: []string{"--tenant", "nobody"}},
		"webhooks disable":       {args: endpoint(), target: endpointTarget, refused: []string{"--endpoint", "nope"}},
		"webhooks enable":        {args: endpoint("--json"), target: endpointTarget, refused: []string{"--endpoint", "nope"}},
		"webhooks rotate-secret": {args: endpoint(), target: endpointTarget, refused: []string{"--endpoint", "nope"}},
		"webhooks delete":        {args: endpoint(), target: endpointTarget, refused: []string{"--endpoint", "nope"}},
		"seed demo":              {args: argv("--usage=false"), target: id("demo")},
		"tenants create":         {args: argv("--name", "initech", "--plan", "free"), target: jsonID("id"), refused: []string{"--name", " ", "--plan", "free"}},
		"keys issue": {args: argv("--tenant", "acme", "--name", "cli", "--json"), target: jsonID("key", "id"),
			refused: []string{"--tenant", "acme", "--name", strings.Repeat("n", tenants.MaxKeyNameLen+1)}},
		"plans quota": {args: argv("--plan", "free", "--thresholds", "80%,remaining:10", "--spend-cap-max", "900"), target: jsonID("plan_id"),
			refused: []string{"--plan", "free", "--thresholds", "eighty"}},
		"tenants quota": {args: argv("--tenant", "acme", "--thresholds", "500", "--spend-cap", "100"), target: jsonID("tenant_id"),
			refused: []string{"--tenant", "acme", "--spend-cap", "-1"}},
		"keys revoke": {args: argv("--id", revoked.ID), target: id(revoked.ID), refused: []string{"--id", "nope"}},
		"tokens issue": {args: argv("--name", "cli-edge"), target: func(string) string {
			testenv.Must(t, srv.DB.QueryRow(ctx, `SELECT id FROM service_tokens WHERE name = 'cli-edge'`).Scan(&tokenID))
			return tokenID
		}, refused: []string{"--name", " "}},
		"tokens revoke":  {args: func() []string { return []string{"--id", tokenID} }, target: func(string) string { return tokenID }, refused: []string{"--id", "nope"}},
		"secrets reseal": {target: id("all")},
		// Nothing to retire here: the entry is written all the same.
		"secrets recover": {target: id("unreadable")},
		"users create": {args: argv("--email", "cli-new@example.com", "--role", "operator", "--json"), target: jsonID("user", "id"),
			refused: []string{"--email", "cli-new@example.com", "--role", "root"}},
		"users disable":         {args: argv("--email", leaver.Email), target: id(leaver.ID), refused: []string{"--email", "nobody@example.com"}},
		"users sessions revoke": {args: argv("--email", roamer.Email), target: id(roamer.ID), refused: []string{"--email", "nobody@example.com"}},
		"close":                 {args: argv("--month", "2020-02"), target: id("2020-02"), refused: []string{"--month", "2999-01"}},
		"plans routes": {args: argv("--plan", "free", "GET /items/{id}", "* /static/*"), target: jsonID("id"),
			refused: []string{"--plan", "free", "GET /items/", "get /x"}},
		"plans rule": {args: argv("--plan", "free", "--name", "inflight", "--algorithm", "concurrency", "--limit", "4", "--lease-ttl", "30s"),
			target: jsonID("id"), refused: []string{"--plan", "free", "--name", "tokens", "--limit", "10", "--period", "1m", "--refund-on", "4xx"}},
		"webhooks create": {args: argv("--url", "https://hooks.example.com/cli", "--tenant", "acme", "--json"),
			target: func(out string) string {
				endpointID = jsonField(t, []byte(out), "endpoint", "id")
				return endpointID
			}, refused: []string{"--url", "http://127.0.0.1:9/", "--events", "no.such.type"}},
		"plans credits": {args: argv("--plan", "free", "--mode", "deny", "--overdraft", "5"), target: jsonID("plan_id"),
			refused: []string{"--plan", "free", "--mode", "sometimes"}},
		"credits grant": {args: argv("--tenant", "acme", "--amount", "500", "--expires", "720h", "--cause", "prepaid pack"), target: jsonID("id"),
			refused: []string{"--tenant", "acme", "--amount", "0"}},
		"credits adjust": {args: argv("--tenant", "acme", "--units", "-20", "--cause", "goodwill reversal"), target: id(acme.ID),
			refused: []string{"--tenant", "acme", "--units", "5"}},
		"plans billing": {args: argv("--plan", "free", "--dunning-grace", "72h", "--top-up-unit-minor", "2"), target: jsonID("plan_id"),
			refused: []string{"--plan", "free", "--dunning-grace", "soon"}},
		"billing link": {args: argv("--tenant", "acme", "--customer", "cus_cli42"), target: jsonID("tenant_id"),
			refused: []string{"--tenant", "acme", "--customer", "acct_42"}},
		// A month closed before closes issued invoices without a
		// provider: acme, linked then, has a statement and no invoice.
		"invoices issue": {args: func() []string {
			closedBefore(t, srv, acme, "2019-12")
			return []string{"--month", "2019-12"}
		}, target: id("2019-12"), refused: []string{"--month", "2999-01"}},
		// The invoice issued above, refused for good by Stripe (as the
		// server's push could make it meanwhile, its state is set).
		"invoices retarget": {args: func() []string {
			refusedForGood(t, srv, acme, "2019-12")
			return []string{"--tenant", "acme", "--month", "2019-12"}
		}, target: jsonID("ref"), refused: []string{"--tenant", "acme", "--month", "2019-01"}},
		"invoices bill-outside": {args: func() []string {
			refusedForGood(t, srv, acme, "2019-12")
			return []string{"--tenant", "acme", "--month", "2019-12", "--note", "billed by hand"}
		}, target: jsonID("ref"), refused: []string{"--tenant", "acme", "--month", "2019-01"}},
		"webhooks replay": {args: func() []string {
			return []string{"--endpoint", endpointID, "--from", "2020-01-01T00:00:00Z", "--to", "2030-01-01T00:00:00Z"}
		}, target: func(string) string { return endpointID }, refused: []string{"--endpoint", "nope", "--event", "evt_x"}},
	}
	order := []string{"seed demo", "plans create", "plans update", "plans apply", "plans archive", "plans unarchive",
		"plans routes", "plans rule", "tenants create", "tenants plan", "tenants suspend", "tenants resume", "plans quota", "tenants quota", "keys issue", "keys revoke", "tokens issue", "tokens revoke", "secrets reseal", "secrets recover",
		"users create", "users disable", "users sessions revoke", "close", "webhooks create", "webhooks replay",
		"webhooks disable", "webhooks enable", "webhooks rotate-secret", "webhooks delete",
		"plans credits", "credits grant", "credits adjust", "billing link", "plans billing",
		"invoices issue", "invoices retarget", "invoices bill-outside"}
	for _, cmd := range commands() {
		_, hasCase := cases[cmd.name]
		_, exempt := notChanges[cmd.name]
		switch {
		case cmd.audited != "" && !hasCase:
			t.Errorf("admin %s makes %s changes but has no case here: add one", cmd.name, cmd.audited)
		case cmd.audited == "" && !exempt:
			t.Errorf("admin %s names no audit action and is not listed in notChanges: say which it is", cmd.name)
		case cmd.audited == "" && hasCase:
			t.Errorf("admin %s has a case but names no audit action", cmd.name)
		}
	}
	if len(order) != len(cases) {
		t.Fatalf("order lists %d commands, cases %d", len(order), len(cases))
	}
	audited := map[string]string{}
	for _, cmd := range commands() {
		audited[cmd.name] = cmd.audited
	}
	for _, name := range order {
		c := cases[name]
		words := strings.Fields(name)
		last := lastAuditID(t, srv)
		if c.refused != nil {
			if _, err := runAdmin(t, srv.DBURL, "", append(words, c.refused...)...); err == nil {
				t.Errorf("admin %s %v succeeded, want it refused", name, c.refused)
			}
			if got := auditSince(t, srv, last); len(got) != 0 {
				t.Errorf("admin %s refused wrote %v, want no entry", name, got)
			}
		}
		var args []string
		if c.args != nil {
			args = c.args()
		}
		out, err := runAdmin(t, srv.DBURL, "", append(words, args...)...)
		if err != nil {
			t.Errorf("admin %s: %v", name, err)
			continue
		}
		wantEntry(t, "admin "+name, auditSince(t, srv, last), "cli", audited[name], c.target(out))
	}
}

// closedBefore makes month (a month before tn existed) closed, with a
// statement of tn's of nothing and no invoice, closed after tn was linked
// to a customer: as a close that issued no invoice left it.
func closedBefore(t *testing.T, srv *adminServer, tn tenants.Tenant, month string) {
	t.Helper()
	ctx := context.Background()
	start := month + "-01"
	body := fmt.Sprintf(`{"tenant_id": %q, "tenant_name": %q, "month": %q, "period_start": "%sT00:00:00Z", "currency": "USD",
		"status": "closed", "plan_periods": [], "total_minor": 0}`, tn.ID, tn.Name, month, start)
	_, err := srv.DB.Exec(ctx, `INSERT INTO usage_closed_months (month, closed_at, statements) VALUES ($1, now(), 1)`, start)
	testenv.Must(t, err)
	_, err = srv.DB.Exec(ctx, `INSERT INTO statements (tenant_id, month, currency, total_minor, body, closed_at)
		VALUES ($1, $2, 'USD', 0, $3, now())`, tn.ID, start, body)
	testenv.Must(t, err)
}

// refusedForGood marks tn's invoice of month as Stripe's refusal for
// good leaves it.
func refusedForGood(t *testing.T, srv *adminServer, tn tenants.Tenant, month string) {
	t.Helper()
	_, err := srv.DB.Exec(context.Background(), `UPDATE invoices SET push_state = 'failed', last_error = 'stripe: 404'
		WHERE tenant_id = $1 AND month = $2`, tn.ID, month+"-01")
	testenv.Must(t, err)
}

// actorsOf names the users of acmeSetup's operator and tenant admin
// sessions.
func actorsOf(op, admin string) map[string]string {
	return map[string]string{op: "ops@example.com", admin: "admin@acme.example"}
}

// auditEntry is the part of an audit entry the test checks.
type auditEntry struct {
	Actor, Action, TargetID string
}

func lastAuditID(t *testing.T, srv *adminServer) int64 {
	t.Helper()
	var id int64
	testenv.Must(t, srv.DB.QueryRow(context.Background(), `SELECT coalesce(max(id), 0) FROM audit_log`).Scan(&id))
	return id
}

// auditSince returns the entries written after entry id.
func auditSince(t *testing.T, srv *adminServer, id int64) []auditEntry {
	t.Helper()
	rows, err := srv.DB.Query(context.Background(), `SELECT actor, action, target_id FROM audit_log WHERE id > $1 ORDER BY id`, id)
	testenv.Must(t, err)
	defer rows.Close()
	var out []auditEntry
	for rows.Next() {
		var e auditEntry
		testenv.Must(t, rows.Scan(&e.Actor, &e.Action, &e.TargetID))
		out = append(out, e)
	}
	testenv.Must(t, rows.Err())
	return out
}

// wantEntry fails unless got is exactly one entry by actor, of action,
// on target.
func wantEntry(t *testing.T, what string, got []auditEntry, actor, action, target string) {
	t.Helper()
	want := auditEntry{Actor: actor, Action: action, TargetID: target}
	if len(got) != 1 || got[0] != want || target == "" {
		t.Errorf("%s wrote %+v, want exactly %+v", what, got, want)
	}
}

// jsonField returns the field at path of a JSON object ("key", "id"), a
// string or a number, as text.
func jsonField(t *testing.T, body []byte, path ...string) string {
	t.Helper()
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	testenv.Must(t, dec.Decode(&v))
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("no %v in %s", path, body)
		}
		v = m[p]
	}
	return fmt.Sprint(v)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// webhookCases are the API's webhook changes at base (the API's root or
// a tenant's path), routed at prefix, made as token: on endpoints of
// their own, owned by acme on a tenant's path.
func webhookCases(t *testing.T, srv *adminServer, base, token, prefix string, acme tenants.Tenant) []routeCase {
	t.Helper()
	owner := ""
	if prefix != "" {
		owner = acme.ID
	}
	ops := events.NewOps(srv.DB, nil, events.Guard{AllowPrivate: true})
	endpoint := func() string {
		e, err := ops.CreateEndpoint(context.Background(), audit.CLI, owner, events.EndpointInput{URL: "http://127.0.0.1:9/hook"})
		testenv.Must(t, err)
		return e.Endpoint.ID
	}
	route := "/api/v1" + prefix + "/webhooks/endpoints"
	one := func(verb, id string) routeCase {
		return routeCase{route: "POST " + route + "/{endpointID}/" + verb, as: token,
			path: func() string { return base + "/webhooks/endpoints/" + id + "/" + verb }, status: 200,
			action: "webhook_endpoint." + verb, target: func(response) string { return id }}
	}
	rotate, disable, enable, test, replay := one("rotate", endpoint()), one("disable", endpoint()),
		one("enable", endpoint()), one("test", endpoint()), one("replay", endpoint())
	rotate.status, test.status, replay.status = 201, 202, 202
	replay.body = map[string]any{"from": "2020-01-01T00:00:00Z", "to": "2030-01-01T00:00:00Z"}
	replay.invalid = map[string]any{"from": "2030-01-01T00:00:00Z", "to": "2020-01-01T00:00:00Z"}
	doomed := endpoint()
	return []routeCase{
		{route: "POST " + route, as: token, path: func() string { return base + "/webhooks/endpoints" },
			body: map[string]any{"url": "http://127.0.0.1:9/new", "event_types": []string{"key.revoked"}}, status: 201,
			action: "webhook_endpoint.create", target: func(res response) string { return jsonField(t, res.Body, "endpoint", "id") },
			invalid: map[string]any{"url": "ftp://example.com/"}},
		{route: "DELETE " + route + "/{endpointID}", as: token, path: func() string { return base + "/webhooks/endpoints/" + doomed },
			status: 204, action: "webhook_endpoint.delete", target: func(response) string { return doomed }},
		rotate, disable, enable, test, replay,
	}
}

// consoleWebhookCases are the console's webhook forms at base ("" for the
// operators' pages, a tenant's path), made as token: on endpoints of
// their own, owned by owner ("" for an operator's).
func consoleWebhookCases(t *testing.T, srv *adminServer, token, base, owner string) []routeCase {
	t.Helper()
	prefix := ""
	if owner != "" {
		prefix = "/tenants/{tenantID}"
	}
	ops := events.NewOps(srv.DB, nil, events.Guard{AllowPrivate: true})
	endpoint := func() string {
		e, err := ops.CreateEndpoint(context.Background(), audit.CLI, owner, events.EndpointInput{URL: "http://127.0.0.1:9/console-hook"})
		testenv.Must(t, err)
		return e.Endpoint.ID
	}
	one := func(verb string) routeCase {
		id := endpoint()
		return routeCase{route: "POST " + prefix + "/webhooks/{endpointID}/" + verb, as: token,
			path: func() string { return base + "/webhooks/" + id + "/" + verb }, status: 303,
			action: "webhook_endpoint." + verb, target: func(response) string { return id }}
	}
	rotate, disable, enable, test, replay, del := one("rotate"), one("disable"), one("enable"), one("test"), one("replay"), one("delete")
	rotate.status = 201
	replay.body = url.Values{"from": {"2020-01-01T00:00"}, "to": {"2030-01-01T00:00"}}
	replay.invalid = url.Values{"from": {"2030-01-01T00:00"}, "to": {"2020-01-01T00:00"}}
	made := "http://127.0.0.1:9/console-new" + strings.ReplaceAll(base, "/", "-")
	return []routeCase{
		{route: "POST " + prefix + "/webhooks", as: token, path: func() string { return base + "/webhooks" },
			body: url.Values{"url": {made}, "event_types": {"key.revoked", "webhook.test"}}, status: 201,
			action: "webhook_endpoint.create", target: func(response) string {
				var id string
				testenv.Must(t, srv.DB.QueryRow(context.Background(), `SELECT id::text FROM webhook_endpoints WHERE url = $1`, made).Scan(&id))
				return id
			}, invalid: url.Values{"url": {"ftp://example.com/"}}},
		rotate, disable, enable, test, replay, del,
	}
}

func TestUsersCreateCLI(t *testing.T) {
	ctx := context.Background()
	dbURL := testenv.DatabaseURL(t)
	out, err := runAdmin(t, dbURL, "a long enough password\n", "users", "create", "--email", "Ops@Example.com",
		"--role", "operator", "--password-stdin")
	testenv.Must(t, err)
	if out != "" {
		t.Errorf("stdout = %q, want nothing when the password came from stdin", out)
	}
	srv := startAdmin(t, dbURL, nil)
	if _, err := auth.NewStore(srv.DB).Authenticate(ctx, "ops@example.com", "a long enough password"); err != nil {
		t.Fatalf("the new operator cannot log in: %v", err)
	}

	_, err = runAdmin(t, dbURL, "", "tenants", "create", "--name", "acme", "--plan", "free")
	if err == nil {
		t.Fatal("tenants create on a missing plan succeeded")
	}
	_, err = runAdmin(t, dbURL, "", "seed", "demo")
	testenv.Must(t, err)
	out, err = runAdmin(t, dbURL, "", "users", "create", "--email", "viewer@example.com", "--role", "tenant_viewer",
		"--tenant", "demo-free", "--json")
	testenv.Must(t, err)
	var made struct {
		User     auth.User `json:"user"`
		Password string    `json:"password"`
	}
	if err := json.Unmarshal([]byte(out), &made); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	if made.User.Role != auth.RoleTenantViewer || made.User.TenantID == "" || len(made.Password) < auth.MinPasswordLen {
		t.Errorf("created %+v", made)
	}
	if _, err := auth.NewStore(srv.DB).Authenticate(ctx, "viewer@example.com", made.Password); err != nil {
		t.Errorf("the generated password does not log in: %v", err)
	}

	for _, args := range [][]string{
		{"users", "create", "--email", "x@example.com", "--role", "tenant_admin"},                    // no tenant
		{"users", "create", "--email", "x@example.com", "--role", "root"},                            // no such role
		{"users", "create", "--email", "ops@example.com", "--role", "operator"},                      // taken
		{"users", "create", "--email", "y@example.com", "--role", "operator", "--password-stdin"},    // no password
		{"users", "create", "--email", "y@example.com", "--role", "tenant_viewer", "--tenant", "no"}, // no tenant
	} {
		if _, err := runAdmin(t, dbURL, "", args...); err == nil {
			t.Errorf("admin %s succeeded", strings.Join(args, " "))
		}
	}
}

func TestSeedDemoPrintsUsers(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	srv := startAdmin(t, dbURL, nil)
	for run := range 2 { // seed is idempotent and hands out fresh passwords
		out, err := runAdmin(t, dbURL, "", "seed", "demo", "--json")
		testenv.Must(t, err)
		var seeded struct {
			ServiceToken string               `json:"service_token"`
			Keys         map[string]string    `json:"keys"`
			Users        map[string]demo.User `json:"users"`
		}
		if err := json.Unmarshal([]byte(out), &seeded); err != nil {
			t.Fatalf("--json output: %v", err)
		}
		if seeded.ServiceToken == "" || len(seeded.Keys) != 4 || len(seeded.Users) != 3 {
			t.Fatalf("run %d: seed output %s", run, out)
		}
		for role, u := range seeded.Users {
			res := call(t, "POST", srv.URL+"/api/v1/login", "", map[string]string{"email": u.Email, "password": u.Password})
			want(t, res, http.StatusOK)
			var lr adminapi.LoginResponse
			res.Decode(t, &lr)
			if string(lr.User.Role) != role {
				t.Errorf("%s logs in as %s", role, lr.User.Role)
			}
			if role == "tenant_admin" {
				// The demo tenant admin manages demo-pro, and only it.
				var me adminapi.MeResponse
				call(t, "GET", srv.URL+"/api/v1/me", lr.Token, nil).Decode(t, &me)
				want(t, call(t, "GET", srv.URL+"/api/v1/tenants/"+me.User.TenantID+"/keys", lr.Token, nil), http.StatusOK)
				want(t, call(t, "GET", srv.URL+"/api/v1/tenants", lr.Token, nil), http.StatusForbidden)
			}
		}
	}
}

// TestAuditNeverHoldsSecrets makes every kind of secret there is — users'
// passwords, API key secrets, service tokens, session tokens — through the
// CLI and the API, then searches the audit log, and the API's view of it,
// for each of them and for the stored hashes.
func TestAuditNeverHoldsSecrets(t *testing.T) {
	ctx := context.Background()
	dbURL := testenv.DatabaseURL(t)
	var secrets []string
	const opPassword = "operator password 42"
	_, err := runAdmin(t, dbURL, opPassword+"\n", "users", "create", "--email", "ops@example.com", "--role", "operator", "--password-stdin")
	testenv.Must(t, err)
	secrets = append(secrets, opPassword)
	out, err := runAdmin(t, dbURL, "", "seed", "demo", "--json")
	testenv.Must(t, err)
	var seeded demo.Result
	testenv.Must(t, json.Unmarshal([]byte(out), &seeded))
	secrets = append(secrets, seeded.ServiceToken)
	for _, k := range seeded.Keys {
		secrets = append(secrets, k)
	}
	for _, u := range seeded.Users {
		secrets = append(secrets, u.Password)
	}
	out, err = runAdmin(t, dbURL, "", "users", "create", "--email", "admin@acme.example", "--role", "tenant_admin", "--tenant", "demo-free", "--json")
	testenv.Must(t, err)
	var made struct {
		Password string `json:"password"`
	}
	testenv.Must(t, json.Unmarshal([]byte(out), &made))
	secrets = append(secrets, made.Password)
	_, err = runAdmin(t, dbURL, "", "tenants", "create", "--name", "cli tenant", "--plan", "free")
	testenv.Must(t, err)
	out, err = runAdmin(t, dbURL, "", "keys", "issue", "--tenant", "demo-pro", "--name", "cli key")
	testenv.Must(t, err)
	secrets = append(secrets, strings.TrimSpace(out))
	out, err = runAdmin(t, dbURL, "", "tokens", "issue", "--name", "cli gateway")
	testenv.Must(t, err)
	secrets = append(secrets, strings.TrimSpace(out))

	srv := startAdmin(t, dbURL, nil)
	login := func(email, password string) string {
		res := call(t, "POST", srv.URL+"/api/v1/login", "", map[string]string{"email": email, "password": password})
		want(t, res, http.StatusOK)
		var lr adminapi.LoginResponse
		res.Decode(t, &lr)
		secrets = append(secrets, lr.Token)
		return lr.Token
	}
	op := login("ops@example.com", opPassword)
	ta := login("admin@acme.example", made.Password)
	var me adminapi.MeResponse
	call(t, "GET", srv.URL+"/api/v1/me", ta, nil).Decode(t, &me)
	keys := srv.URL + "/api/v1/tenants/" + me.User.TenantID + "/keys"
	res := call(t, "POST", keys, ta, map[string]any{"name": "api key", "metadata": map[string]string{"owner": "ci"}})
	want(t, res, http.StatusCreated)
	var k adminapi.KeySecretResponse
	res.Decode(t, &k)
	secrets = append(secrets, k.Secret)
	res = call(t, "POST", keys+"/"+k.Key.ID+"/rotate", ta, nil)
	want(t, res, http.StatusCreated)
	var rotated adminapi.KeySecretResponse
	res.Decode(t, &rotated)
	secrets = append(secrets, rotated.Secret)
	want(t, call(t, "POST", keys+"/"+rotated.Key.ID+"/revoke", ta, nil), http.StatusOK)
	res = call(t, "POST", srv.URL+"/api/v1/service-tokens", op, map[string]any{"name": "edge"})
	want(t, res, http.StatusCreated)
	var st adminapi.ServiceTokenResponse
	res.Decode(t, &st)
	secrets = append(secrets, st.Token)
	want(t, call(t, "POST", srv.URL+"/api/v1/logout", ta, nil), http.StatusNoContent)

	// The stored forms of secrets must not be there either.
	rows, err := srv.DB.Query(ctx, `SELECT password_hash FROM users`)
	testenv.Must(t, err)
	for rows.Next() {
		var h string
		testenv.Must(t, rows.Scan(&h))
		secrets = append(secrets, h, h[strings.LastIndex(h, "$")+1:])
	}
	testenv.Must(t, rows.Err())
	for _, q := range []string{`SELECT hash FROM api_keys`, `SELECT private_key FROM signing_keys`} {
		rows, err := srv.DB.Query(ctx, q)
		testenv.Must(t, err)
		for rows.Next() {
			var b []byte
			testenv.Must(t, rows.Scan(&b))
			secrets = append(secrets, hex.EncodeToString(b), base64.StdEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b))
		}
		testenv.Must(t, rows.Err())
	}

	var dump strings.Builder
	var n int
	rows, err = srv.DB.Query(ctx, `SELECT row_to_json(a)::text FROM audit_log a`)
	testenv.Must(t, err)
	for rows.Next() {
		var line string
		testenv.Must(t, rows.Scan(&line))
		dump.WriteString(line + "\n")
		n++
	}
	testenv.Must(t, rows.Err())
	if n < 10 {
		t.Fatalf("only %d audit entries: the changes above were not all recorded\n%s", n, dump.String())
	}
	res = call(t, "GET", srv.URL+"/api/v1/audit?limit=200", op, nil)
	want(t, res, http.StatusOK)
	for _, s := range secrets {
		if len(s) < 8 {
			t.Fatalf("suspiciously short secret %q", s)
		}
		if strings.Contains(dump.String(), s) {
			t.Errorf("the audit log holds a secret (%s…)", s[:6])
		}
		if strings.Contains(string(res.Body), s) {
			t.Errorf("GET /audit shows a secret (%s…)", s[:6])
		}
	}
	for _, action := range []string{"user.create", "seed.demo", "key.create", "key.rotate", "key.revoke",
		"service_token.create", "user.login", "user.logout", "tenant.create"} {
		if !strings.Contains(dump.String(), `"action":"`+action+`"`) {
			t.Errorf("no %s entry in the audit log", action)
		}
	}
}

// TestUsersSessionsRevokeAndDisableCLI: the CLI ends a user's sessions, or
// disables the user (which ends them too), and audits both.
func TestUsersSessionsRevokeAndDisableCLI(t *testing.T) {
	ctx := context.Background()
	dbURL := testenv.DatabaseURL(t)
	srv := startAdmin(t, dbURL, nil)
	u := createUser(t, srv.DB, "ops@example.com", auth.RoleOperator, "")
	other := sessionFor(t, srv.DB, createUser(t, srv.DB, "other@example.com", auth.RoleOperator, ""))
	me := srv.URL + "/api/v1/me"
	sessions := []string{sessionFor(t, srv.DB, u), sessionFor(t, srv.DB, u)}

	out, err := runAdmin(t, dbURL, "", "users", "sessions", "revoke", "--email", "OPS@example.com")
	testenv.Must(t, err)
	if !strings.Contains(out, "2 sessions") {
		t.Errorf("output %q, want it to say 2 sessions ended", out)
	}
	for _, token := range sessions {
		want(t, call(t, "GET", me, token, nil), http.StatusUnauthorized)
	}
	// The user may log in again.
	res := call(t, "POST", srv.URL+"/api/v1/login", "", map[string]string{"email": u.Email, "password": "password-" + u.Email})
	want(t, res, http.StatusOK)
	var lr adminapi.LoginResponse
	res.Decode(t, &lr)

	out, err = runAdmin(t, dbURL, "", "users", "disable", "--email", "ops@example.com")
	testenv.Must(t, err)
	var disabled auth.User
	if err := json.Unmarshal([]byte(out), &disabled); err != nil || disabled.DisabledAt == nil || disabled.ID != u.ID {
		t.Errorf("users disable printed %q (%v), want the disabled user", out, err)
	}
	want(t, call(t, "GET", me, lr.Token, nil), http.StatusUnauthorized)
	want(t, call(t, "POST", srv.URL+"/api/v1/login", "", map[string]string{"email": u.Email, "password": "password-" + u.Email}),
		http.StatusUnauthorized)
	want(t, call(t, "GET", me, other, nil), http.StatusOK)

	rows, err := srv.DB.Query(ctx, `SELECT action || ' ' || coalesce(after::text, '') FROM audit_log
		WHERE actor = 'cli' AND target_type = 'user' AND target_id = $1 ORDER BY id`, u.ID)
	testenv.Must(t, err)
	var entries []string
	for rows.Next() {
		var e string
		testenv.Must(t, rows.Scan(&e))
		entries = append(entries, e)
	}
	testenv.Must(t, rows.Err())
	// Disabling is one change with one entry, which counts the sessions
	// it ended.
	if len(entries) != 2 || entries[0] != `user.sessions_revoke {"sessions_ended": 2}` ||
		!strings.HasPrefix(entries[1], "user.disable ") || !strings.Contains(entries[1], "disabled_at") ||
		!strings.Contains(entries[1], `"sessions_ended": 1`) {
		t.Errorf("audit entries = %q", entries)
	}

	for _, args := range [][]string{
		{"users", "disable"},
		{"users", "disable", "--email", "nobody@example.com"},
		{"users", "sessions", "revoke"},
		{"users", "sessions", "revoke", "--email", "nobody@example.com"},
	} {
		if _, err := runAdmin(t, dbURL, "", args...); err == nil {
			t.Errorf("admin %s succeeded", strings.Join(args, " "))
		}
	}
}
