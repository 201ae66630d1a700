package adminapi

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/testenv"
)

func TestClientNetwork(t *testing.T) {
	tests := []struct{ ip, want string }{
		{"203.0.113.7", "203.0.113.7"},
		{"::ffff:203.0.113.7", "203.0.113.7"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2::ffff", "2001:db8:1:2::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"not an address", "not an address"},
	}
	for _, tt := range tests {
		if got := clientNetwork(tt.ip); got != tt.want {
			t.Errorf("clientNetwork(%q) = %q, want %q", tt.ip, got, tt.want)
		}
	}
}

// forEachLoginStore runs test as a subtest against each of loginStores,
// with a login limiter of perMinute on it.
func forEachLoginStore(t *testing.T, perMinute int64, test func(t *testing.T, l *loginLimiter)) {
	for name, open := range loginStores {
		t.Run(name, func(t *testing.T) {
			store, prefix := open(t)
			test(t, &loginLimiter{store: store, prefix: prefix, perMinute: perMinute})
		})
	}
}

// loginStores are the stores the login limiter's tests run against.
var loginStores = map[string]func(t *testing.T) (limiter.Store, string){
	"memory": func(*testing.T) (limiter.Store, string) { return limiter.NewMemoryStore(nil), "tg:" },
	"redis": func(t *testing.T) (limiter.Store, string) {
		c, prefix := testenv.Redis(t)
		return redisstore.New(c), prefix
	},
	"cluster": func(t *testing.T) (limiter.Store, string) {
		c, prefix := testenv.RedisCluster(t)
		return redisstore.New(c), prefix
	},
}

// TestLoginLimiter checks each limit against memory, Redis and Redis
// Cluster stores: per network on every attempt, per (network, email) and
// per email on failures only.
func TestLoginLimiter(t *testing.T) {
	const perMinute = 3
	forEachLoginStore(t, perMinute, func(t *testing.T, l *loginLimiter) {
		ctx := context.Background()
		allowed := func(ip, email string) bool {
			t.Helper()
			ok, retry := l.allow(ctx, ip, email)
			if !ok && (retry <= 0 || retry > time.Minute) {
				t.Errorf("refused %s for %s with retry %v, want 0 < retry ≤ 1m", ip, email, retry)
			}
			return ok
		}

		// check reports problem (with report: t.Error, or t.Fatal when
		// the rest would make no sense) unless an attempt from ip for
		// email is allowed exactly when want is.
		check := func(report func(...any), want bool, ip, email, problem string) {
			t.Helper()
			if allowed(ip, email) != want {
				report(problem)
			}
		}
		// attempts makes n attempts, the i-th from attempt(i), failing
		// each when fail is true, and stops the test when one of them
		// (what) is refused.
		attempts := func(n int, fail bool, what string, attempt func(i int) (ip, email string)) {
			t.Helper()
			for i := range n {
				ip, email := attempt(i)
				if !allowed(ip, email) {
					t.Fatalf("%s %d refused", what, i+1)
				}
				if fail {
					l.failed(ctx, ip, email)
				}
			}
		}

		// One network, one email: perMinute attempts.
		attempts(perMinute, true, "attempt", func(int) (string, string) { return "10.0.0.1", "victim@example.com" })
		check(t.Fatal, false, "10.0.0.1", "victim@example.com", "attempt beyond the (network, email) limit allowed")
		// ... which locks out neither the victim elsewhere nor the
		// network for other emails.
		check(t.Error, true, "10.0.0.2", "victim@example.com", "the victim is locked out by another address's attempts")
		check(t.Error, true, "10.0.0.1", "other@example.com",
			"a refused attempt consumed the network's allowance, or the network limit is the pair's")

		// One network, many emails: networkFactor × perMinute.
		attempts(networkFactor*perMinute-1, false, "attempt from one network", func(i int) (string, string) {
			return "10.0.1.1", fmt.Sprintf("u%d@example.com", i)
		})
		check(t.Fatal, true, "::ffff:10.0.1.1", "last@example.com", "the network's last attempt refused")
		check(t.Fatal, false, "10.0.1.1", "fresh@example.com",
			"attempt beyond the network limit allowed (IPv4-mapped addresses are the same address)")

		// An IPv6 /64 is one network.
		attempts(perMinute, true, "failed attempt from an IPv6 address", func(int) (string, string) {
			return "2001:db8:0:1::1", "v6@example.com"
		})
		check(t.Error, false, "2001:db8:0:1::2:3", "v6@example.com", "another address of the same /64 escaped the limit")
		check(t.Error, true, "2001:db8:0:2::1", "v6@example.com", "another /64 was refused")

		// One email, many networks: emailFailureFactor × perMinute
		// failures; successes cost nothing.
		attempts(2*emailFailureFactor*perMinute, false, "successful login", func(i int) (string, string) {
			return fmt.Sprintf("10.1.0.%d", i), "busy@example.com"
		})
		attempts(emailFailureFactor*perMinute, true, "failed attempt on one email", func(i int) (string, string) {
			return fmt.Sprintf("10.2.0.%d", i), "target@example.com"
		})
		// The budget is spent: a network that failed on the email is
		// refused, even before its own pair limit ...
		check(t.Error, false, "10.2.0.0", "target@example.com", "attempt beyond the email's failures allowed from a failing network")
		// ... but a network that has not failed still gets in: the
		// user cannot be locked out.
		check(t.Error, true, "10.3.0.1", "target@example.com", "a network without failures was refused: the email is locked out")
		// The refusal cost the failing network nothing elsewhere.
		attempts(networkFactor*perMinute-1, false, "attempt from the refused network", func(i int) (string, string) {
			return "10.2.0.0", fmt.Sprintf("w%d@example.com", i)
		})
	})
}

// TestLoginSuccessesNeverLockOut: signing in successfully, however often,
// never refuses the account's next sign-in; failures from the same
// network still do, up to the per-(network, email) limit, successes in
// between or not. Only the network's own limit counts every attempt.
func TestLoginSuccessesNeverLockOut(t *testing.T) {
	const perMinute = 3
	forEachLoginStore(t, perMinute, func(t *testing.T, l *loginLimiter) {
		ctx := context.Background()
		const ip, email = "10.9.0.1", "ops@example.com"
		// One network's allowance, all on one account: every one a
		// successful sign-in.
		for i := range networkFactor * perMinute {
			if ok, retry := l.allow(ctx, ip, email); !ok {
				t.Fatalf("successful sign-in %d of %d within a minute refused (retry %v)", i+1, networkFactor*perMinute, retry)
			}
		}
		// Failures still count: perMinute of them, then the pair is
		// refused (from another address of nobody's network limit).
		const other = "10.9.0.2"
		for i := range perMinute {
			if ok, _ := l.allow(ctx, other, email); !ok {
				t.Fatalf("failed attempt %d refused before the limit", i+1)
			}
			l.failed(ctx, other, email)
		}
		if ok, _ := l.allow(ctx, other, email); ok {
			t.Error("an attempt after perMinute failures from one network was allowed")
		}
	})
}
