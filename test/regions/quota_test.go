package regions

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
)

// monthTenant is a tenant whose month is limited to limit units.
type monthTenant struct {
	id, key string
	limit   int64
}

// monthUnits is the month's limit of both tenants of the quota scenario.
const monthUnits = 600

// seedMonths stores, before the api processes load their snapshots, a
// tenant on a plan with a hard monthly quota of monthUnits, and one on an
// overage plan (1 included unit, prorated to the rest of the month; 1
// minor unit a unit past it) capped at monthUnits minor units: monthUnits
// units past what it includes.
func (b *bed) seedMonths(ctx context.Context, db *pgxpool.Pool) {
	rate := plans.Rule{Name: "rate", Resource: "*", Algorithm: limiter.GCRA, Limit: 1_000_000, PeriodUS: limiter.SecondUS,
		Scope: plans.ScopeTenant}
	store := plans.NewStore(db)
	hard, err := store.Put(ctx, plans.Plan{Name: "hard-quota", IncludedUnits: monthUnits, QuotaMode: plans.QuotaHard, Rules: []plans.Rule{rate}})
	testenv.Must(b.t, err)
	metered, err := store.Put(ctx, plans.Plan{Name: "metered", IncludedUnits: 1, OverageUnitMinor: 1, QuotaMode: plans.QuotaOverage, Rules: []plans.Rule{rate}})
	testenv.Must(b.t, err)
	capMinor := int64(monthUnits)
	settings, err := quota.NewOps(db).SetPlan(ctx, audit.CLI, metered.ID, quota.PlanSettingsInput{SpendCapDefaultMinor: &capMinor})
	testenv.Must(b.t, err)
	b.months = map[string]monthTenant{}
	for name, p := range map[string]plans.Plan{"hard quota": hard, "spend cap": metered} {
		tn := fixture.Tenant(b.t, db, name, p.ID)
		key, _ := fixture.Key(b.t, db, tn.ID, "month")
		limit := int64(monthUnits)
		if p.ID == metered.ID {
			limit = quota.Resolve(p, settings, quota.TenantSettings{}, tn.CreatedAt, time.Now()).CapUnits
		}
		b.months[name] = monthTenant{id: tn.ID, key: key, limit: limit}
	}
}

// monthCount reads region name's count of tenant's month.
func (b *bed) monthCount(name, tenant string) int64 {
	rdb := redis.NewClient(&redis.Options{Addr: b.net.Region(name).Redis.Addr()})
	defer rdb.Close()
	n, err := rdb.HGet(context.Background(), statekey.TenantMonthKey("tg:", tenant, plans.QuotaRuleName), "count").Int64()
	if err == redis.Nil {
		return 0
	}
	testenv.Must(b.t, err)
	return n
}

// quota: a hard monthly quota and a spend cap, each of 600 units,
// offered three times that from three regions at once: the tenant's
// month is shared across the regions (global_shared), so each admits
// at most the limit and what the other regions admitted within E + d
// of its last admission, not the limit in every region; and every
// region then counts every admitted unit once.
func (b *bed) quota(t *testing.T) {
	const rate, d = 30, 20 * time.Second // 600 offered per region
	admitted := map[string]map[string][]time.Time{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sampled := b.sampleStaleness()
	degraded := b.degraded.Load()
	for limit, tn := range b.months {
		admitted[limit] = map[string][]time.Time{}
		for _, name := range names {
			wg.Go(func() {
				a, _ := b.loadKey(b.apis[name], tn.key, "GET /month", rate, d)
				mu.Lock()
				admitted[limit][name] = a
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	stale := sampled()
	// A check a failure mode admitted (its region's Redis not answering
	// in time on a loaded machine) may have been counted by its store
	// call as well: every region then counts it, once. (Of either
	// month: the bound is on both together.)
	twice := b.degraded.Load() - degraded
	for limit, tn := range b.months {
		var total int64
		for _, name := range names {
			total += int64(len(admitted[limit][name]))
		}
		bound := sharedBound(tn.limit, admitted[limit], stale.window())
		var converged time.Duration
		loaded := time.Now()
		testenv.Eventually(t, loaded, 30*time.Second, limit+": every region counting every admitted unit", func() (bool, string) {
			got := map[string]int64{}
			all := true
			for _, name := range names {
				got[name] = b.monthCount(name, tn.id)
				all = all && got[name] >= total && got[name] <= total+twice && got[name] == got[names[0]]
			}
			converged = time.Since(loaded)
			return all, fmt.Sprintf("%v, admitted %d (%d more at most, by failure modes)", got, total, twice)
		})
		t.Logf("figure quota, %s: %d of %d offered from three regions admitted (limit %d, bound %d with %v: overshoot %d; counted by each region alone, up to %d); every region counting them %v after the load",
			limit, total, 3*rate*int(d.Seconds()), tn.limit, bound, stale, total-tn.limit,
			3*tn.limit, converged.Round(time.Millisecond))
		if total > bound {
			t.Errorf("%s: admitted %d, above the bound %d", limit, total, bound)
		}
		if total < tn.limit {
			t.Errorf("%s: admitted %d, fewer than the limit %d", limit, total, tn.limit)
		}
	}
}
