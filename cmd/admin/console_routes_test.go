package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/testenv"
)

// consoleRoute reports whether a route of the admin server is the web
// console's: everything but the API and the health checks.
func consoleRoute(route string) bool {
	return !strings.HasPrefix(route, "/api/") && route != "/healthz" && route != "/readyz" && route != "/metrics"
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// TestConsoleRoutesIsolation walks every route of the console, as a tenant
// admin and as a tenant viewer of one tenant: a route under another
// tenant is "not found", an operator's route is "not allowed", whatever
// the method, with a valid CSRF token or without; and nothing changes.
func TestConsoleRoutesIsolation(t *testing.T) {
	fx := newMatrixFixture(t)
	foreignKey := fx.foreignIDs[1]
	router := adminapi.NewHandler(adminapi.Config{DB: fx.srv.DB, Log: slog.New(slog.DiscardHandler)})
	type route struct{ method, pattern string }
	var routes []route
	testenv.Must(t, chi.Walk(router.(chi.Routes), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if consoleRoute(pattern) {
			routes = append(routes, route{method, pattern})
		}
		return nil
	}))
	if len(routes) < 30 {
		t.Fatalf("only %d console routes: %v", len(routes), routes)
	}
	params := strings.NewReplacer("{tenantID}", fx.foreign.ID, "{keyID}", foreignKey,
		"{planID}", fmt.Sprint(fx.pro.ID), "{userID}", fx.users[roleOperator].ID, "{tokenID}", "00000000-0000-0000-0000-000000000000",
		"{month}", "2026-10", "*", "console.css")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	before := auditCount(t, fx)
	for _, r := range []role{roleTenantAdmin, roleViewer} {
		token := sessionFor(t, fx.srv.DB, fx.users[r])
		get := func(path string) response {
			req, _ := http.NewRequest("GET", fx.srv.URL+path, nil)
			req.AddCookie(&http.Cookie{Name: adminapi.SessionCookie, Value: token})
			return sendWith(t, client, req)
		}
		m := csrfInput.FindSubmatch(get("/tenants/" + fx.own.ID).Body)
		if m == nil {
			t.Fatalf("%s: no CSRF token on its tenant's page", r)
		}
		csrf := string(m[1])
		for _, rt := range routes {
			path := params.Replace(rt.pattern)
			var want int
			switch {
			case rt.pattern == "/static/*":
				want = http.StatusOK
			case rt.pattern == "/" || rt.pattern == "/login":
				want = http.StatusSeeOther // to its own tenant
			case rt.pattern == "/logout":
				continue // ends the session; TestConsoleSignIn signs out
			case strings.HasPrefix(rt.pattern, "/tenants/{tenantID}"):
				want = http.StatusNotFound
			default:
				want = http.StatusForbidden
			}
			if rt.method == "POST" && (rt.pattern == "/login") {
				continue
			}
			for _, withToken := range []bool{true, false} {
				var res response
				if rt.method == "GET" {
					res = get(path)
				} else {
					form := url.Values{"confirmed": {"yes"}, "name": {"x"}, "plan_id": {fmt.Sprint(fx.free.ID)}}
					if withToken {
						form.Set("csrf", csrf)
					}
					req, _ := http.NewRequest(rt.method, fx.srv.URL+path, strings.NewReader(form.Encode()))
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
					req.AddCookie(&http.Cookie{Name: adminapi.SessionCookie, Value: token})
					res = sendWith(t, client, req)
				}
				w := want
				if rt.method != "GET" && !withToken {
					w = http.StatusForbidden // the CSRF check comes first
				}
				if res.StatusCode != w {
					t.Errorf("%s %s as %s (token %v) = %d, want %d", rt.method, path, r, withToken, res.StatusCode, w)
				}
				for _, secret := range []string{fx.foreign.Name, "foreign secret project", "admin@foreign.example.com"} {
					if strings.Contains(string(res.Body), secret) {
						t.Errorf("%s %s as %s: the answer mentions %q", rt.method, path, r, secret)
					}
				}
				if rt.method == "GET" {
					break
				}
			}
		}
	}
	if after := auditCount(t, fx); after != before {
		t.Errorf("tenant users' requests to other tenants and operators' pages left %d audit entries", after-before)
	}
}
