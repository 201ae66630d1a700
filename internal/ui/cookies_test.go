package ui_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
)

// TestConsoleCookiesBehindATLSProxy: behind a proxy that ends TLS and says
// so (a trusted peer's X-Forwarded-Proto: https), the sign-in page's
// visitor cookie and a form's flash are __Host- cookies, Secure, as the
// session cookie is; over plain HTTP they keep their plain names. Over
// HTTPS a plain visitor cookie, which a plain-HTTP page or a sibling
// subdomain could plant, does not count: a sign-in form posted with it
// and its token is refused.
func TestConsoleCookiesBehindATLSProxy(t *testing.T) {
	srv := admintest.StartAdmin(t, testenv.DatabaseURL(t), map[string]string{"TOLLGATE_TRUSTED_PROXIES": "127.0.0.1/32,::1/128"})
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(overTLS bool, method, path string, form url.Values, cookies ...*http.Cookie) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(form.Encode()))
		testenv.Must(t, err)
		if overTLS {
			req.Header.Set("X-Forwarded-Proto", "https")
		}
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for _, c := range cookies {
			req.AddCookie(c)
		}
		resp, err := client.Do(req)
		testenv.Must(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	cookie := func(resp *http.Response, name string) *http.Cookie {
		for _, c := range resp.Cookies() {
			if c.Name == name {
				return c
			}
		}
		return nil
	}

	for _, tc := range []struct {
		overTLS bool
		name    string
	}{{true, "__Host-tollgate_visitor"}, {false, "tollgate_visitor"}} {
		c := cookie(send(tc.overTLS, "GET", "/login", nil), tc.name)
		if c == nil || c.Secure != tc.overTLS || c.Path != "/" || !c.HttpOnly {
			t.Errorf("sign-in page (TLS at the proxy %v): visitor cookie %+v, want %s, Secure %v, Path=/, HttpOnly", tc.overTLS, c, tc.name, tc.overTLS)
		}
	}

	// A plain visitor cookie planted by a plain-HTTP page, with the token
	// that page showed for it, signs nothing in over HTTPS: the form is
	// refused as not from this console, and no session is set.
	planted := &http.Cookie{Name: "tollgate_visitor", Value: "planted-by-a-sibling"}
	body, err := io.ReadAll(send(false, "GET", "/login", nil, planted).Body)
	testenv.Must(t, err)
	m := csrfInput.FindStringSubmatch(string(body))
	if m == nil {
		t.Fatalf("the plain-HTTP sign-in page has no CSRF token:\n%s", body)
	}
	form := url.Values{"csrf": {m[1]}, "email": {"nobody@example.com"}, "password": {"wrong password"}}
	if r := send(false, "POST", "/login", form, planted); r.StatusCode == http.StatusForbidden {
		t.Fatalf("over plain HTTP the visitor cookie's own token is refused (%d): the test proves nothing", r.StatusCode)
	}
	if r := send(true, "POST", "/login", form, planted); r.StatusCode != http.StatusForbidden {
		t.Errorf("sign-in over HTTPS with a planted plain visitor cookie = %d, want 403", r.StatusCode)
	}

	// A form's flash (signing out: "Signed out.") likewise.
	user := admintest.CreateUser(t, srv.DB, "ops@example.com", auth.RoleOperator, "")
	for _, tc := range []struct {
		overTLS       bool
		session, name string
	}{{true, adminapi.SecureSessionCookie, "__Host-tollgate_flash"}, {false, adminapi.SessionCookie, "tollgate_flash"}} {
		session := &http.Cookie{Name: tc.session, Value: admintest.SessionFor(t, srv.DB, user)} // signing out ends it
		body, err := io.ReadAll(send(tc.overTLS, "GET", "/", nil, session).Body)
		testenv.Must(t, err)
		m := csrfInput.FindStringSubmatch(string(body))
		if m == nil {
			t.Fatalf("overview (TLS at the proxy %v) has no CSRF token", tc.overTLS)
		}
		c := cookie(send(tc.overTLS, "POST", "/logout", url.Values{"csrf": {m[1]}}, session), tc.name)
		if c == nil || c.Secure != tc.overTLS || c.Value == "" {
			t.Errorf("signing out (TLS at the proxy %v): flash cookie %+v, want %s, Secure %v", tc.overTLS, c, tc.name, tc.overTLS)
		}
	}
}
