package main

import (
	"fmt"
	"net"
	"net/http"
	"testing"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestLoginLockoutResistance: an attacker who knows a user's email but not
// the password cannot lock the user out from their own address.
func TestLoginLockoutResistance(t *testing.T) {
	srv := startAdmin(t, testenv.DatabaseURL(t), map[string]string{"TOLLGATE_ADMIN_LOGIN_LIMIT": "5"})
	createUser(t, srv.DB, "ops@example.com", auth.RoleOperator, "")
	// The attacker connects from another loopback address.
	attacker := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	login := srv.URL + "/api/v1/login"
	wrong := map[string]string{"email": "ops@example.com", "password": "a wrong guess"}
	for range 5 {
		want(t, callWith(t, attacker, "POST", login, "", wrong), http.StatusUnauthorized)
	}
	res := callWith(t, attacker, "POST", login, "", map[string]string{"email": "ops@example.com", "password": "password-ops@example.com"})
	want(t, res, http.StatusTooManyRequests)
	if p := problemOf(t, res); p.Code != "rate_limited" {
		t.Errorf("code = %q, want rate_limited", p.Code)
	}
	if ra := res.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("Retry-After = %q, want whole seconds ≥ 1", ra)
	}
	// The user, from another address, logs in.
	want(t, call(t, "POST", login, "", map[string]string{"email": "ops@example.com", "password": "password-ops@example.com"}), http.StatusOK)
	// The attacker's address may still try other emails, up to its limit
	// (of which the refused attempt used nothing).
	for i := range 4*5 - 5 { // the network limit is 4× the per-email one
		want(t, callWith(t, attacker, "POST", login, "", map[string]string{"email": fmt.Sprintf("guess%d@example.com", i), "password": "guess"}),
			http.StatusUnauthorized)
	}
	want(t, callWith(t, attacker, "POST", login, "", map[string]string{"email": "guess@example.com", "password": "guess"}),
		http.StatusTooManyRequests)
}
