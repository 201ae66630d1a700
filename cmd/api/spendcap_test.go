package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tollgate "github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/usage"
)

// TestSpendCapSetMidMonthCountsTheWholeMonth: a cap set after the tenant
// ran past its included units counts the units already used this month,
// so the month's statement stays within the base fee plus the cap; a cap
// below what is already used denies at once. GET /v1/me shows the
// month's units past the included ones.
func TestSpendCapSetMidMonthCountsTheWholeMonth(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	ctx := context.Background()
	metered := plans.Plan{Name: "metered", BaseFeeMinor: 1000, IncludedUnits: 100, OverageUnitMinor: 2, QuotaMode: plans.QuotaOverage}
	late, lateKey := quotaTenant(t, r, "late", metered, quota.PlanSettingsInput{})
	low, lowKey := quotaTenant(t, r, "low", metered, quota.PlanSettingsInput{})
	apis := r.startFleet(t, 3)
	before := map[string]int64{}
	for _, k := range []string{lateKey, lowKey} {
		got, denied := r.spend(t, apis.addrs(), k, 150, 5000)
		if got < 150 || len(denied) > 0 {
			t.Fatalf("before the cap: %d units allowed, denials %v", got, denied)
		}
		before[k] = got
	}
	var st tollgate.Standing
	if status, _, p := getMe(t, "http://"+apis.addrs()[0], bearer(lateKey), &st); status != http.StatusOK || st.Quota == nil ||
		st.Quota.Used != before[lateKey] || st.Quota.Remaining != 0 {
		t.Errorf("GET /v1/me: %d %v, quota %+v; want %d used of 100", status, p, st.Quota, before[lateKey])
	}

	// 200 of overage money pays for 100 overage units: 200 units in all.
	// 40 pays for 20: 120 units, fewer than the tenant already used.
	ops := quota.NewOps(r.db)
	capMinor, lowCap := int64(200), int64(40)
	_, err := ops.SetTenantSpendCap(ctx, audit.CLI, late, &capMinor)
	testenv.Must(t, err)
	_, err = ops.SetTenantSpendCap(ctx, audit.CLI, low, &lowCap)
	testenv.Must(t, err)
	for _, a := range apis.addrs() {
		waitForRule(t, r, a, lateKey, plans.SpendCapRuleName)
		waitForRule(t, r, a, lowKey, plans.SpendCapRuleName)
	}

	after, denied := r.spend(t, apis.addrs(), lateKey, 1<<40, 3000)
	if total := before[lateKey] + after; total > 200 || total < 198 || denied[tollgate.ReasonSpendCap] == 0 || len(denied) != 1 {
		t.Errorf("after the cap: %d units in the month (want 198–200: the last checks cost up to 3), denials %v (want spend_cap only)",
			total, denied)
	}
	if after, denied := r.spend(t, apis.addrs(), lowKey, 1<<40, 60); after != 0 || denied[tollgate.ReasonSpendCap] != 60 {
		t.Errorf("a cap below the month's units: %d more units allowed, denials %v; want every check denied with spend_cap", after, denied)
	}
	apis.settle(t)
	stmt, err := billing.NewStore(r.db, nil).Statement(ctx, late, usage.MonthOf(time.Now()))
	testenv.Must(t, err)
	if stmt.Usage.AllowedUnits != before[lateKey]+after || stmt.TotalMinor > stmt.BaseFeeMinor+capMinor {
		t.Errorf("statement: %d units, base %d, total %d; want %d units and total ≤ base + %d",
			stmt.Usage.AllowedUnits, stmt.BaseFeeMinor, stmt.TotalMinor, before[lateKey]+after, capMinor)
	}
}

// waitForRule waits until a dry run of key on the api at addr applies
// the rule named name: the api has loaded the change that brought it.
func waitForRule(t *testing.T, r *rig, addr, key, name string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	testenv.Eventually(t, time.Now(), 10*time.Second, "the api applies "+name, func() (bool, string) {
		var d struct {
			Rules []struct {
				Name string `json:"name"`
			} `json:"rules"`
		}
		err := postJSON(client, "http://"+addr+"/v1/check", r.token, map[string]any{"key": key, "resource": "GET /x", "dry_run": true}, &d)
		names := []string{}
		for _, rr := range d.Rules {
			names = append(names, rr.Name)
		}
		return err == nil && slices.Contains(names, name), fmt.Sprintf("rules %v, %v", names, err)
	})
}

