package enforce_test

import (
	"context"
	"testing"

	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/testenv"
)

func TestNetwork(t *testing.T) {
	for _, c := range []struct {
		ip   string
		bits int
		want string
	}{
		{"203.0.113.7", 64, "203.0.113.7"},
		{"::ffff:203.0.113.7", 64, "203.0.113.7"},
		{"2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2::9", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::/48"},
		{"2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6"},
		{"fe80::1%eth0", 64, "fe80::/64"},
		{"not-an-ip", 64, "not-an-ip"},
	} {
		if got := enforce.Network(c.ip, c.bits); got != c.want {
			t.Errorf("Network(%q, %d) = %q, want %q", c.ip, c.bits, got, c.want)
		}
	}
}

// TestAnonymousIPv6ByNetwork: anonymous callers from one IPv6 /64 share
// one allowance, callers from another /64 have their own, and a /128
// setting counts every address alone.
func TestAnonymousIPv6ByNetwork(t *testing.T) {
	ctx := context.Background()
	data := snapshot.Data{Plans: []plans.Plan{{ID: 1, Name: plans.AnonymousPlan, Rules: []plans.Rule{
		{Name: "hourly", Algorithm: limiter.GCRA, Limit: 3, PeriodUS: limiter.HourUS, Burst: 3, Scope: plans.ScopeIP,
			Resource: "*", Mode: plans.ModeEnforce, FailureMode: plans.FailOpen},
	}}}}
	holder := snapshot.NewHolder(snapshot.StaticSource(data), nil)
	testenv.Must(t, holder.Reload(ctx))
	for _, c := range []struct {
		prefix  int
		allowed int // of the 6 checks from six addresses of one /64
	}{{0, 3}, {64, 3}, {128, 6}} {
		checker := enforce.NewChecker(holder, limiter.NewMemoryStore(nil), enforce.CheckerConfig{IPv6Prefix: c.prefix})
		allowed := 0
		for i := range 6 {
			d, err := checker.Check(ctx, enforce.Request{IP: "2001:db8:0:7::" + string(rune('a'+i)), Resource: "*", Cost: 1})
			testenv.Must(t, err)
			if d.Allowed {
				allowed++
			}
		}
		if allowed != c.allowed {
			t.Errorf("prefix %d: %d of 6 allowed from one /64, want %d", c.prefix, allowed, c.allowed)
		}
		d, err := checker.Check(ctx, enforce.Request{IP: "2001:db8:0:8::1", Resource: "*", Cost: 1})
		testenv.Must(t, err)
		if !d.Allowed {
			t.Errorf("prefix %d: another /64 was denied", c.prefix)
		}
	}
}
