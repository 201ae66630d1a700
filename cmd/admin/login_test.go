package main

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/testenv"
)

// refusedBy sends attempt until it is answered 429 and fails t unless
// that comes at once, or after no more 401s than the limit (perMinute
// attempts a minute) refilled since start: one every minute/perMinute. On
// a fast machine that is the first attempt; on a slow one, password checks
// can take long enough for the limit to refill a little, which is the
// limit working, not failing. It returns the 429.
func refusedBy(t *testing.T, what string, perMinute int, start time.Time, attempt func() response) response {
	t.Helper()
	for n := 0; ; n++ {
		res := attempt()
		if res.StatusCode == http.StatusTooManyRequests {
			return res
		}
		refilled := int(time.Since(start) / (time.Minute / time.Duration(perMinute)))
		if res.StatusCode != http.StatusUnauthorized || n >= refilled {
			t.Fatalf("%s: %d after %d attempts over the limit (%d refilled since the first), want 429",
				what, res.StatusCode, n+1, refilled)
		}
	}
}

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
	start := time.Now()
	for range 5 {
		want(t, callWith(t, attacker, "POST", login, "", wrong), http.StatusUnauthorized)
	}
	res := refusedBy(t, "the right password after 5 wrong ones", 5, start, func() response {
		return callWith(t, attacker, "POST", login, "", map[string]string{"email": "ops@example.com", "password": "password-ops@example.com"})
	})
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
	guess := 0
	refusedBy(t, "the attacker's address over its limit", 4*5, start, func() response {
		guess++
		return callWith(t, attacker, "POST", login, "", map[string]string{"email": fmt.Sprintf("more%d@example.com", guess), "password": "guess"})
	})
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
	// Address 2 fails last, so that its five failures are the most recent:
	// slow password checks on a busy machine must not let its per-minute
	// budget refill (one attempt each 12 s) before it is asked again.
	for a := byte(6); a >= 2; a-- {
		for range 5 {
			want(t, callWith(t, from(a), "POST", login, "", wrong), http.StatusUnauthorized)
		}
	}
	// An attacker address that failed is refused even with the right password.
	want(t, callWith(t, from(2), "POST", login, "", right), http.StatusTooManyRequests)
	// The user, at an address that has not failed, logs in.
	want(t, callWith(t, from(1), "POST", login, "", right), http.StatusOK)
}

// TestLoginLimitsBehindTrustedProxy: behind a proxy listed in
// TOLLGATE_TRUSTED_PROXIES the login limits apply per client that the
// proxy names in X-Forwarded-For, not to the proxy's own address; a
// client that is not a trusted proxy cannot choose its address with the
// header.
func TestLoginLimitsBehindTrustedProxy(t *testing.T) {
	srv := startAdmin(t, testenv.DatabaseURL(t), map[string]string{
		"TOLLGATE_ADMIN_LOGIN_LIMIT": "5", "TOLLGATE_TRUSTED_PROXIES": "127.0.0.1/32"})
	login := srv.URL + "/api/v1/login"
	send := func(client *http.Client, xff string, i int) response {
		t.Helper()
		body := fmt.Sprintf(`{"email": "guess%d@example.com", "password": "guess"}`, i)
		req, err := http.NewRequest("POST", login, strings.NewReader(body))
		testenv.Must(t, err)
		req.Header.Set("Content-Type", "application/json")
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		return sendWith(t, client, req)
	}
	from := func(client *http.Client, xff string, i int) int { t.Helper(); return send(client, xff, i).StatusCode }
	const networkLimit = 4 * 5
	proxy := http.DefaultClient // connects from 127.0.0.1, the trusted proxy
	start := time.Now()
	for i := range networkLimit {
		if got := from(proxy, "198.51.100.1", i); got != http.StatusUnauthorized {
			t.Fatalf("attempt %d for 198.51.100.1: %d, want 401", i+1, got)
		}
	}
	extra := 100
	refusedBy(t, "198.51.100.1 over its limit", networkLimit, start, func() response { extra++; return send(proxy, "198.51.100.1", extra) })
	// Addresses a client wrote left of the one the proxy appended change
	// nothing.
	refusedBy(t, "198.51.100.1 with a spoofed entry", networkLimit, start, func() response {
		extra++
		return send(proxy, "203.0.113.5, 198.51.100.1", extra)
	})
	// Another client behind the same proxy has its own allowance.
	if got := from(proxy, "198.51.100.2", 0); got != http.StatusUnauthorized {
		t.Errorf("198.51.100.2 behind the same proxy: %d, want 401", got)
	}

	// A client connecting directly is its own address whatever it claims.
	direct := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	start = time.Now()
	for i := range networkLimit {
		if got := from(direct, fmt.Sprintf("192.0.2.%d", i+1), i); got != http.StatusUnauthorized {
			t.Fatalf("direct attempt %d: %d, want 401", i+1, got)
		}
	}
	fresh := 200
	refusedBy(t, "a direct client with a fresh X-Forwarded-For (the header is not trusted from it)", networkLimit, start, func() response {
		fresh++
		return send(direct, fmt.Sprintf("192.0.2.%d", fresh%250), fresh)
	})
}

// TestLoginWhileRedisIsDown: with the login limiter's Redis unreachable,
// logins fail open at once, the outage is logged a bounded number of
// times rather than once per attempt, and /metrics says it is down.
func TestLoginWhileRedisIsDown(t *testing.T) {
	deadRedis := testenv.FreeAddr(t) // nothing listens there now
	srv := startAdmin(t, testenv.DatabaseURL(t), map[string]string{"TOLLGATE_REDIS_ADDR": deadRedis})
	createUser(t, srv.DB, "ops@example.com", auth.RoleOperator, "")
	right := map[string]string{"email": "ops@example.com", "password": "password-ops@example.com"}
	for range 20 {
		want(t, call(t, "POST", srv.URL+"/api/v1/login", "", right), http.StatusOK)
	}
	if n := strings.Count(srv.Logs.String(), "login limiter unavailable"); n > 6 {
		t.Errorf("%d warnings for 20 logins while Redis is down, want at most 6 (until the circuit opens)", n)
	}
	res := call(t, "GET", srv.URL+"/metrics", "", nil)
	want(t, res, http.StatusOK)
	if !strings.Contains(string(res.Body), `tollgate_dependency_up{component="login_limiter",dependency="redis"} 0`) {
		t.Errorf("/metrics does not say the login limiter's Redis is down:\n%s", res.Body)
	}
}
