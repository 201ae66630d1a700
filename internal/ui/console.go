// Package ui is the web console: the operator's admin UI and the tenants'
// portal, served by `admin serve` at / beside the admin API (/api/v1).
//
// Pages are server-rendered with html/template from web/ (embedded), with
// charts drawn server-side as SVG (internal/chart); a small script in
// web/static only enhances them (copy buttons, confirmation dialogs,
// showing the fields of the chosen algorithm): every form works without it.
//
// The console shares the API's session cookie and its access rules: its
// routes are listed in internal/adminapi/routes.go beside the API's, behind
// the same middleware, which decides who may use each (internal/access);
// pages ask internal/access which buttons to show. Every change the
// console makes is a call of the same operation the API's handler calls
// (plans.Ops, tenants.Ops, auth.Ops, events.Ops, quota.Ops,
// billing.Ops), with a
// typed input and the signed-in user as the actor: the operation
// validates, makes the change and writes its audit entry, and a form
// shows the operation's field errors beside its fields. Sign-in and
// sign-out are the API's own (Config.Sessions). Pages read through the
// feature stores.
package ui

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/access"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/chart"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
	"github.com/tollgate/tollgate/web"
)

// Config is what the console needs.
type Config struct {
	DB *pgxpool.Pool
	// Usage answers the usage queries: series, top keys and resources,
	// totals, the overview.
	Usage *usage.Reader
	// UsageLag reports how far behind the usage worker is, for the
	// overview; nil when the admin server has no Redis (the overview then
	// says so).
	UsageLag func(ctx context.Context) (usage.Lag, error)
	Log      *slog.Logger
	// Secret keys the console's CSRF tokens (HMAC-SHA256); the session
	// secret, under a label of its own.
	Secret []byte
	// Plans, Tenants and Auth make the console's changes, as they make
	// the admin API's.
	Plans   *plans.Ops
	Tenants *tenants.Ops
	Auth    *auth.Ops
	// Events and Quota make the webhook and alert pages' changes.
	Events *events.Ops
	Quota  *quota.Ops
	// Credits grants prepaid credits (credits.Ops).
	Credits *credits.Ops
	// Billing closes months (billing.Ops).
	Billing *billing.Ops
	// Invoicing links billing accounts, opens top-ups and reconciles
	// invoices (billing.Invoicing; off without a provider).
	Invoicing *billing.Invoicing
	// Sessions signs people in and out: the admin API's sessions, login
	// limits and cookies.
	Sessions Sessions
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Sessions signs people in and out of the admin server; the admin API
// provides it, so that the console's sign-in form and POST /api/v1/login
// share one implementation.
type Sessions interface {
	// SignIn checks email and password under the login limits, starts a
	// session and sets its cookie on w. Its errors are *tollgate.Error:
	// EINVALID naming the fields, EUNAUTHORIZED for a wrong email or
	// password, ERATELIMITED over the limits.
	SignIn(w http.ResponseWriter, r *http.Request, email, password string) error
	// SignOut ends r's session, if it has one, and clears the cookie.
	SignOut(w http.ResponseWriter, r *http.Request) error
}

// Console serves the web console's pages. Safe for concurrent use.
type Console struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	pages   map[string]*template.Template
	static  http.Handler
	version string // of the static files, for cache-busting URLs

	plans   *plans.Store
	tenants *tenants.Store
	auth    *auth.Store
	audit   *audit.Store
	usage   *usage.Reader
	billing *billing.Store
	events  *events.Store
	quota   *quota.Store
}

// New returns the console. It panics if the embedded templates do not
// parse: they are part of the program.
func New(cfg Config) *Console {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	c := &Console{cfg: cfg, log: cfg.Log, now: cfg.Now}
	if cfg.DB != nil {
		c.plans, c.tenants, c.auth, c.audit = plans.NewStore(cfg.DB), tenants.NewStore(cfg.DB), auth.NewStore(cfg.DB), audit.NewStore(cfg.DB)
		c.events, c.quota = events.NewStore(cfg.DB), quota.NewStore(cfg.DB)
		c.billing = billing.NewStore(cfg.DB, cfg.Now)
		if cfg.Invoicing == nil {
			c.cfg.Invoicing = billing.NewInvoicing(cfg.DB, billing.InvoicingConfig{Log: cfg.Log}, cfg.Now)
		}
	}
	c.usage = cfg.Usage
	static, err := fs.Sub(web.Static, "static")
	if err != nil {
		panic(err)
	}
	c.version = staticVersion(static)
	c.static = http.StripPrefix("/static/", http.FileServerFS(static))
	c.pages = parsePages(c.funcs())
	return c
}

// staticVersion hashes the static files: their URLs carry it, so that
// browsers may cache them for long and still get a new version at once.
func staticVersion(files fs.FS) string {
	h := sha256.New()
	_ = fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(files, p)
		h.Write([]byte(p))
		h.Write(b)
		return err
	})
	h.Write([]byte(chart.CSS))
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// parsePages parses one template set per page: the layout, the partials
// (templates/partials/) and the page's own file, which defines "title"
// and "content".
func parsePages(funcs template.FuncMap) map[string]*template.Template {
	entries, err := fs.ReadDir(web.Templates, "templates")
	if err != nil {
		panic(err)
	}
	pages := map[string]*template.Template{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || name == "layout.html" {
			continue
		}
		t := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(web.Templates,
			"templates/layout.html", "templates/partials/*.html", "templates/"+name))
		pages[strings.TrimSuffix(name, ".html")] = t
	}
	return pages
}

