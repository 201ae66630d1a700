package enforce

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
)

// TestTenantMonthKeyIsTheKeyACheckWrites: statekey.TenantMonthKey names
// the key a check of a tenant with a monthly quota writes its count to,
// and the Redis store reads those counters back for tenants in every slot
// (ReadWindows), on one server and on a Cluster.
func TestTenantMonthKeyIsTheKeyACheckWrites(t *testing.T) {
	for _, c := range testenv.RedisTopologies(t) {
		t.Run(c.Name, func(t *testing.T) {
			ctx := context.Background()
			data := snapshot.Data{
				Plans: []plans.Plan{
					{ID: 1, Name: "hard", IncludedUnits: 1000, QuotaMode: plans.QuotaHard},
					{ID: 2, Name: "overage", IncludedUnits: 1000, QuotaMode: plans.QuotaOverage},
				},
				ServiceTokens: []auth.ServiceToken{},
			}
			var secrets []string
			for i := range 8 {
				id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i+1)
				data.Tenants = append(data.Tenants, tenants.Tenant{ID: id, Name: id, PlanID: int64(1 + i%2), Status: tenants.StatusActive})
				secret, hash, _ := tenants.GenerateKey()
				data.Keys = append(data.Keys, tenants.Key{ID: fmt.Sprintf("key-%d", i), TenantID: id, Hash: hash})
				secrets = append(secrets, secret)
			}
			src := &fixedSource{data: data}
			holder := snapshot.NewHolder(snapshot.DataSource{Data: src.get}, nil)
			testenv.Must(t, holder.Reload(ctx))
			store := redisstore.NewBatching(c.Client, redisstore.BatchConfig{})
			fixture.SeedAll(t, store, c.Prefix)
			checker := NewChecker(holder, store, CheckerConfig{Prefix: c.Prefix})
			defer checker.Close()
			now := time.Now().UTC()
			for i, secret := range secrets {
				for range i + 1 {
					d, err := checker.Check(ctx, Request{Key: secret, Resource: "GET /x", Cost: 3})
					testenv.Must(t, err)
					if !d.Allowed {
						t.Fatalf("tenant %d: check denied: %+v", i, d)
					}
				}
			}
			keys := make([]string, len(data.Tenants))
			for i, tn := range data.Tenants {
				keys[i] = statekey.TenantMonthKey(c.Prefix, tn.ID, plans.QuotaRuleName)
				if n, err := c.Client.Exists(ctx, keys[i]).Result(); err != nil || n != 1 {
					t.Fatalf("tenant %d: key %q exists %d, %v; want the check's counter there", i, keys[i], n, err)
				}
			}
			// One more key that no check wrote reads as not present.
			keys = append(keys, statekey.TenantMonthKey(c.Prefix, "00000000-0000-4000-8000-999999999999", plans.QuotaRuleName))
			windows, err := store.ReadWindows(ctx, keys)
			testenv.Must(t, err)
			month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC).UnixMicro()
			for i, w := range windows[:len(data.Tenants)] {
				if !w.Present || w.Count != int64(3*(i+1)) || w.StartUS != month {
					t.Errorf("tenant %d: counter %+v, want %d units in the window starting %d", i, w, 3*(i+1), month)
				}
			}
			if w := windows[len(windows)-1]; w.Present {
				t.Errorf("a key no check wrote reads %+v, want not present", w)
			}
		})
	}
}

// TestSettleFindsARecordOfTheLegacyLayout: a hold of a tenant whose hash
// tag is 0x80 or more, opened before records were written under the
// states' one-byte tag, is settled at its old key.
func TestSettleFindsARecordOfTheLegacyLayout(t *testing.T) {
	ctx := context.Background()
	store := limiter.NewMemoryStore(nil)
	holder := snapshot.NewHolder(snapshot.DataSource{Data: func() snapshot.Data { return snapshot.Data{} }}, nil)
	c := NewChecker(holder, store, CheckerConfig{Prefix: "tg:"})
	const tag = byte(0xae)
	id := newHoldID(tag, "", &Decision{TenantID: "tenant-1", KeyID: "key-1", Tier: "authenticated"}, Request{})
	legacy := statekey.LegacyHoldKey("tg:", tag, id)
	params := limiter.Params{Algorithm: limiter.GCRA, Limit: 100, PeriodUS: limiter.HourUS, Burst: 100}
	state := string(statekey.AppendKey(nil, "tg:", tag, [3]byte{1, 2, 3}, []byte("short"), nil))
	out, err := store.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: state, Params: params}}, Cost: 60,
		Hold: &limiter.Hold{ID: id, Key: legacy, TTLUS: limiter.HourUS}})
	testenv.Must(t, err)
	if !out.Admitted {
		t.Fatal("the hold was not admitted")
	}
	st, err := c.Settle(ctx, id, 10)
	testenv.Must(t, err)
	if st.Status != "settled" || st.Cost != 10 || st.Estimate != 60 {
		t.Errorf("settlement %+v, want 60 settled at 10", st)
	}
}
