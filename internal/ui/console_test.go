package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
	"github.com/tollgate/tollgate/internal/usage"
)

// The web console, driven through a real browser against a real admin
// server (and, where checks matter, a real check API): what operators and
// tenant users do, and what they must not be able to do.

func TestMain(m *testing.M) { admintest.Main(m) }

// signIn signs the browser in through the console's sign-in form.
func (b *browser) signIn(email, password string) {
	b.t.Helper()
	b.open("/login")
	b.fill(map[string]string{`input[name="email"]`: email, `input[name="password"]`: password})
	b.click(`form[action="/login"] button[type="submit"]`, "nav.mainnav")
}

// signedInAs makes a user with role (of tenantID; "" for an operator)
// and returns a browser signed in as that user.
func signedInAs(t *testing.T, admin *admintest.Server, email string, role auth.Role, tenantID string) *browser {
	t.Helper()
	admintest.CreateUser(t, admin.DB, email, role, tenantID)
	b := newBrowser(t, admin.URL)
	b.signIn(email, "password-"+email)
	return b
}

// confirmDialogs makes the page's confirmation dialogs answer yes (or
// no): headless, nobody clicks them. The script then posts confirmed=yes.
func (b *browser) confirmDialogs(yes bool) {
	b.t.Helper()
	eval[bool](b, fmt.Sprintf("window.confirm = () => %v, true", yes))
}

// csrf returns the page's CSRF token (every page has one, in the
// sign-out form).
func (b *browser) csrf() string {
	b.t.Helper()
	return eval[string](b, `document.querySelector('input[name="csrf"]').value`)
}

// html returns the current page's HTML.
func (b *browser) html() string {
	b.t.Helper()
	return eval[string](b, `document.documentElement.outerHTML`)
}

// number reads the integer shown by sel ("1,234").
func (b *browser) number(sel string) int64 {
	b.t.Helper()
	s := strings.ReplaceAll(b.text(sel), ",", "")
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		b.t.Fatalf("%s shows %q, not a number", sel, s)
	}
	return n
}

var planPath = regexp.MustCompile(`^/plans/(\d+)$`)

