package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/access"
	"github.com/tollgate/tollgate/internal/httpx"
)

// Every console form carries a CSRF token (field csrf): an HMAC of the
// session's ID under the server's secret, so that only pages this server
// rendered for this session can post. Before sign-in there is no session:
// the sign-in form's token is tied to a random cookie (visitorCookie)
// instead. Cross-origin requests are refused before that, by the same
// origin check the API uses (http.CrossOriginProtection).

// csrfField is the form field of the token.
const csrfField = "csrf"

// visitorCookie ties the sign-in form's token to one browser.
const visitorCookie = "tollgate_visitor"

// maxForm bounds a console form's body: a plan with many rules and tiers.
const maxForm = 256 << 10

var errCSRF = tollgate.Errorf(tollgate.EFORBIDDEN,
	"This form has expired or was not sent from this console. Go back, reload the page and try again.")

func (c *Console) mac(label, value string) string {
	m := hmac.New(sha256.New, c.cfg.Secret)
	m.Write([]byte("tollgate-console-csrf\x00" + label + "\x00" + value))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// csrfToken returns the token the request's forms must carry: "" when
// there is neither a session nor a visitor cookie yet (ensureVisitor
// makes one for the sign-in page).
func (c *Console) csrfToken(r *http.Request) string {
	if s, ok := access.SessionFrom(r.Context()); ok {
		return c.mac("session", s.ID)
	}
	if v, err := r.Cookie(hostCookie(r, visitorCookie)); err == nil && v.Value != "" {
		return c.mac("visitor", v.Value)
	}
	return ""
}

// ensureVisitor gives a browser without a session a visitor cookie, so
// that the sign-in form has a token; it returns r as the cookie's holder.
func ensureVisitor(w http.ResponseWriter, r *http.Request) *http.Request {
	name := hostCookie(r, visitorCookie)
	if _, err := r.Cookie(name); err == nil {
		return r
	}
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	ck := &http.Cookie{Name: name, Value: base64.RawURLEncoding.EncodeToString(b), Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: httpx.HTTPS(r), MaxAge: 12 * 3600}
	http.SetCookie(w, ck)
	r = r.Clone(r.Context())
	r.AddCookie(ck)
	return r
}

// CSRF refuses a state-changing console request that comes from another
// origin or does not carry the token of its session (or, before sign-in,
// of its visitor cookie). It parses the form (at most maxForm bytes).
func (c *Console) CSRF(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.Error(w, r, errCSRF)
	}))
	check := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			c.Error(w, r, tollgate.Errorf(tollgate.EMALFORMED, "The form could not be read."))
			return
		}
		want := c.csrfToken(r)
		got := r.PostForm.Get(csrfField)
		if want == "" || !hmac.Equal([]byte(got), []byte(want)) {
			c.Error(w, r, errCSRF)
			return
		}
		if err := httpx.TextValues(r.PostForm); err != nil {
			c.Error(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
	return cop.Handler(check)
}
