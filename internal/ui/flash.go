package ui

import (
	"net/http"
	"net/url"

	"github.com/tollgate/tollgate/internal/httpx"
)

// A flash is a one-line message shown once on the page a form redirects
// to ("Key tg_4fT9aQ2x revoked."), carried by a short-lived cookie.

const flashCookie = "tollgate_flash"

// hostCookie is the name the console's cookie base goes by on r: over
// HTTPS (httpx.HTTPS: TLS, or a trusted proxy's X-Forwarded-Proto) with
// the __Host- prefix, which browsers keep only when it is Secure, has
// Path=/ and no Domain, so that neither a plain-HTTP page nor a sibling
// subdomain can plant it (as the session cookie does); base over plain
// HTTP, where browsers refuse the prefix. Over HTTPS only the prefixed
// name is read.
func hostCookie(r *http.Request, base string) string {
	if httpx.HTTPS(r) {
		return "__Host-" + base
	}
	return base
}

// redirect answers a successful form with a redirect to to (a path of
// this console), showing msg there once.
func redirect(w http.ResponseWriter, r *http.Request, to, msg string) {
	if msg != "" {
		http.SetCookie(w, &http.Cookie{Name: hostCookie(r, flashCookie), Value: url.QueryEscape(msg), Path: "/", MaxAge: 60,
			HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: httpx.HTTPS(r)})
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// takeFlash returns the request's flash message, if any, and clears it.
func takeFlash(w http.ResponseWriter, r *http.Request) string {
	name := hostCookie(r, flashCookie)
	ck, err := r.Cookie(name)
	if err != nil {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: httpx.HTTPS(r)})
	msg, err := url.QueryUnescape(ck.Value)
	if err != nil {
		return ""
	}
	return msg
}
