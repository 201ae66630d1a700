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
	x, err := regionexchange.New(client, nc, regionexchange.Config{Region: rc, Prefix: c.KeyPrefix, Log: log})
	if err != nil {
		nc.Close()
		client.Close()
		return nil, err
	}
	share := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tollgate_region_share",
		Help: "This region's allotment of each global_split rule (plan/rule), as a fraction of the rule's limit."}, []string{"rule"})
	if reg != nil {
		x.Metrics().Register(reg)
		reg.MustRegister(share)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := x.Run(ctx); err != nil {
			log.Error("region exchange stopped", "err", err)
		}
	}()
	shareDone := make(chan struct{})
	go func() {
		defer close(shareDone)
		for {
			reportShares(ctx, e, rc, share)
			select {
			case <-ctx.Done():
				return
			case <-time.After(rc.RebalanceInterval):
			}
		}
	}()
	return func() { cancel(); <-done; <-shareDone; nc.Close(); client.Close() }, nil
}

// reportShares sets share to this region's allotment of every
// global_split rule of the plans, as a fraction of its limit.
func reportShares(ctx context.Context, e *invocation, rc region.Config, share *prometheus.GaugeVec) {
	list, err := plans.NewStore(e.db).List(ctx)
	if err != nil {
		return // the next round reads them again
	}
	share.Reset()
	for _, p := range list {
		for _, r := range p.Rules {
			if r.RegionScope != region.GlobalSplit || r.Limit <= 0 {
				continue
			}
			limit, _ := rc.Allotment(r.Limit, r.Burst)
			share.WithLabelValues(p.Name + "/" + r.Name).Set(float64(limit) / float64(r.Limit))
		}
	}
}
