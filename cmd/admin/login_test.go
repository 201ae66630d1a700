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

// TestLoginSurvivesDistributedGuessing: 25 wrong passwords from five
// addresses in a minute spend the email's failure budget, which refuses
// those addresses but never the user at an address that has not failed.
func TestLoginSurvivesDistributedGuessing(t *testing.T) {
	srv := startAdmin(t, testenv.DatabaseURL(t), map[string]string{"TOLLGATE_ADMIN_LOGIN_LIMIT": "5"})
	createUser(t, srv.DB, "ops@example.com", auth.RoleOperator, "")
	login := srv.URL + "/api/v1/login"
	from := func(last byte) *http.Client {
		return &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
			LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, last)}}).DialContext}}
	}
	wrong := map[string]string{"email": "ops@example.com", "password": "a wrong guess"}
	right := map[string]string{"email": "ops@example.com", "password": "password-ops@example.com"}
	for a := byte(2); a <= 6; a++ {
		for range 5 {
			want(t, callWith(t, from(a), "POST", login, "", wrong), http.StatusUnauthorized)
		}
	}
	// An attacker address that failed is refused even with the right password.
	want(t, callWith(t, from(2), "POST", login, "", right), http.StatusTooManyRequests)
	// The user, at an address that has not failed, logs in.
	want(t, callWith(t, from(1), "POST", login, "", right), http.StatusOK)
}