// TestConsoleOperatorFlow: an operator signs in, creates a plan with two
// rules through the form, a tenant on it and a service token, issues a
// key and reads its secret once; a check with the key on a running check
// API is allowed; the operator revokes the key in the console and the
// check is denied within a second.
func TestConsoleOperatorFlow(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	admin := admintest.StartAdmin(t, dbURL, nil)
	b := signedInAs(t, admin, "ops@example.com", auth.RoleOperator, "")

	// A plan with two rules: the second added with "Add a rule".
	b.open("/plans/new")
	b.fill(map[string]string{`input[name="name"]`: "gold", `input[name="display_name"]`: "Gold",
		`input[name="included_units"]`: "50000", `input[name="rules[0].name"]`: "hourly",
		`input[name="rules[0].limit"]`: "1000", `input[name="rules[0].period"]`: "1"})
	b.click(`button[value="add-rule"]`, `input[name="rules[1].name"]`)
	if got := eval[string](b, `document.querySelector('input[name="rules[0].name"]').value`); got != "hourly" {
		t.Fatalf("adding a rule lost the first one's values: name %q", got)
	}
	b.fill(map[string]string{`input[name="rules[1].name"]`: "search", `select[name="rules[1].algorithm"]`: "token_bucket",
		`input[name="rules[1].limit"]`: "10", `input[name="rules[1].period"]`: "1", `select[name="rules[1].period_unit"]`: "s",
		`input[name="rules[1].burst"]`: "20", `input[name="rules[1].resource"]`: "POST /v1/search"})
	b.click(`button[value="save"]`, ".flash")
	m := planPath.FindStringSubmatch(b.location())
	if m == nil {
		t.Fatalf("after creating the plan: at %s", b.location())
	}
	planID, _ := strconv.ParseInt(m[1], 10, 64)
	p, err := plans.NewStore(admin.DB).Get(context.Background(), planID)
	testenv.Must(t, err)
	if len(p.Rules) != 2 || p.Rules[1].Algorithm != limiter.TokenBucket || p.Rules[1].Burst != 20 ||
		p.Rules[1].PeriodUS != limiter.SecondUS || p.Rules[0].PeriodUS != limiter.HourUS || p.IncludedUnits != 50000 {
		t.Fatalf("stored plan: %+v", p)
	}
	if n := b.count(".rule svg.chart"); n != 2 {
		t.Errorf("%d rule previews, want 2", n)
	}
	b.screenshot("plan")

	// A tenant on it.
	b.open("/tenants")
	b.click("details.disclosure > summary", `input[name="name"]`)
	b.fill(map[string]string{`input[name="name"]`: "acme", `select[name="plan_id"]`: m[1]})
	b.click(`form[action="/tenants"] button[type="submit"]`, ".flash")
	tenant, err := tenants.NewStore(admin.DB).GetByName(context.Background(), "acme")
	testenv.Must(t, err)
	if b.location() != "/tenants/"+tenant.ID || tenant.PlanID != planID {
		t.Fatalf("tenant %+v; page %s", tenant, b.location())
	}

	// A service token for the check API, shown once.
	b.open("/service-tokens")
	b.click("details.disclosure > summary", `input[name="name"]`)
	b.fill(map[string]string{`input[name="name"]`: "edge"})
	b.click(`form[action="/service-tokens"] button[type="submit"]`, "#secret")
	token := b.text("#secret")

	// A key, its secret shown once.
	keys := "/tenants/" + tenant.ID + "/keys"
	b.open(keys)
	b.click("details.disclosure > summary", `input[name="name"]`)
	b.fill(map[string]string{`input[name="name"]`: "production"})
	b.click(`form[action="`+keys+`"] button[type="submit"]`, "#secret")
	secret := b.text("#secret")
	if !tenants.WellFormed(secret) || b.count(`[data-copy="secret"]`) != 1 || !strings.Contains(b.text(".notice"), "only time") {
		t.Fatalf("the secret page: %q\n%s", secret, b.pageText())
	}
	b.screenshot("key-secret")
	b.open(keys)
	if strings.Contains(b.html(), secret) || strings.Contains(b.html(), secret[len(secret)-12:]) {
		t.Fatal("the keys page shows the secret again")
	}
	if !strings.Contains(b.text("tbody"), "production") || b.count(`tbody tr[data-key]`) != 1 {
		t.Fatalf("keys page: %s", b.text("tbody"))
	}

	checks := admintest.CheckClient{URL: admintest.StartCheckAPI(t, dbURL, nil), Token: token}
	if status, d := checks.Check(t, secret); status != http.StatusOK || !d.Allowed {
		t.Fatalf("check with the new key: %d %+v", status, d)
	}

	// Revoke: the dialog says no, then yes.
	b.confirmDialogs(false)
	b.press(`tbody tr[data-key] form[action$="/revoke"] button`)
	if status, d := checks.Check(t, secret); status != http.StatusOK || !d.Allowed {
		t.Fatalf("the key was revoked although the dialog said no: %+v", d)
	}
	b.confirmDialogs(true)
	b.click(`tbody tr[data-key] form[action$="/revoke"] button`, ".flash")
	revoked := time.Now()
	admintest.Eventually(t, revoked, "key_revoked", func() (bool, string) {
		_, d := checks.Check(t, secret)
		return !d.Allowed && d.Reason == tollgate.ReasonKeyRevoked, d.Reason
	})
	if !strings.Contains(b.text("tbody"), "revoked") {
		t.Errorf("the revoked key's badge: %s", b.text("tbody"))
	}
	b.screenshot("keys")
}

