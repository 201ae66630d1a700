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

// TestLoginLimiter checks each limit against memory, Redis and Redis
// Cluster stores: per (network, email) and per network on every attempt,
// per email on failures only.
func TestLoginLimiter(t *testing.T) {
	stores := map[string]func(t *testing.T) (limiter.Store, string){
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
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store, prefix := open(t)
			const perMinute = 3
			l := &loginLimiter{store: store, prefix: prefix, perMinute: perMinute}
			allowed := func(ip, email string) bool {
				t.Helper()
				ok, retry := l.allow(ctx, ip, email)
				if !ok && (retry <= 0 || retry > time.Minute) {
					t.Errorf("refused %s for %s with retry %v, want 0 < retry ≤ 1m", ip, email, retry)
				}
				return ok
			}

			// One network, one email: perMinute attempts.
			for i := range perMinute {
				if !allowed("10.0.0.1", "victim@example.com") {
					t.Fatalf("attempt %d refused", i+1)
				}
				l.failed(ctx, "10.0.0.1", "victim@example.com")
			}
			if allowed("10.0.0.1", "victim@example.com") {
				t.Fatal("attempt beyond the (network, email) limit allowed")
			}
			// ... which locks out neither the victim elsewhere nor the
			// network for other emails.
			if !allowed("10.0.0.2", "victim@example.com") {
				t.Error("the victim is locked out by another address's attempts")
			}
			if !allowed("10.0.0.1", "other@example.com") {
				t.Error("a refused attempt consumed the network's allowance, or the network limit is the pair's")
			}

			// One network, many emails: networkFactor × perMinute.
			for i := range networkFactor*perMinute - 1 {
				if !allowed("10.0.1.1", fmt.Sprintf("u%d@example.com", i)) {
					t.Fatalf("attempt %d from one network refused", i+1)
				}
			}
			if !allowed("::ffff:10.0.1.1", "last@example.com") {
				t.Fatal("the network's last attempt refused")
			}
			if allowed("10.0.1.1", "fresh@example.com") {
				t.Fatal("attempt beyond the network limit allowed (IPv4-mapped addresses are the same address)")
			}

			// An IPv6 /64 is one network.
			for range perMinute {
				allowed("2001:db8:0:1::1", "v6@example.com")
			}
			if allowed("2001:db8:0:1::2:3", "v6@example.com") {
				t.Error("another address of the same /64 escaped the limit")
			}
			if !allowed("2001:db8:0:2::1", "v6@example.com") {
				t.Error("another /64 was refused")
			}

			// One email, many networks: emailFailureFactor × perMinute
			// failures; successes cost nothing.
			for i := range 2 * emailFailureFactor * perMinute {
				if !allowed(fmt.Sprintf("10.1.0.%d", i), "busy@example.com") {
					t.Fatalf("successful login %d refused", i+1)
				}
			}
			for i := range emailFailureFactor * perMinute {
				if !allowed(fmt.Sprintf("10.2.0.%d", i), "target@example.com") {
					t.Fatalf("failed attempt %d on one email refused", i+1)
				}
				l.failed(ctx, fmt.Sprintf("10.2.0.%d", i), "target@example.com")
			}
			// The budget is spent: a network that failed on the email is
			// refused, even before its own pair limit ...
			if allowed("10.2.0.0", "target@example.com") {
				t.Error("attempt beyond the email's failures allowed from a failing network")
			}
			// ... but a network that has not failed still gets in: the
			// user cannot be locked out.
			if !allowed("10.3.0.1", "target@example.com") {
				t.Error("a network without failures was refused: the email is locked out")
			}
			// The refusal cost the failing network nothing elsewhere.
			for i := range networkFactor*perMinute - 1 {
				if !allowed("10.2.0.0", fmt.Sprintf("w%d@example.com", i)) {
					t.Fatalf("attempt %d from the refused network refused", i+1)
				}
			}
		})
	}
}
