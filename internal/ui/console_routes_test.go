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
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
)

// routesFixture is an admin server with the tenants of
// admintest.Isolation, and a webhook endpoint of the foreign tenant's own.
type routesFixture struct {
	srv *admintest.Server
	admintest.Isolation
	foreignEndpoint string
}

func newRoutesFixture(t *testing.T) *routesFixture {
	t.Helper()
	fx := &routesFixture{srv: admintest.StartAdmin(t, testenv.DatabaseURL(t), nil)}
	fx.Isolation = admintest.SeedIsolation(t, fx.srv.DB)
	e, err := events.NewOps(fx.srv.DB, nil, events.Guard{AllowPrivate: true}).CreateEndpoint(context.Background(), audit.CLI, fx.Foreign.ID,
		events.EndpointInput{URL: "http://127.0.0.1:9/foreign-secret-hook"})
	testenv.Must(t, err)
	fx.foreignEndpoint = e.Endpoint.ID
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
	params := strings.NewReplacer("{tenantID}", fx.Foreign.ID, "{keyID}", fx.ForeignKey.ID,
		"{planID}", fmt.Sprint(fx.Pro.ID), "{userID}", fx.Operator.ID, "{tokenID}", "00000000-0000-0000-0000-000000000000",
		"{month}", "2026-10", "{endpointID}", fx.foreignEndpoint, "*", "console.css")
	// Own tenant, foreign endpoint.
	ownTenant := strings.NewReplacer("{tenantID}", fx.Own.ID, "{endpointID}", fx.foreignEndpoint)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	before := fx.auditCount(t)
	for _, u := range []auth.User{fx.Admin, fx.Viewer} {
		r := u.Role
		token := admintest.SessionFor(t, fx.srv.DB, u)
		get := func(path string) admintest.Response {
			req, _ := http.NewRequest("GET", fx.srv.URL+path, nil)
			req.AddCookie(&http.Cookie{Name: adminapi.SessionCookie, Value: token})
			return admintest.SendWith(t, client, req)
		}
		m := csrfInput.FindSubmatch(get("/tenants/" + fx.Own.ID).Body)
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
					form := url.Values{"confirmed": {"yes"}, "name": {"x"}, "plan_id": {fmt.Sprint(fx.Free.ID)}}
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
				for _, secret := range []string{fx.Foreign.Name, "foreign secret project", "admin@foreign.example.com", "foreign-secret-hook"} {
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
