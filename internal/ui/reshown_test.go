package ui_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
)

// consoleClient talks HTTP to the console with a user's session, and
// follows no redirects.
type consoleClient struct {
	t       *testing.T
	base    string
	session string
	http    *http.Client
}

func newConsoleClient(t *testing.T, admin *admintest.Server, u auth.User) *consoleClient {
	return &consoleClient{t: t, base: admin.URL, session: admintest.SessionFor(t, admin.DB, u),
		http: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *consoleClient) do(method, path string, form url.Values) admintest.Response {
	c.t.Helper()
	req, _ := http.NewRequest(method, c.base+path, strings.NewReader(form.Encode()))
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.AddCookie(&http.Cookie{Name: adminapi.SessionCookie, Value: c.session})
	return admintest.SendWith(c.t, c.http, req)
}

// post sends form, with the CSRF token of the page at from, to path.
func (c *consoleClient) post(from, path string, form url.Values) admintest.Response {
	c.t.Helper()
	m := csrfInput.FindSubmatch(c.do("GET", from, nil).Body)
	if m == nil {
		c.t.Fatalf("no CSRF token on %s", from)
	}
	form.Set("csrf", string(m[1]))
	return c.do("POST", path, form)
}

var pagerLink = regexp.MustCompile(`href="([^"]*cursor=[^"]*)"`)

// TestConsoleReshownFormPages: a page shown again at a form's POST
// address after the form was refused pages on from its own address, and
// keeps the date hint of a replay's "from" that is no date. Its POST
// address asked for with GET (reloaded, opened anew) is sent on to the
// page it belongs to, with the console's headers; another method there
// is the console's "not allowed" page; the API still answers
// problem+json.
func TestConsoleReshownFormPages(t *testing.T) {
	ctx := context.Background()
	admin, metered := startWithMeteredPlan(t)
	acme, _, _, _ := tenantSetup(t, admin)
	ops := events.NewOps(admin.DB, nil, events.Guard{AllowPrivate: true})
	var endpoint string
	for i := range page.DefaultLimit + 1 {
		e, err := ops.CreateEndpoint(ctx, audit.CLI, acme.ID, events.EndpointInput{URL: fmt.Sprintf("http://127.0.0.1:9/hook-%d", i)})
		testenv.Must(t, err)
		endpoint = e.Endpoint.ID
	}
	c := newConsoleClient(t, admin, admintest.CreateUser(t, admin.DB, "admin@acme.example", auth.RoleTenantAdmin, acme.ID))
	alerts := "/tenants/" + acme.ID + "/alerts"
	hook := "/tenants/" + acme.ID + "/webhooks/" + endpoint

	// The alerts page after a refused threshold: its pager leads to the
	// alerts page's next page.
	res := c.post(alerts, alerts+"/thresholds", url.Values{"thresholds[0].value": {"lots"}, "thresholds[0].kind": {"units"}})
	admintest.Want(t, res, http.StatusUnprocessableEntity)
	m := pagerLink.FindSubmatch(res.Body)
	if m == nil {
		t.Fatalf("the alerts page shown again has no link to the next page of %d endpoints", page.DefaultLimit+1)
	}
	next := html.UnescapeString(string(m[1]))
	if !strings.HasPrefix(next, alerts+"?") {
		t.Errorf("the next page's link is %s, want one to %s", next, alerts)
	}
	if res := c.do("GET", next, nil); res.StatusCode != http.StatusOK || !strings.Contains(string(res.Body), "hook-") {
		t.Errorf("GET %s = %d", next, res.StatusCode)
	}

	// A replay whose "from" is no date: the hint stays; an empty "to" is
	// required.
	res = c.post(hook, hook+"/replay", url.Values{"from": {"yesterday"}, "to": {""}})
	admintest.Want(t, res, http.StatusUnprocessableEntity)
	if body := string(res.Body); !strings.Contains(body, "must be a date and time such as") || strings.Count(body, "is required") != 1 {
		t.Errorf("a replay from %q to %q: the page shows the hint %v and %d × \"is required\", want the hint and one",
			"yesterday", "", strings.Contains(body, "must be a date and time such as"), strings.Count(body, "is required"))
	}

	// GET of a POST address: on to its page, with the console's headers.
	for path, want := range map[string]string{
		alerts + "/thresholds":                     alerts,
		alerts + "/spend-cap?cursor=abc":           alerts + "?cursor=abc",
		hook + "/replay":                           hook,
		"/tenants/" + acme.ID + "/keys/x/revoke":   "/tenants/" + acme.ID + "/keys",
		fmt.Sprintf("/plans/%d/quota", metered.ID): fmt.Sprintf("/plans/%d", metered.ID),
	} {
		res := c.do("GET", path, nil)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != want || res.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("GET %s = %d to %q (CSP %q), want 303 to %s with the console's headers", path, res.StatusCode,
				res.Header.Get("Location"), res.Header.Get("Content-Security-Policy"), want)
		}
	}
	// Another method, or a HEAD of a page a GET serves: the console's 405.
	for _, method := range []string{"DELETE", "HEAD"} {
		res = c.do(method, alerts, nil)
		if ct := res.Header.Get("Content-Type"); res.StatusCode != http.StatusMethodNotAllowed || !strings.HasPrefix(ct, "text/html") ||
			res.Header.Get("Allow") != "GET" || res.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("%s %s = %d %s, Allow %q: want the console's 405 page", method, alerts, res.StatusCode, ct, res.Header.Get("Allow"))
		}
	}
	for _, rt := range []struct{ method, path string }{{"GET", "/api/v1/logout"}, {"POST", "/healthz"}} {
		res := c.do(rt.method, rt.path, nil)
		if ct := res.Header.Get("Content-Type"); res.StatusCode != http.StatusMethodNotAllowed || ct != "application/problem+json" {
			t.Errorf("%s %s = %d %s, want 405 problem+json", rt.method, rt.path, res.StatusCode, ct)
		}
	}
}