// TestConsolePlanFormErrors: a rule form with bad values shows each
// problem beside its field and saves nothing.
func TestConsolePlanFormErrors(t *testing.T) {
	admin := admintest.StartAdmin(t, testenv.DatabaseURL(t), nil)
	b := signedInAs(t, admin, "ops@example.com", auth.RoleOperator, "")
	countPlans := func() int {
		var n int
		testenv.Must(t, admin.DB.QueryRow(context.Background(), `SELECT count(*) FROM plans`).Scan(&n))
		return n
	}
	fieldError := func(input string) string {
		return eval[string](b, fmt.Sprintf(`(() => { const f = document.querySelector('[name=%q]').closest('.field');
			const e = f && f.querySelector('.field-error'); return e ? e.textContent : ""; })()`, input))
	}

	// Values the API refuses: the API's field errors, beside the fields.
	b.open("/plans/new")
	b.fill(map[string]string{`input[name="name"]`: "Not A Name", `input[name="rules[0].name"]`: "hourly",
		`input[name="rules[0].limit"]`: "0", `input[name="rules[0].period"]`: "1", `input[name="rules[0].burst"]`: "-3",
		`input[name="rules[0].resource"]`: "GET repos"})
	b.click(`button[value="save"]`, ".alert")
	for _, f := range []string{"name", "rules[0].limit", "rules[0].burst", "rules[0].resource"} {
		if fieldError(f) == "" {
			t.Errorf("no error beside %s", f)
		}
	}
	if got := eval[string](b, `document.querySelector('input[name="rules[0].resource"]').value`); got != "GET repos" {
		t.Errorf("the refused form lost its values: resource %q", got)
	}
	b.screenshot("plan-form-errors")

	// A value that is no number at all is caught before the API.
	b.open("/plans/new")
	b.fill(map[string]string{`input[name="name"]`: "fine", `input[name="rules[0].name"]`: "hourly",
		`input[name="rules[0].limit"]`: "ten", `input[name="rules[0].period"]`: "1"})
	b.click(`button[value="save"]`, ".alert")
	if got := fieldError("rules[0].limit"); got != "must be a whole number" {
		t.Errorf("limit \"ten\": %q", got)
	}
	if n := countPlans(); n != 0 {
		t.Fatalf("%d plans stored from refused forms", n)
	}

	// Routes: one a line; a bad one is named beside the textarea, and the
	// saved ones are listed on the plan's page in their order.
	b.open("/plans/new")
	b.fill(map[string]string{`input[name="name"]`: "routed", `textarea[name="routes"]`: "GET /items/{id}\n\nGET /items/"})
	b.click(`button[value="save"]`, ".alert")
	if got := fieldError("routes"); !strings.Contains(got, "route 2") {
		t.Errorf("bad route: error %q, want route 2 named", got)
	}
	if n := countPlans(); n != 0 {
		t.Fatalf("%d plans stored from a refused route", n)
	}
	b.fill(map[string]string{`textarea[name="routes"]`: "GET /items/{id}\n* /static/*"})
	b.click(`button[value="save"]`, ".flash")
	if got := b.text("#routes"); !strings.Contains(got, "GET /items/{id}") || !strings.Contains(got, "* /static/*") ||
		strings.Index(got, "GET /items/{id}") > strings.Index(got, "* /static/*") {
		t.Errorf("the plan page's routes: %q", got)
	}
}

// tenantSetup makes two tenants on one plan, each with a key, and returns
// them with their keys.
func tenantSetup(t *testing.T, admin *admintest.Server) (acme, globex tenants.Tenant, acmeKey, globexKey tenants.Key) {
	t.Helper()
	p := fixture.Plan(t, admin.DB, plans.Plan{Name: "pro", IncludedUnits: 1000,
		Rules: []plans.Rule{{Name: "hourly", Limit: 100, PeriodUS: limiter.HourUS}}})
	acme, globex = fixture.Tenant(t, admin.DB, "acme", p.ID), fixture.Tenant(t, admin.DB, "globex", p.ID)
	_, acmeKey = fixture.Key(t, admin.DB, acme.ID, "acme web")
	_, globexKey = fixture.Key(t, admin.DB, globex.ID, "globex web")
	return acme, globex, acmeKey, globexKey
}

