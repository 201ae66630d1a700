package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/region"
	regionexchange "github.com/tollgate/tollgate/internal/region/exchange"
	"github.com/tollgate/tollgate/internal/snapshot"
)

// startExchanger runs the region's exchanger beside the usage worker
// when TOLLGATE_REGION is set (docs/regions.md), its metrics on reg when
// not nil; stop ends it and waits. A missing or unreachable NATS server
// is an error naming TOLLGATE_REGION_NATS_URL.
func startExchanger(ctx context.Context, e *invocation, c usageConfig, log *slog.Logger, reg prometheus.Registerer) (stop func(), err error) {
	if !c.Region.Enabled() {
		return func() {}, nil
	}
	env := config.New(e.getenv)
	rc := region.Read(env, true)
	if err := env.Err(); err != nil {
		return nil, err
	}
	nc, err := regionexchange.Dial(rc, 5*time.Second)
	if err != nil {
		return nil, err
	}
	client := c.redis()
	x, err := regionexchange.New(client, nc, regionexchange.Config{Region: rc, Prefix: c.KeyPrefix, Log: log,
		SplitRules: func(ctx context.Context) (map[[3]byte]regionexchange.SplitRule, error) { return splitRules(ctx, e) }})
	if err != nil {
		nc.Close()
		client.Close()
		return nil, err
	}
	if reg != nil {
		x.Metrics().Register(reg)
	}
	// Run ends only with ctx: a failure of Redis or NATS, at start or
	// later, is retried and logged as an outage, never the end of the
	// region's exchange while the worker runs on.
	stopExchanger := goUntilStopped(ctx, x.Run)
	return func() { stopExchanger(); nc.Close(); client.Close() }, nil
}

// splitRules returns the global_split windows of the plans by state ID,
// which the rebalancer reads every rebalance interval (and so sees a
// plan's change within one). A rule only a tenant's overrides add is
// not among them: its allotments stay equal.
func splitRules(ctx context.Context, e *invocation) (map[[3]byte]regionexchange.SplitRule, error) {
	list, err := plans.NewStore(e.db).List(ctx)
	if err != nil {
		return nil, err
	}
	rules := map[[3]byte]regionexchange.SplitRule{}
	for _, p := range list {
		for _, r := range snapshot.CompileRules(p) {
			if r.RegionScope == region.GlobalSplit && region.Rebalanced(r.Algorithm) {
				rules[r.StateID] = regionexchange.SplitRule{Name: p.Name + "/" + r.Name, Limit: r.Limit, MinShare: r.MinShare}
			}
		}
	}
	return rules, nil
}
