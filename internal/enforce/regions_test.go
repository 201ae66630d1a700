package enforce

import (
	"context"
	"sync"
	"testing"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/testenv"
)

// recordingStore decides on a memory store and keeps the last batch.
type recordingStore struct {
	*limiter.MemoryStore
	mu   sync.Mutex
	last limiter.Batch
}

func (s *recordingStore) Check(ctx context.Context, b limiter.Batch) (limiter.Outcome, error) {
	s.mu.Lock()
	s.last = b
	s.mu.Unlock()
	return s.MemoryStore.Check(ctx, b)
}

// TestTenantMonthIsSharedAcrossRegions: in a deployment of regions, a
// check of a tenant with a hard quota, or an overage quota and a spend
// cap, sends the tenant's month count to the other regions (one request
// on its state carries the exchange, so the units are sent once though
// the quota and the cap both count them) while its rate rule stays
// regional; in one region nothing is exchanged.
func TestTenantMonthIsSharedAcrossRegions(t *testing.T) {
	ctx := context.Background()
	holder, secrets := monthTenants(t)
	for _, c := range []struct {
		name   string
		region region.Config
	}{{"one region", region.Config{}}, {"regions", region.Config{Name: "us", Names: []string{"us", "eu"}}}} {
		t.Run(c.name, func(t *testing.T) {
			store := &recordingStore{MemoryStore: limiter.NewMemoryStore(nil)}
			checker := NewChecker(holder, store, CheckerConfig{Prefix: "tg:", Region: c.region, NoLocalDenials: true})
			defer checker.Close()
			for tenant, monthRules := range map[string]int{"capped": 2, "strict": 1} {
				_, err := checker.Check(ctx, Request{Key: secrets[tenant], Resource: "GET /x", Cost: 1})
				testenv.Must(t, err)
				month := statekey.TenantMonthKey("tg:", tenant, plans.QuotaRuleName)
				counted, exchanged := 0, 0
				for _, r := range store.last.Requests {
					if r.Key == month {
						counted++
					}
					if r.Params.Exchange {
						exchanged++
						if r.Key != month {
							t.Errorf("%s: the rate rule's state %q is exchanged", tenant, r.Key)
						}
					}
				}
				want := 0
				if c.region.Enabled() {
					want = 1
				}
				if counted != monthRules || exchanged != want {
					t.Errorf("%s: %d requests count the month, %d are exchanged; want %d and %d", tenant, counted, exchanged, monthRules, want)
				}
			}
		})
	}
}

// TestHoldRegion: a hold ID names the region that opened it; a checker
// of another region of the deployment forwards it there, its own and
// one of one region (or no region of the deployment, or no hold ID) it
// settles itself.
func TestHoldRegion(t *testing.T) {
	holder, _ := monthTenants(t)
	eu := NewChecker(holder, limiter.NewMemoryStore(nil), CheckerConfig{Region: region.Config{Name: "eu", Names: []string{"us", "eu"}}})
	defer eu.Close()
	d := &Decision{TenantID: "t", Tier: "authenticated"}
	for _, c := range []struct {
		name, id, want string
	}{
		{"us's", newHoldID('a', "us", d, Request{}), "us"},
		{"its own", newHoldID('a', "eu", d, Request{}), ""},
		{"of one region", newHoldID('a', "", d, Request{}), ""},
		{"of no region of the deployment", newHoldID('a', "mars", d, Request{}), ""},
		{"no hold ID", "not-an-id", ""},
	} {
		if got := eu.HoldRegion(c.id); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
