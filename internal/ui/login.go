package ui

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/access"
	"github.com/tollgate/tollgate/internal/auth"
)

// loginPage is the data of the sign-in page.
type loginPage struct {
	Email  string
	Next   string
	Error  string
	Errors map[string]string
}

// safeNext returns next when it is a clean path of this console, else
// "/": the sign-in form and the confirmation pages must not become
// redirectors to other sites. Browsers drop tabs and newlines from a
// Location and read a backslash as a slash, so "/\t/evil.example" would
// reach evil.example: any control character, backslash or
// percent-encoded one of them is refused, as are absolute and
// scheme-relative URLs and the API's paths.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/api/") ||
		strings.IndexFunc(next, unsafeInPath) >= 0 {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" ||
		!strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") || strings.HasPrefix(u.Path, "/api/") ||
		strings.IndexFunc(u.Path, unsafeInPath) >= 0 {
		return "/"
	}
	return next
}

// unsafeInPath reports whether r may not appear in a redirect's path:
// control characters (which browsers drop or stop at), backslashes and
// anything outside printable ASCII.
func unsafeInPath(r rune) bool {
	return r < 0x21 || r > 0x7e || r == '\\'
}

// LoginPage serves GET /login: the sign-in form, or, for a browser
// signed in already, where it was going.
func (c *Console) LoginPage() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next := safeNext(r.URL.Query().Get("next"))
		if _, ok := access.SessionFrom(r.Context()); ok {
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
		r = ensureVisitor(w, r)
		c.render(w, r, http.StatusOK, "login", "", loginPage{Next: next})
	})
}

// Login serves POST /login: the admin API's sign-in (Config.Sessions, as
// POST /api/v1/login), with its login limits, sets the session cookie.
func (c *Console) Login() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		email, next := strings.TrimSpace(r.PostForm.Get("email")), safeNext(r.PostForm.Get("next"))
		err := c.cfg.Sessions.SignIn(w, r, email, r.PostForm.Get("password"))
		if err == nil {
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
		p := loginPage{Email: email, Next: next}
		switch tollgate.ErrorCode(err) {
		case tollgate.EINVALID, tollgate.EMALFORMED:
			p.Errors = fieldErrors(err)
		case tollgate.EUNAUTHORIZED:
			p.Error = "Wrong email or password."
		case tollgate.ERATELIMITED:
			p.Error = "Too many sign-in attempts. " + strings.TrimPrefix(tollgate.ErrorMessage(err), "too many login attempts: ")
		default:
			c.Error(w, r, err)
			return
		}
		c.render(w, r, statusOf(err), "login", "", p)
	})
}

// Logout serves POST /logout: the API's sign-out (Config.Sessions) ends
// the session and clears the cookie.
func (c *Console) Logout() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := c.cfg.Sessions.SignOut(w, r); err != nil {
			c.Error(w, r, err)
			return
		}
		redirect(w, r, "/login", "Signed out.")
	})
}

// Home serves GET /: the overview for operators; a tenant user's home is
// its tenant's page.
func (c *Console) Home() http.Handler {
	overview := c.Overview()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := session(r).User
		if u.Role != auth.RoleOperator {
			http.Redirect(w, r, "/tenants/"+u.TenantID, http.StatusSeeOther)
			return
		}
		overview.ServeHTTP(w, r)
	})
}