// TestConsoleTenantAdmin: a tenant admin sees its own tenant's keys,
// usage and statements only, issues and revokes its own keys, and gets
// "not found" for another tenant's pages.
func TestConsoleTenantAdmin(t *testing.T) {
	admin := admintest.StartAdmin(t, testenv.DatabaseURL(t), nil)
	acme, globex, acmeKey, globexKey := tenantSetup(t, admin)
	b := signedInAs(t, admin, "admin@acme.example", auth.RoleTenantAdmin, acme.ID)
	if loc := b.location(); loc != "/tenants/"+acme.ID {
		t.Fatalf("a tenant admin lands on %s, want its tenant", loc)
	}
	b.screenshot("portal")
	home := "/tenants/" + acme.ID
	for _, path := range []string{home, home + "/keys", home + "/usage", home + "/statements"} {
		b.open(path)
		if h := b.text("h1"); strings.Contains(h, "Not found") || strings.Contains(h, "went wrong") {
			t.Fatalf("%s: %s", path, h)
		}
		if html := b.html(); strings.Contains(html, globex.ID) || strings.Contains(html, "globex") {
			t.Errorf("%s shows something of globex", path)
		}
	}
	b.open(home + "/keys")
	if !strings.Contains(b.text("tbody"), acmeKey.Prefix) || strings.Contains(b.html(), globexKey.Prefix) {
		t.Fatalf("keys page: %s", b.text("tbody"))
	}

	// Its own key: issued, shown once, revoked.
	b.click("details.disclosure > summary", `input[name="name"]`)
	b.fill(map[string]string{`input[name="name"]`: "ci"})
	b.click(`form[action="`+home+`/keys"] button[type="submit"]`, "#secret")
	if !tenants.WellFormed(b.text("#secret")) {
		t.Fatalf("secret page: %s", b.pageText())
	}
	b.open(home + "/keys")
	if n := b.count("tbody tr[data-key]"); n != 2 {
		t.Fatalf("%d keys listed, want 2", n)
	}
	b.confirmDialogs(true)
	b.click(`tbody tr[data-key]:first-child form[action$="/revoke"] button`, ".flash")
	if !strings.Contains(b.text(".flash"), "revoked") {
		t.Errorf("after revoking: %s", b.text(".flash"))
	}

	// Another tenant, and operators' pages.
	for path, status := range map[string]int{
		"/tenants/" + globex.ID:                              http.StatusNotFound,
		"/tenants/" + globex.ID + "/keys":                    http.StatusNotFound,
		"/tenants/" + globex.ID + "/usage":                   http.StatusNotFound,
		"/tenants/" + globex.ID + "/statements/2026-01":      http.StatusNotFound,
		"/tenants/00000000-0000-0000-0000-000000000000/keys": http.StatusNotFound,
		"/tenants": http.StatusForbidden,
		"/plans":   http.StatusForbidden,
		"/audit":   http.StatusForbidden,
		"/api/v1/statements/" + globex.ID + "/2026-01?format=csv": http.StatusNotFound,
	} {
		if got := b.status("GET", path, ""); got != status {
			t.Errorf("GET %s = %d, want %d", path, got, status)
		}
	}
	b.open("/tenants/" + globex.ID)
	if h := b.text("h1"); h != "Not found" {
		t.Errorf("another tenant's page: %q", h)
	}
	token := b.csrf()
	if got := b.status("POST", "/tenants/"+globex.ID+"/keys", "csrf="+token+"&name=x"); got != http.StatusNotFound {
		t.Errorf("issuing a key for another tenant: %d, want 404", got)
	}
	if got := b.status("POST", "/tenants/"+globex.ID+"/keys/"+globexKey.ID+"/revoke", "csrf="+token+"&confirmed=yes"); got != http.StatusNotFound {
		t.Errorf("revoking another tenant's key: %d, want 404", got)
	}
	k, err := tenants.NewStore(admin.DB).GetKey(context.Background(), globex.ID, globexKey.ID)
	testenv.Must(t, err)
	if k.RevokedAt != nil {
		t.Fatal("another tenant's key was revoked")
	}
}

// TestConsoleTenantViewer: a tenant viewer has no button that changes
// anything, and a forged POST is refused.
func TestConsoleTenantViewer(t *testing.T) {
	admin := admintest.StartAdmin(t, testenv.DatabaseURL(t), nil)
	acme, _, acmeKey, _ := tenantSetup(t, admin)
	b := signedInAs(t, admin, "viewer@acme.example", auth.RoleTenantViewer, acme.ID)
	home := "/tenants/" + acme.ID
	for _, path := range []string{home, home + "/keys", home + "/usage", home + "/statements", home + "/alerts"} {
		b.open(path)
		// The one form that posts is signing out.
		if n := b.count(`main form[method="post"]`); n != 0 {
			t.Errorf("%s: %d forms that change something", path, n)
		}
		if n := b.count(`main button.btn-danger, main button.btn-primary`); n != 0 {
			t.Errorf("%s: %d action buttons", path, n)
		}
	}
	b.open(home + "/keys")
	if !strings.Contains(b.text("tbody"), acmeKey.Prefix) {
		t.Fatalf("the viewer does not see its tenant's key: %s", b.text("tbody"))
	}
	token := b.csrf()
	for path, body := range map[string]string{
		home + "/keys":                           "name=forged",
		home + "/keys/" + acmeKey.ID + "/revoke": "confirmed=yes",
		home + "/keys/" + acmeKey.ID + "/rotate": "grace_period_s=0",
		home + "/suspend":                        "confirmed=yes",
		home + "/alerts/spend-cap":               "spend_cap_minor=0",
		home + "/alerts/thresholds":              "thresholds[0].kind=units&thresholds[0].value=5",
		home + "/webhooks":                       "url=http://127.0.0.1:9/forged",
		"/tenants":                               "name=forged",
	} {
		if got := b.status("POST", path, "csrf="+token+"&"+body); got != http.StatusForbidden {
			t.Errorf("forged POST %s = %d, want 403", path, got)
		}
	}
	list, err := tenants.NewStore(admin.DB).ListKeys(context.Background(), acme.ID)
	testenv.Must(t, err)
	if len(list) != 1 || list[0].RevokedAt != nil {
		t.Fatalf("after forged posts the tenant's keys are %+v", list)
	}
}