// Static serves web/static under /static/, and the charts' stylesheet
// (chart.CSS) as /static/chart.css. The files are immutable for a given
// version (?v=… in their URLs).
func (c *Console) Static() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=86400")
		if r.URL.Path == "/static/chart.css" {
			w.Header().Set("Content-Type", "text/css; charset=utf-8")
			_, _ = io.WriteString(w, chart.CSS)
			return
		}
		c.static.ServeHTTP(w, r)
	})
}

// view is what every page template gets.
type view struct {
	Title string
	// Nav names the navigation entry to highlight.
	Nav  string
	User auth.User
	// Tenant is the tenant a tenant user belongs to (the portal's nav).
	TenantID string
	CSRF     string
	Flash    string
	Version  string
	// Data is the page's own.
	Data any
}

// render writes the page with status. Pages hold tenants' data: no cache
// keeps them.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name, nav string, data any) {
	t, ok := c.pages[name]
	if !ok {
		c.log.ErrorContext(r.Context(), "console: no such page", "page", name)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	v := view{Nav: nav, CSRF: c.csrfToken(r), Version: c.version, Data: data, Flash: takeFlash(w, r)}
	if s, ok := access.SessionFrom(r.Context()); ok {
		v.User = s.User
		v.TenantID = s.User.TenantID
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", v); err != nil {
		c.log.ErrorContext(r.Context(), "console: render", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// errorPage is the data of the error page.
type errorPage struct {
	Status  int
	Heading string
	Message string
}

// Error answers a console request with err: the sign-in page for a
// request without a session, else an error page with err's status — a
// tenant user asking for another tenant sees "not found", as from the
// API. Internal errors are logged and shown as a generic message.
func (c *Console) Error(w http.ResponseWriter, r *http.Request, err error) {
	// A value Postgres refuses is the user's input, not our fault.
	err = postgres.Translate(err)
	code := tollgate.ErrorCode(err)
	if code == tollgate.EUNAUTHORIZED && r.Method == http.MethodGet {
		http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return
	}
	p := errorPage{Status: httpx.Status(err), Message: tollgate.ErrorMessage(err)}
	switch code {
	case tollgate.ENOTFOUND:
		p.Heading = "Not found"
	case tollgate.EFORBIDDEN:
		p.Heading = "Not allowed"
	case tollgate.EUNAUTHORIZED:
		p.Heading = "Signed out"
		p.Message = "Your session has ended. Sign in again."
	case tollgate.EINTERNAL:
		c.log.ErrorContext(r.Context(), "console: internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		p.Heading = "Something went wrong"
	default:
		p.Heading = "Could not do that"
	}
	c.render(w, r, p.Status, "error", "", p)
}

// NotFound answers a path the console does not serve.
func (c *Console) NotFound(w http.ResponseWriter, r *http.Request) {
	c.Error(w, r, tollgate.Errorf(tollgate.ENOTFOUND, "There is no page at %s.", r.URL.Path))
}

// MethodNotAllowed answers a console request whose method no route of
// its path takes (routes, the server's, says which do). A form refused
// is shown again at its POST address; reloaded or opened anew, that
// address is asked for with GET, which it does not serve: a GET or HEAD
// is sent on (303, with its query) to the nearest page above the path,
// the first of its prefixes, cut at a "/", that a GET serves ("/" at
// last). Any other method is the error page, 405, with the Allow header.
func (c *Console) MethodNotAllowed(routes chi.Routes) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// (A HEAD of a page a GET serves is not such an address: 405.)
		if r.Method == http.MethodGet || r.Method == http.MethodHead && !routes.Match(chi.NewRouteContext(), http.MethodGet, r.URL.Path) {
			for p := r.URL.Path; p != "/"; {
				p = path.Dir(p)
				if routes.Match(chi.NewRouteContext(), http.MethodGet, p) {
					u := url.URL{Path: p, RawQuery: r.URL.RawQuery}
					http.Redirect(w, r, u.String(), http.StatusSeeOther)
					return
				}
			}
		}
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if routes.Match(chi.NewRouteContext(), m, r.URL.Path) {
				allowed = append(allowed, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		c.Error(w, r, tollgate.Errorf(tollgate.EMETHOD, "%s is not allowed at %s.", r.Method, r.URL.Path))
	}
}

// actor is who makes the request's changes: the signed-in user, whom the
// route has let through.
func actor(r *http.Request) audit.Actor { return access.Actor(r.Context()) }

// session returns the request's session; the routes that need one are
// behind requireSession.
func session(r *http.Request) auth.Session {
	s, _ := access.SessionFrom(r.Context())
	return s
}

// Headers sets the console's security headers: a Content-Security-Policy
// that allows scripts, styles and images from this origin only (no
// inline script or style: charts are SVG styled by classes), no framing,
// no MIME sniffing and no referrer to other sites.
func (c *Console) Headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}
