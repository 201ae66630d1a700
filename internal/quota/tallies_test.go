package quota_test

import (
	"context"
	"testing"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/metering/meteringtest"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestRebuildTalliesFromTheRollups: a store that lost its data (flushed)
// decides no tenant's month until RebuildTallies has written each one
// from the month's rollups — of the tenants whose plan keeps a month
// count, this month's units only — and set the markers; a second pass
// finds nothing missing.
func TestRebuildTalliesFromTheRollups(t *testing.T) {
	ctx := context.Background()
	var c rateClock
	c.set(t, "2026-11-10T12:00:30Z")
	workers, db := separateWorkers(t, 1, c.now, quota.IngestConfig{})
	const prefix = "tg:"
	r := newCounterRig(t, db, nil, prefix)
	busy, quiet := r.tenant(t, "busy"), r.tenant(t, "quiet")
	free, err := plans.NewStore(db).Put(ctx, plans.Plan{Name: "free-of-quota", IncludedUnits: 1000})
	testenv.Must(t, err)
	uq, err := tenants.NewStore(db).Create(ctx, "unquoted", free.ID)
	testenv.Must(t, err)
	unquoted := uq.ID
	applyRows(t, workers[0],
		meteringtest.Row(meteringtest.At(t, "2026-11-10T11:00"), busy, meteringtest.ID(800), "GET /x", metering.Counts{Allowed: 90, AllowedUnits: 90}),
		meteringtest.Row(meteringtest.At(t, "2026-11-03T09:00"), busy, meteringtest.ID(801), "GET /y", metering.Counts{Allowed: 7, AllowedUnits: 7}),
		meteringtest.Row(meteringtest.At(t, "2026-10-30T09:00"), busy, meteringtest.ID(802), "GET /x", metering.Counts{Allowed: 500, AllowedUnits: 500}),
		meteringtest.Row(meteringtest.At(t, "2026-11-10T11:00"), quiet, meteringtest.ID(803), "GET /x", metering.Counts{Allowed: 4, AllowedUnits: 4}),
		meteringtest.Row(meteringtest.At(t, "2026-11-10T11:00"), unquoted, meteringtest.ID(804), "GET /x", metering.Counts{Allowed: 50, AllowedUnits: 50}),
	)

	nowUS := c.now().UnixMicro()
	store := limiter.NewMemoryStore(func() int64 { return nowUS })
	store.Flush()
	rule, _ := r.plan.QuotaRule()
	params := rule.Params()
	params.Seed = limiter.SeedOpen
	remaining := func(tenantID string) limiter.Result {
		t.Helper()
		out, err := store.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: statekey.TenantMonthKey(prefix, tenantID, plans.QuotaRuleName),
			Params: params}}})
		testenv.Must(t, err)
		return out.Results[0]
	}
	if res := remaining(busy); !res.Unknown {
		t.Fatalf("before the rebuild: %+v, want unknown", res)
	}
	n, err := quota.RebuildTallies(ctx, db, store, prefix, c.now())
	testenv.Must(t, err)
	if n != 254 {
		t.Errorf("rebuilt %d hash tags, want all 254", n)
	}
	for _, tc := range []struct {
		name, id string
		left     int64
	}{{"busy", busy, 1000 - 97}, {"quiet", quiet, 1000 - 4}, {"unquoted", unquoted, 1000}} {
		if res := remaining(tc.id); res.Unknown || res.Remaining != tc.left {
			t.Errorf("%s after the rebuild: %+v, want %d left", tc.name, res, tc.left)
		}
	}
	if n, err := quota.RebuildTallies(ctx, db, store, prefix, c.now()); err != nil || n != 0 {
		t.Errorf("second pass: %d tags, %v; want none", n, err)
	}
}