// TestConsoleCSRF: a form posted without its token, or with another
// session's, is refused and changes nothing; pages carry the security
// headers.
func TestConsoleCSRF(t *testing.T) {
	admin := admintest.StartAdmin(t, testenv.DatabaseURL(t), nil)
	acme, _, acmeKey, _ := tenantSetup(t, admin)
	other := signedInAs(t, admin, "ops@example.com", auth.RoleOperator, "")
	stolen := other.csrf()

	b := newBrowser(t, admin.URL)
	b.signIn("ops@example.com", "password-ops@example.com")
	revoke := "/tenants/" + acme.ID + "/keys/" + acmeKey.ID + "/revoke"
	for name, body := range map[string]string{
		"no token":                "confirmed=yes",
		"an empty token":          "csrf=&confirmed=yes",
		"another session's token": "csrf=" + stolen + "&confirmed=yes",
	} {
		if got := b.status("POST", revoke, body); got != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, got)
		}
	}
	if got := b.status("POST", "/tenants", "name=sneaky&plan_id=1"); got != http.StatusForbidden {
		t.Errorf("creating a tenant without a token: %d, want 403", got)
	}
	k, err := tenants.NewStore(admin.DB).GetKey(context.Background(), acme.ID, acmeKey.ID)
	testenv.Must(t, err)
	if k.RevokedAt != nil {
		t.Fatal("a form without its token revoked the key")
	}
	// Without the script's dialog, a destructive form asks on a page of
	// its own first.
	if got := b.status("POST", revoke, "csrf="+b.csrf()); got != http.StatusOK {
		t.Errorf("revoking unconfirmed: %d, want the confirmation page", got)
	}
	if k, _ = tenants.NewStore(admin.DB).GetKey(context.Background(), acme.ID, acmeKey.ID); k.RevokedAt != nil {
		t.Fatal("an unconfirmed revocation revoked the key")
	}

	headers := eval[map[string]string](b, `fetch("/tenants").then(r => Object.fromEntries(
		["content-security-policy", "x-content-type-options", "referrer-policy", "cache-control", "x-frame-options"]
		.map(h => [h, r.headers.get(h) || ""])))`)
	for h, want := range map[string]string{"content-security-policy": "frame-ancestors 'none'", "x-content-type-options": "nosniff",
		"referrer-policy": "same-origin", "cache-control": "no-store", "x-frame-options": "DENY"} {
		if !strings.Contains(headers[h], want) {
			t.Errorf("%s: %q, want %q in it", h, headers[h], want)
		}
	}
	if csp := headers["content-security-policy"]; strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	if n := b.count("script:not([src]), [style]"); n != 0 {
		t.Errorf("%d inline scripts or style attributes", n)
	}
}

