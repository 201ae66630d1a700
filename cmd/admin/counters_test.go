package main

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestWorkerCommandReadsTheQuotaCounters: `admin worker` reads the
// tenants' monthly quota counters from TOLLGATE_REDIS_* under
// TOLLGATE_KEY_PREFIX, and records the crossing a counter shows and no
// batch brought (source counter).
func TestWorkerCommandReadsTheQuotaCounters(t *testing.T) {
	url := testenv.DatabaseURL(t)
	client, prefix := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, err := postgres.Open(ctx, url)
	testenv.Must(t, err)
	defer db.Close()
	plan, err := plans.NewStore(db).Put(ctx, plans.Plan{Name: "counted", IncludedUnits: 1000, QuotaMode: plans.QuotaHard})
	testenv.Must(t, err)
	_, err = quota.NewOps(db).SetPlan(ctx, audit.CLI, plan.ID, quota.PlanSettingsInput{Thresholds: []quota.Threshold{{Units: 100}}})
	testenv.Must(t, err)
	tn, err := tenants.NewStore(db).Create(ctx, "counted", plan.ID)
	testenv.Must(t, err)
	// 120 units counted by checks whose usage never arrived.
	keyPrefix := prefix + "rl:"
	rule, _ := plan.QuotaRule()
	out, err := redisstore.New(client).Check(ctx, limiter.Batch{Cost: 120, Requests: []limiter.Request{
		{Key: statekey.TenantMonthKey(keyPrefix, tn.ID, plans.QuotaRuleName), Params: rule.Params()}}})
	testenv.Must(t, err)
	if !out.Admitted {
		t.Fatalf("counting 120 units: %+v", out.Results)
	}

	env := map[string]string{"TOLLGATE_DATABASE_URL": url, "TOLLGATE_REDIS_ADDR": testenv.RedisAddr(t), "TOLLGATE_SECRET_KEY": testenv.SecretKey,
		"TOLLGATE_USAGE_STREAM": prefix + "usage", "TOLLGATE_USAGE_CONSUMER": "cli", "TOLLGATE_KEY_PREFIX": keyPrefix}
	stop := runWorkerCommand(t, ctx, env)
	testenv.WaitFor(t, 30*time.Second, "the worker command recording the crossing", func() bool {
		var source string
		err := db.QueryRow(ctx, `SELECT source FROM quota_crossings WHERE tenant_id = $1 AND units = 100`, tn.ID).Scan(&source)
		return err == nil && source == quota.SourceCounter
	})
	cancel()
	stop()
}
