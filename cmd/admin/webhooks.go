package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/events"
)

// webhookConfig is the webhook deliverers' configuration.
type webhookConfig struct {
	// Deliver runs deliverers in this process (TOLLGATE_WEBHOOK_DELIVER,
	// default true).
	Deliver bool
	// Guard refuses endpoints on private addresses unless
	// TOLLGATE_WEBHOOK_ALLOW_PRIVATE=true.
	Guard events.Guard
	// Timeout bounds one attempt (TOLLGATE_WEBHOOK_TIMEOUT, default 10s).
	Timeout time.Duration
	// Concurrency is how many attempts the process makes at once
	// (TOLLGATE_WEBHOOK_CONCURRENCY, default 8).
	Concurrency int
}

func loadWebhookConfig(e *config.Env) webhookConfig {
	c := webhookConfig{
		Deliver:     e.Bool("TOLLGATE_WEBHOOK_DELIVER", true),
		Guard:       events.Guard{AllowPrivate: e.Bool("TOLLGATE_WEBHOOK_ALLOW_PRIVATE", false)},
		Timeout:     e.Duration("TOLLGATE_WEBHOOK_TIMEOUT", 10*time.Second),
		Concurrency: e.Int("TOLLGATE_WEBHOOK_CONCURRENCY", 8, 1),
	}
	if c.Timeout <= 0 || c.Timeout > 2*time.Minute {
		e.Fail("TOLLGATE_WEBHOOK_TIMEOUT", "must be from 1ms to 2m")
	}
	return c
}

// startDeliverers runs a webhook deliverer until ctx ends or stop is
// called, and registers the webhook metrics on reg.
func startDeliverers(ctx context.Context, e *invocation, c webhookConfig, log *slog.Logger, reg prometheus.Registerer) (stop func()) {
	metrics := events.NewMetrics(e.db)
	reg.MustRegister(metrics.Collectors()...)
	if !c.Deliver {
		return func() {}
	}
	d := events.NewDeliverer(events.DelivererConfig{DB: e.db, Log: log, Guard: c.Guard, Timeout: c.Timeout,
		Concurrency: c.Concurrency, Metrics: metrics})
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(ctx)
	}()
	log.Info("webhook deliverer running", "concurrency", c.Concurrency)
	return func() { cancel(); <-done }
}