// TestConsoleUsageMatchesChecks drives known traffic through a real
// check API, lets the admin server's usage worker apply it, and finds on
// the tenant's usage page exactly what the client saw: allowed and
// rejected checks, in all, by resource (the plan's route each path
// matched) and by key.
func TestConsoleUsageMatchesChecks(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	_, prefix := testenv.Redis(t)
	stream := prefix + "usage"
	// The worker drains the journals under the api's key prefix.
	admin := admintest.StartAdmin(t, dbURL, map[string]string{"TOLLGATE_SERVE_WORKER": "true",
		"TOLLGATE_REDIS_ADDR": testenv.RedisAddr(t), "TOLLGATE_USAGE_STREAM": stream, "TOLLGATE_USAGE_CONSUMER": "console-test",
		"TOLLGATE_KEY_PREFIX": prefix})
	p := fixture.Plan(t, admin.DB, plans.Plan{Name: "metered", IncludedUnits: 100,
		Rules:  []plans.Rule{{Name: "hourly", Limit: 5, PeriodUS: limiter.HourUS}},
		Routes: []string{"GET /repos/{id}", "POST /v1/search"}})
	acme := fixture.Tenant(t, admin.DB, "acme", p.ID)
	webSecret, web := fixture.Key(t, admin.DB, acme.ID, "web")
	searchSecret, search := fixture.Key(t, admin.DB, acme.ID, "search")
	op := admintest.SessionFor(t, admin.DB, admintest.CreateUser(t, admin.DB, "ops@example.com", auth.RoleOperator, ""))
	var st struct {
		Token string `json:"token"`
	}
	res := admintest.Call(t, "POST", admin.URL+"/api/v1/service-tokens", op, map[string]any{"name": "gateway"})
	admintest.Want(t, res, http.StatusCreated)
	res.Decode(t, &st)
	api := admintest.StartCheckAPI(t, dbURL, []string{"TOLLGATE_USAGE_STREAM=" + stream, "TOLLGATE_USAGE_FLUSH=100ms",
		"TOLLGATE_KEY_PREFIX=" + prefix})

	// What the client sees, by key and resource.
	type seen struct{ allowed, rejected int64 }
	byKey, byResource := map[string]*seen{}, map[string]*seen{}
	var total seen
	traffic := []struct {
		key      tenants.Key
		secret   string
		resource string
		n        int
	}{{web, webSecret, "GET /repos/{id}", 8}, {search, searchSecret, "POST /v1/search", 2}}
	for _, tr := range traffic {
		for i := range tr.n {
			// Each check names its own path; the page counts the route.
			resource := strings.Replace(tr.resource, "{id}", strconv.Itoa(i), 1)
			res := admintest.Call(t, "POST", api+"/v1/check", st.Token, map[string]any{"key": tr.secret, "resource": resource})
			admintest.Want(t, res, http.StatusOK)
			var d struct {
				Allowed bool `json:"allowed"`
			}
			res.Decode(t, &d)
			for _, s := range []*seen{&total, entry(byKey, tr.key.Prefix), entry(byResource, tr.resource)} {
				if d.Allowed {
					s.allowed++
				} else {
					s.rejected++
				}
			}
		}
	}
	if total.allowed != 7 || total.rejected != 3 {
		t.Fatalf("the client saw %d allowed and %d rejected, want 7 and 3", total.allowed, total.rejected)
	}

	b := newBrowser(t, admin.URL)
	b.signIn("ops@example.com", "password-ops@example.com")
	usage := "/tenants/" + acme.ID + "/usage"
	// The worker applies batches every second or so: the page is opened
	// again until it shows them.
	testenv.Eventually(t, time.Now(), 30*time.Second, "the usage page showing what the client saw", func() (bool, string) {
		b.open(usage)
		allowed, rejected := b.number("#allowed"), b.number("#rejected")
		return allowed == total.allowed && rejected == total.rejected,
			fmt.Sprintf("the page shows %d allowed and %d rejected; the client saw %d and %d", allowed, rejected, total.allowed, total.rejected)
	})
	table := func(section string) map[string][2]int64 {
		rows := eval[[][]string](b, `Array.from(document.querySelectorAll("`+section+` table.chart-table tbody tr"))
			.map(tr => Array.from(tr.children).map(c => c.textContent))`)
		out := map[string][2]int64{}
		for _, r := range rows {
			a, _ := strconv.ParseInt(strings.ReplaceAll(r[1], ",", ""), 10, 64)
			d, _ := strconv.ParseInt(strings.ReplaceAll(r[2], ",", ""), 10, 64)
			out[r[0]] = [2]int64{a, d}
		}
		return out
	}
	resources := table("#by-resource")
	for res, s := range byResource {
		if got := resources[res]; got != [2]int64{s.allowed, s.rejected} {
			t.Errorf("%s: the page shows %v (allowed, rejected), the client saw %d, %d", res, got, s.allowed, s.rejected)
		}
	}
	keys := table("#by-key")
	for prefix, s := range byKey {
		var found bool
		for label, got := range keys {
			if strings.HasPrefix(label, prefix) {
				found = true
				if got != [2]int64{s.allowed, s.rejected} {
					t.Errorf("key %s: the page shows %v, the client saw %d, %d", prefix, got, s.allowed, s.rejected)
				}
			}
		}
		if !found {
			t.Errorf("key %s is not on the page: %v", prefix, keys)
		}
	}
	b.screenshot("usage")
}

