package ui

import (
	"net/http"
	"net/url"
)

// A flash is a one-line message shown once on the page a form redirects
// to ("Key tg_4fT9aQ2x revoked."), carried by a short-lived cookie.

const flashCookie = "tollgate_flash"

// redirect answers a successful form with a redirect to to (a path of
// this console), showing msg there once.
func redirect(w http.ResponseWriter, r *http.Request, to, msg string) {
	if msg != "" {
		http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: url.QueryEscape(msg), Path: "/", MaxAge: 60,
			HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// takeFlash returns the request's flash message, if any, and clears it.
func takeFlash(w http.ResponseWriter, r *http.Request) string {
	ck, err := r.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
	msg, err := url.QueryUnescape(ck.Value)
	if err != nil {
		return ""
	}
	return msg
}
