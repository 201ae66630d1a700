package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/internal/config"
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
	if reg != nil {
		x.Metrics().Register(reg)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := x.Run(ctx); err != nil {
			log.Error("region exchange stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done; nc.Close(); client.Close() }, nil
}