// entry returns m[k], made when missing.
func entry[K comparable, V any](m map[K]*V, k K) *V {
	if m[k] == nil {
		m[k] = new(V)
	}
	return m[k]
}

// TestConsolePagesWithDemoData seeds the demo (`admin seed demo`), then
// visits every page of the console as the demo operator and as the demo
// tenant admin, in light and dark mode: each answers 200 with its page,
// not an error. With TOLLGATE_SCREENSHOTS=docs/screenshots it refreshes
// the README's screenshots.
func TestConsolePagesWithDemoData(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	out, err := admintest.RunAdmin(t, dbURL, "seed", "demo", "--json")
	testenv.Must(t, err)
	var seeded struct {
		Users map[string]struct{ Email, Password string } `json:"users"`
	}
	if err := json.Unmarshal([]byte(out), &seeded); err != nil {
		t.Fatal(err)
	}
	_, prefix := testenv.Redis(t)
	admin := admintest.StartAdmin(t, dbURL, map[string]string{"TOLLGATE_SERVE_WORKER": "true", "TOLLGATE_REDIS_ADDR": testenv.RedisAddr(t),
		"TOLLGATE_USAGE_STREAM": prefix + "usage", "TOLLGATE_USAGE_CONSUMER": "pages"})
	ctx := context.Background()
	pro, err := tenants.NewStore(admin.DB).GetByName(ctx, "demo-pro")
	testenv.Must(t, err)
	proPlan, err := plans.NewStore(admin.DB).GetByName(ctx, "pro")
	testenv.Must(t, err)
	now := time.Now().UTC()
	month := now.Format("2006-01")
	tenantPages := []struct{ name, path string }{
		{"portal", "/tenants/" + pro.ID},
		{"tenant-keys", "/tenants/" + pro.ID + "/keys"},
		{"tenant-usage", "/tenants/" + pro.ID + "/usage"},
		{"statements", "/tenants/" + pro.ID + "/statements"},
		{"statement", "/tenants/" + pro.ID + "/statements/" + month},
		{"alerts", "/tenants/" + pro.ID + "/alerts"},
	}
	visit := func(b *browser, name, path string, shoot bool) {
		t.Helper()
		if status := b.status("GET", path, ""); status != http.StatusOK {
			t.Errorf("GET %s = %d", path, status)
			return
		}
		b.open(path)
		if h := b.text("h1"); strings.Contains(h, "Not found") || strings.Contains(h, "went wrong") || strings.Contains(h, "Not allowed") {
			t.Errorf("%s: %q", path, h)
		}
		if shoot {
			b.screenshot(name)
		}
	}
	// visitBothThemes visits pages in the light theme and then in the
	// dark one (named name+"-dark"), shooting every light page and the
	// dark ones named in darkShots; after runs after each theme's pages.
	visitBothThemes := func(b *browser, pages []struct{ name, path string }, darkShots []string, after func()) {
		t.Helper()
		for _, dark := range []bool{false, true} {
			b.darkMode(dark)
			for _, p := range pages {
				name := p.name
				if dark {
					name += "-dark"
				}
				visit(b, name, p.path, !dark || slices.Contains(darkShots, p.name))
			}
			after()
		}
	}

	op := seeded.Users["operator"]
	b := newBrowser(t, admin.URL)
	b.signIn(op.Email, op.Password)
	operatorPages := []struct{ name, path string }{
		{"overview", "/"},
		{"plans", "/plans"},
		{"plan-demo", fmt.Sprintf("/plans/%d", proPlan.ID)},
		{"plan-edit", fmt.Sprintf("/plans/%d/edit", proPlan.ID)},
		{"plan-new", "/plans/new"},
		{"tenants", "/tenants"},
		{"tenant", "/tenants/" + pro.ID},
		{"overrides", "/tenants/" + pro.ID + "/overrides"},
		{"all-keys", "/keys"},
		{"usage-all", "/usage"},
		{"usage-last-month", "/usage?month=" + usage.MonthOf(now.AddDate(0, -1, 0)).String()},
		{"service-tokens", "/service-tokens"},
		{"users", "/users"},
		{"audit", "/audit"},
		{"webhooks", "/webhooks"},
		{"webhook", "/webhooks/" + demoEndpoint(t, admin)},
	}
	visitBothThemes(b, operatorPages, []string{"overview", "plan-demo"}, func() {
		for _, p := range tenantPages[1:] {
			visit(b, p.name+"-operator", p.path, false)
		}
	})

	ta := seeded.Users["tenant_admin"]
	portal := newBrowser(t, admin.URL)
	portal.signIn(ta.Email, ta.Password)
	visitBothThemes(portal, tenantPages, []string{"portal"}, func() {})
}

