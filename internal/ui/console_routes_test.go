package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
)

// routesFixture is an admin server with two tenants: "own", with a
// tenant admin and a viewer, and "foreign", with a key, overrides and a
// user of its own that no answer to own's users may show.
type routesFixture struct {
	srv                     *admintest.Server
	free, pro               plans.Plan
	own, foreign            tenants.Tenant
	foreignKey              string
	foreignEndpoint         string // a webhook endpoint of foreign's own
	operator, admin, viewer auth.User
}

func newRoutesFixture(t *testing.T) *routesFixture {
	t.Helper()
	ctx := context.Background()
	fx := &routesFixture{srv: admintest.StartAdmin(t, testenv.DatabaseURL(t), nil)}
	db := fx.srv.DB
	ps, ts := plans.NewStore(db), tenants.NewStore(db)
	rules := func(limit int64) []plans.Rule {
		return []plans.Rule{{Name: "hourly", Limit: limit, PeriodUS: limiter.HourUS}}
	}
	var err error
	if fx.free, err = ps.Create(ctx, plans.Plan{Name: "free", Rules: rules(100)}); err == nil {
		fx.pro, err = ps.Create(ctx, plans.Plan{Name: "pro", Rules: rules(5000)})
	}
	testenv.Must(t, err)
	if fx.own, err = ts.Create(ctx, "own-tenant", fx.free.ID); err == nil {
		fx.foreign, err = ts.Create(ctx, "foreign-tenant", fx.pro.ID)
	}
	testenv.Must(t, err)
	_, key, err := ts.CreateKey(ctx, fx.foreign.ID, tenants.KeySpec{Name: "foreign secret project"})
	testenv.Must(t, err)
	fx.foreignKey = key.ID
	_, err = ts.SetOverrides(ctx, fx.foreign.ID, rules(1))
	testenv.Must(t, err)
	e, err := events.NewOps(db, nil, events.Guard{AllowPrivate: true}).CreateEndpoint(ctx, audit.CLI, fx.foreign.ID,
		events.EndpointInput{URL: "http://127.0.0.1:9/foreign-secret-hook"})
	testenv.Must(t, err)
	fx.foreignEndpoint = e.Endpoint.ID
	admintest.CreateUser(t, db, "admin@foreign.example.com", auth.RoleTenantAdmin, fx.foreign.ID)
	fx.operator = admintest.CreateUser(t, db, "ops@example.com", auth.RoleOperator, "")
	fx.admin = admintest.CreateUser(t, db, "admin@own.example.com", auth.RoleTenantAdmin, fx.own.ID)
	fx.viewer = admintest.CreateUser(t, db, "viewer@own.example.com", auth.RoleTenantViewer, fx.own.ID)
	return fx
}

func (fx *routesFixture) auditCount(t *testing.T) int {
	t.Helper()
	var n int
	testenv.Must(t, fx.srv.DB.QueryRow(context.Background(), `SELECT count(*) FROM audit_log`).Scan(&n))
	return n
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// TestConsoleRoutesIsolation walks every route of the console, as a tenant
// admin and as a tenant viewer of one tenant: a route under another
// tenant is "not found", an operator's route is "not allowed", whatever
// the method, with a valid CSRF token or without; a route under its own
// tenant naming another tenant's webhook endpoint is "not found" too (or
// "not allowed" for a viewer's change); and nothing changes.
func TestConsoleRoutesIsolation(t *testing.T) {
	fx := newRoutesFixture(t)
	routes := admintest.Routes(t, true)
	if len(routes) < 30 {
		t.Fatalf("only %d console routes: %v", len(routes), routes)
	}
	params := strings.NewReplacer("{tenantID}", fx.foreign.ID, "{keyID}", fx.foreignKey,
		"{planID}", fmt.Sprint(fx.pro.ID), "{userID}", fx.operator.ID, "{tokenID}", "00000000-0000-0000-0000-000000000000",
		"{month}", "2026-10", "{endpointID}", fx.foreignEndpoint, "*", "console.css")
	// Own tenant, foreign endpoint.
	ownTenant := strings.NewReplacer("{tenantID}", fx.own.ID, "{endpointID}", fx.foreignEndpoint)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	before := fx.auditCount(t)
	for _, u := range []auth.User{fx.admin, fx.viewer} {
		r := u.Role
		token := admintest.SessionFor(t, fx.srv.DB, u)
		get := func(path string) admintest.Response {
			req, _ := http.NewRequest("GET", fx.srv.URL+path, nil)
			req.AddCookie(&http.Cookie{Name: adminapi.SessionCookie, Value: token})
			return admintest.SendWith(t, client, req)
		}
		m := csrfInput.FindSubmatch(get("/tenants/" + fx.own.ID).Body)
		if m == nil {
			t.Fatalf("%s: no CSRF token on its tenant's page", r)
		}
		csrf := string(m[1])
		for _, rt := range routes {
			path := params.Replace(rt.Pattern)
			var want int
			switch {
			case rt.Pattern == "/static/*":
				want = http.StatusOK
			case rt.Pattern == "/" || rt.Pattern == "/login":
				want = http.StatusSeeOther // to its own tenant
			case rt.Pattern == "/logout":
				continue // ends the session; TestConsoleSignIn signs out
			case strings.HasPrefix(rt.Pattern, "/tenants/{tenantID}"):
				want = http.StatusNotFound
			default:
				want = http.StatusForbidden
			}
			if rt.Method == "POST" && (rt.Pattern == "/login") {
				continue
			}
			type try struct {
				path      string
				want      int
				withToken bool
			}
			tries := []try{{path, want, true}}
			if rt.Method != "GET" {
				tries = append(tries, try{path, http.StatusForbidden, false}) // the CSRF check comes first
			}
			if strings.Contains(rt.Pattern, "{tenantID}") && strings.Contains(rt.Pattern, "{endpointID}") {
				w := http.StatusNotFound
				if rt.Method != "GET" && r == auth.RoleTenantViewer {
					w = http.StatusForbidden
				}
				tries = append(tries, try{ownTenant.Replace(rt.Pattern), w, true})
			}
			for _, tr := range tries {
				path, withToken := tr.path, tr.withToken
				var res admintest.Response
				if rt.Method == "GET" {
					res = get(path)
				} else {
					form := url.Values{"confirmed": {"yes"}, "name": {"x"}, "plan_id": {fmt.Sprint(fx.free.ID)}}
					if withToken {
						form.Set("csrf", csrf)
					}
					req, _ := http.NewRequest(rt.Method, fx.srv.URL+path, strings.NewReader(form.Encode()))
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
					req.AddCookie(&http.Cookie{Name: adminapi.SessionCookie, Value: token})
					res = admintest.SendWith(t, client, req)
				}
				if res.StatusCode != tr.want {
					t.Errorf("%s %s as %s (token %v) = %d, want %d", rt.Method, path, r, withToken, res.StatusCode, tr.want)
				}
				for _, secret := range []string{fx.foreign.Name, "foreign secret project", "admin@foreign.example.com", "foreign-secret-hook"} {
					if strings.Contains(string(res.Body), secret) {
						t.Errorf("%s %s as %s: the answer mentions %q", rt.Method, path, r, secret)
					}
				}
			}
		}
	}
	if after := fx.auditCount(t); after != before {
		t.Errorf("tenant users' requests to other tenants and operators' pages left %d audit entries", after-before)
	}
}