// TestSpendCapNeverRestartsAfterRedisIsFlushed: Redis is flushed
// (FLUSHALL, as a restart without persistence) while 8 clients draw on a
// capped tenant through two api processes, a little past half the cap
// (the first half in the rollups). The
// month's count is not restarted from zero: until the api processes
// have rebuilt it from the rollups the cap answers unavailable, then it
// holds from the rebuilt count. What cannot be known is what was
// admitted and not yet in the rollups at the flush (read as the units
// the clients saw admitted by then and the checks in flight, which Redis
// may have admitted, less the rollups just before it; the journals'
// units, lost with Redis, are among them):
// the units admitted in the month stay within the cap plus that, and so
// does the statement (base + cap + that many units' overage). Before
// the rebuild a second cap's worth was admitted.
func TestSpendCapNeverRestartsAfterRedisIsFlushed(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, testenv.DatabaseURL(t))
	r.ownRedis(t) // FLUSHALL must not touch other tests'
	metered := plans.Plan{Name: "metered", BaseFeeMinor: 1000, IncludedUnits: 100, OverageUnitMinor: 2, QuotaMode: plans.QuotaOverage}
	tenantID, key := quotaTenant(t, r, "capped", metered, quota.PlanSettingsInput{})
	// 400 of overage money pays for 200 overage units: 300 units in all.
	const capMinor, capUnits = int64(400), int64(300)
	capValue := capMinor
	_, err := quota.NewOps(r.db).SetTenantSpendCap(ctx, audit.CLI, tenantID, &capValue)
	testenv.Must(t, err)
	apis := r.startFleet(t, 2)
	for _, a := range apis.addrs() {
		waitForRule(t, r, a, key, plans.SpendCapRuleName)
	}
	month := usage.MonthOf(time.Now())
	now := time.Now().UTC()
	monthStart := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	rollups := func() int64 {
		var n int64
		if err := r.db.QueryRow(ctx, `SELECT coalesce(sum(allowed_units), 0)::bigint FROM usage_month
			WHERE tenant_id = $1 AND bucket_start = $2`, tenantID, monthStart).Scan(&n); err != nil {
			t.Errorf("rollups: %v", err)
		}
		return n
	}

	// Half the cap, applied to the rollups; then the clients draw again
	// and Redis is flushed a few units into it, with checks in flight.
	first, denied := r.spend(t, apis.addrs(), key, capUnits/2, 1000)
	if first < capUnits/2 || len(denied) > 0 {
		t.Fatalf("before the flush: %d units allowed, denials %v", first, denied)
	}
	testenv.Eventually(t, time.Now(), 30*time.Second, "the first units in the rollups", func() (bool, string) {
		n := rollups()
		return n == first, fmt.Sprint(n, " of ", first)
	})
	client := &http.Client{Timeout: 30 * time.Second}
	// inflight counts the checks sent and not yet answered: at the flush,
	// Redis may have admitted them already.
	var admitted, unavailable, sent, inflight atomic.Int64
	admitted.Store(first)
	flushAt := first + 10
	var flushOnce sync.Once
	var unknown int64 // admitted by the flush and not in the rollups before it
	// The clients hold off while the rollups are read (a query takes
	// longer than many checks), and go on as Redis is flushed.
	var reading sync.RWMutex
	flushed := make(chan struct{})
	flush := func() {
		defer close(flushed)
		reading.Lock()
		before := rollups()
		reading.Unlock()
		if err := r.redis.FlushAll(ctx).Err(); err != nil {
			t.Errorf("flush: %v", err)
		}
		unknown = admitted.Load() + inflight.Load() - before
		t.Logf("flushed with %d admitted and %d in flight, %d in the rollups", admitted.Load(), inflight.Load(), before)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sent.Add(1) <= 3000 {
				reading.RLock()
				inflight.Add(1)
				res, err := checkReason(client, apis.addrs()[i%2], r.token, map[string]any{"key": key, "resource": "GET /x", "cost": 1})
				if err == nil && res.Allowed {
					if admitted.Add(1) == flushAt {
						go flushOnce.Do(flush) // not under this client's read lock
					}
				}
				inflight.Add(-1)
				reading.RUnlock()
				switch {
				case err != nil:
					t.Errorf("check: %v", err)
					return
				case res.Allowed:
				case res.Reason == tollgate.ReasonSpendCap:
					return
				case res.Reason == tollgate.ReasonUnavailable:
					unavailable.Add(1) // retried at once: the rebuild is at most a second away
				default:
					t.Errorf("denied for %s", res.Reason)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-flushed:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d admitted: Redis was never flushed", admitted.Load())
	}
	apis.settle(t)
	stmt, err := billing.NewStore(r.db, nil).Statement(ctx, tenantID, month)
	testenv.Must(t, err)
	t.Logf("admitted %d (bound: cap %d + %d unknown at the flush); %d checks answered unavailable; statement %d units, total %d",
		admitted.Load(), capUnits, unknown, unavailable.Load(), stmt.Usage.AllowedUnits, stmt.TotalMinor)
	if got := admitted.Load(); got > capUnits+unknown {
		t.Errorf("admitted %d units in the month; want at most the cap %d + %d unknown at the flush", got, capUnits, unknown)
	}
	if stmt.TotalMinor > stmt.BaseFeeMinor+capMinor+unknown*metered.OverageUnitMinor {
		t.Errorf("statement total %d; want at most base %d + cap %d + %d unknown units' overage",
			stmt.TotalMinor, stmt.BaseFeeMinor, capMinor, unknown)
	}
}