// demoEndpoint returns the ID of the demo's operator endpoint.
func demoEndpoint(t *testing.T, admin *admintest.Server) string {
	t.Helper()
	var id string
	testenv.Must(t, admin.DB.QueryRow(context.Background(),
		`SELECT id::text FROM webhook_endpoints WHERE owner_tenant_id IS NULL ORDER BY created_at LIMIT 1`).Scan(&id))
	return id
}

// TestConsolePlanFormConcurrencyAndHolds: the plan form makes a
// concurrency rule (requests in flight, a lease TTL as its period) and a
// hold-based rule that settles at 0 on a 5xx; a bad lease TTL is named
// beside its field; the saved form shows the options again.
func TestConsolePlanFormConcurrencyAndHolds(t *testing.T) {
	admin := admintest.StartAdmin(t, testenv.DatabaseURL(t), nil)
	b := signedInAs(t, admin, "ops@example.com", auth.RoleOperator, "")
	b.open("/plans/new")
	b.fill(map[string]string{`input[name="name"]`: "llm", `input[name="rules[0].name"]`: "inflight",
		`select[name="rules[0].algorithm"]`: "concurrency", `input[name="rules[0].limit"]`: "4",
		`input[name="rules[0].period"]`: "2", `select[name="rules[0].period_unit"]`: "h"})
	b.click(`button[value="save"]`, ".alert")
	if got := eval[string](b, `(() => { const e = document.querySelector('[name="rules[0].period"]').closest('.field').querySelector('.field-error'); return e ? e.textContent : ""; })()`); !strings.Contains(got, "1 hour") {
		t.Errorf("a lease TTL of 2 h: error %q, want one naming the 1 hour bound", got)
	}
	b.fill(map[string]string{`input[name="rules[0].period"]`: "30", `select[name="rules[0].period_unit"]`: "s"})
	b.click(`button[value="add-rule"]`, `input[name="rules[1].name"]`)
	b.fill(map[string]string{`input[name="rules[1].name"]`: "tokens", `input[name="rules[1].limit"]`: "100000",
		`input[name="rules[1].period"]`: "1", `select[name="rules[1].period_unit"]`: "min"})
	b.press(`input[name="rules[1].hold"]`)
	b.press(`input[name="rules[1].refund_on"][value="5xx"]`)
	b.click(`button[value="save"]`, ".flash")
	m := planPath.FindStringSubmatch(b.location())
	if m == nil {
		t.Fatalf("after saving: at %s\n%s", b.location(), b.pageText())
	}
	id, _ := strconv.ParseInt(m[1], 10, 64)
	p, err := plans.NewStore(admin.DB).Get(context.Background(), id)
	testenv.Must(t, err)
	if len(p.Rules) != 2 {
		t.Fatalf("rules %+v, want 2", p.Rules)
	}
	if r := p.Rules[0]; r.Algorithm != limiter.Concurrency || r.Limit != 4 || r.PeriodUS != 30*limiter.SecondUS {
		t.Errorf("concurrency rule saved as %+v", r)
	}
	if r := p.Rules[1]; !r.Options.Hold || !reflect.DeepEqual(r.Options.RefundOn, []string{"5xx"}) {
		t.Errorf("hold rule saved with options %+v", r.Options)
	}
	b.open(fmt.Sprintf("/plans/%d/edit", id))
	if !eval[bool](b, `document.querySelector('input[name="rules[1].refund_on"][value="5xx"]').checked && !document.querySelector('input[name="rules[1].refund_on"][value="timeout"]').checked`) {
		t.Error("the edit form does not show refund_on as saved")
	}
}
