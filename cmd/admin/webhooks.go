package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/tenants"
)

// webhookConfig is the webhook deliverers' configuration.
type webhookConfig struct {
	// Deliver runs deliverers in this process (TOLLGATE_WEBHOOK_DELIVER,
	// default true).
	Deliver bool
	// Guard refuses endpoints on private addresses unless
	// TOLLGATE_WEBHOOK_ALLOW_PRIVATE=true, but for those listed in
	// TOLLGATE_WEBHOOK_ALLOW_ADDRS.
	Guard events.Guard
	// Timeout bounds one attempt (TOLLGATE_WEBHOOK_TIMEOUT, default 10s).
	Timeout time.Duration
	// Concurrency is how many attempts the process makes at once
	// (TOLLGATE_WEBHOOK_CONCURRENCY, default 8).
	Concurrency int
	// Retention is how long finished deliveries, and events without a
	// delivery left, are kept (TOLLGATE_EVENT_RETENTION, default 720h; 0
	// keeps them all).
	Retention time.Duration
}

// allowAddrs reads TOLLGATE_WEBHOOK_ALLOW_ADDRS: addresses webhook
// endpoints may point to although the guard refuses their kind, each an
// IP address and port (127.0.0.1:8082, [::1]:8082: that port only) or an
// IP address alone (every port of it).
func allowAddrs(e *config.Env) []netip.AddrPort {
	var addrs []netip.AddrPort
	for _, v := range e.List("TOLLGATE_WEBHOOK_ALLOW_ADDRS") {
		if ap, err := netip.ParseAddrPort(v); err == nil && ap.Port() != 0 {
			addrs = append(addrs, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			e.Fail("TOLLGATE_WEBHOOK_ALLOW_ADDRS", fmt.Sprintf("%q is not an IP address, nor an IP address and port (127.0.0.1:8082)", v))
			continue
		}
		addrs = append(addrs, netip.AddrPortFrom(a.Unmap(), 0))
	}
	return addrs
}

func loadWebhookConfig(e *config.Env) webhookConfig {
	c := webhookConfig{
		Deliver:     e.Bool("TOLLGATE_WEBHOOK_DELIVER", true),
		Guard:       events.Guard{AllowPrivate: e.Bool("TOLLGATE_WEBHOOK_ALLOW_PRIVATE", false), AllowAddrs: allowAddrs(e)},
		Timeout:     e.Duration("TOLLGATE_WEBHOOK_TIMEOUT", 10*time.Second),
		Concurrency: e.Int("TOLLGATE_WEBHOOK_CONCURRENCY", 8, 1),
	}
	if e.String("TOLLGATE_EVENT_RETENTION", "") != "0" {
		c.Retention = e.Duration("TOLLGATE_EVENT_RETENTION", events.DefaultRetention)
		if c.Retention < 24*time.Hour {
			e.Fail("TOLLGATE_EVENT_RETENTION", "must be at least 24h, or 0 to keep every event and delivery")
		}
	}
	if c.Timeout <= 0 || c.Timeout > 2*time.Minute {
		e.Fail("TOLLGATE_WEBHOOK_TIMEOUT", "must be from 1ms to 2m")
	}
	return c
}

// startDeliverers runs a webhook deliverer until ctx ends or stop is
// called, and registers the webhook metrics on reg.
func startDeliverers(ctx context.Context, e *invocation, c webhookConfig, keys *auth.SecretKeys, log *slog.Logger,
	reg prometheus.Registerer) (stop func(), err error) {
	metrics := events.NewMetrics(e.db)
	reg.MustRegister(metrics.Collectors()...)
	// Secrets stored in the clear by an earlier version, or sealed with a
	// previous TOLLGATE_SECRET_KEY, are sealed with the current key.
	n, unopened, err := events.SealSecrets(ctx, e.db, keys)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		log.Info("sealed webhook endpoint secrets with the current secret key", "endpoints", n)
	}
	if len(unopened) > 0 {
		log.Warn("webhook endpoint secrets sealed with a key that is not configured: their deliveries fail until it is (TOLLGATE_SECRET_KEY_PREVIOUS)",
			"endpoints", unopened)
	}
	if !c.Deliver {
		return func() {}, nil
	}
	d := events.NewDeliverer(events.DelivererConfig{DB: e.db, Log: log, Guard: c.Guard, Timeout: c.Timeout,
		Concurrency: c.Concurrency, Metrics: metrics, SecretKeys: keys})
	stop = goUntilStopped(ctx, func(ctx context.Context) { _ = d.Run(ctx) })
	log.Info("webhook deliverer running", "concurrency", c.Concurrency)
	return stop, nil
}

// startKeyExpiry runs the job that emits key.expiring (safe in any
// number of admin processes at once) until stop is called.
func startKeyExpiry(ctx context.Context, e *invocation, log *slog.Logger) (stop func()) {
	return goUntilStopped(ctx, func(ctx context.Context) {
		tenants.RunKeyExpiry(ctx, e.db, tenants.KeyExpiryInterval, time.Now, log)
	})
}

// startOutboxSweep runs the outbox's sweep (events.RunSweep: retention,
// and failing endpoints that stopped failing; safe in any number of admin
// processes at once) until stop is called.
func startOutboxSweep(ctx context.Context, e *invocation, c webhookConfig, log *slog.Logger) (stop func()) {
	return goUntilStopped(ctx, func(ctx context.Context) {
		events.RunSweep(ctx, e.db, events.SweepInterval, c.Retention, time.Now, log)
	})
}

func webhooksCreate(fs *flag.FlagSet) action {
	url := fs.String("url", "", "where to send events (required)")
	description := fs.String("description", "", "what the endpoint is for")
	types := fs.String("events", "", "comma-separated event types (default: every type; docs/events.md)")
	tenant := tenantFlag(fs, "tenant ID or name: the endpoint receives this tenant's events only")
	asJSON := fs.Bool("json", false, "print the endpoint and secret as JSON")
	return func(ctx context.Context, e *invocation) error {
		owner, err := optionalTenantID(ctx, e, tenant)
		if err != nil {
			return fmt.Errorf("webhooks create: %w", err)
		}
		keys, err := e.secretKeys()
		if err != nil {
			return err
		}
		// A malformed TOLLGATE_WEBHOOK_* setting is refused naming it, as
		// admin serve refuses it, rather than read as unset and the URL
		// then refused for a reason that points away from it.
		env := config.New(e.getenv)
		cfg := loadWebhookConfig(env)
		if err := env.Err(); err != nil {
			return fmt.Errorf("webhooks create: %w", err)
		}
		in := events.EndpointInput{URL: *url, Description: *description, EventTypes: splitList(*types)}
		res, err := events.NewOps(e.db, nil, cfg.Guard).WithSecretKeys(keys).CreateEndpoint(ctx, audit.CLI, owner, in)
		if err != nil {
			return fmt.Errorf("webhooks create: %w", err)
		}
		return printSecret(e, *asJSON, res, "added")
	}
}

// printSecret prints an endpoint's new secret, once: the endpoint and
// secret as JSON with asJSON, else the secret on stdout and what was done
// (such as "added") on stderr.
func printSecret(e *invocation, asJSON bool, res events.IssuedEndpoint, done string) error {
	if asJSON {
		return printJSON(e.stdout, res)
	}
	fmt.Fprintln(e.stdout, res.Secret)
	fmt.Fprintf(e.stderr, "endpoint %s → %s %s; the secret above is not shown again\n", res.Endpoint.ID, res.Endpoint.URL, done)
	return nil
}

// endpointFlag declares --endpoint on fs, a webhook endpoint's ID
// (required), of an operator's or any tenant's.
func endpointFlag(fs *flag.FlagSet) ref[events.Endpoint] {
	return ref[events.Endpoint]{"endpoint", fs.String("endpoint", "", "endpoint ID, as webhooks list shows it (required)"),
		func(ctx context.Context, e *invocation, id string) (events.Endpoint, error) {
			return events.NewStore(e.db).Endpoint(ctx, "", id)
		}}
}

// webhooksDisable stops deliveries to an endpoint, or resumes them
// (disable false), as the console's buttons do.
func webhooksDisable(disable bool) func(fs *flag.FlagSet) action {
	return func(fs *flag.FlagSet) action {
		ops, done := (*events.Ops).Enable, "enabled: its pending deliveries go out when due"
		if disable {
			ops, done = (*events.Ops).Disable, "disabled: it receives no new events, and its pending deliveries wait until it is enabled"
		}
		return changeAction(fs, endpointFlag(fs), "endpoint's",
			func(ctx context.Context, e *invocation, ep events.Endpoint) (events.Endpoint, error) {
				return ops(events.NewOps(e.db, nil, events.Guard{}), ctx, audit.CLI, "", ep.ID)
			}, func(ep events.Endpoint) string { return fmt.Sprintf("endpoint %s → %s %s", ep.ID, ep.URL, done) })
	}
}

func webhooksDelete(fs *flag.FlagSet) action {
	return changeAction(fs, endpointFlag(fs), "deleted endpoint's",
		func(ctx context.Context, e *invocation, ep events.Endpoint) (events.Endpoint, error) {
			return ep, events.NewOps(e.db, nil, events.Guard{}).DeleteEndpoint(ctx, audit.CLI, "", ep.ID)
		}, func(ep events.Endpoint) string {
			return fmt.Sprintf("endpoint %s → %s deleted, with its deliveries", ep.ID, ep.URL)
		})
}

func webhooksRotateSecret(fs *flag.FlagSet) action {
	endpoint := endpointFlag(fs)
	asJSON := fs.Bool("json", false, "print the endpoint and its new secret as JSON")
	return endpoint.run(func(ctx context.Context, e *invocation, ep events.Endpoint) error {
		keys, err := e.secretKeys()
		if err != nil {
			return err
		}
		res, err := events.NewOps(e.db, nil, events.Guard{}).WithSecretKeys(keys).RotateSecret(ctx, audit.CLI, "", ep.ID)
		if err != nil {
			return fmt.Errorf("webhooks rotate-secret: %w", err)
		}
		if res.Endpoint.PreviousSecretUntil == nil {
			return printSecret(e, *asJSON, res, "has a new secret, which signs alone: the previous one is sealed with a secret key that is not configured")
		}
		return printSecret(e, *asJSON, res, "has a new secret (the previous one keeps signing beside it until "+timeCell(res.Endpoint.PreviousSecretUntil)+")")
	})
}

func webhooksList(fs *flag.FlagSet) action {
	return listAction(fs, "endpoint records", []string{"ID", "TENANT", "URL", "STATUS", "EVENTS"},
		func(ctx context.Context, e *invocation) ([]events.Endpoint, func(events.Endpoint) []string, error) {
			list, err := page.All(ctx, func(ctx context.Context, r page.Request) (page.Page[events.Endpoint], error) {
				return events.NewStore(e.db).Endpoints(ctx, "", r)
			})
			if err != nil {
				return nil, nil, err
			}
			names, err := tenantNames(ctx, e)
			return list, func(ep events.Endpoint) []string { return endpointRow(ep, names) }, err
		})
}

// endpointRow is the table row of a webhook endpoint: its tenant's name
// (- for an operator's), status ("enabled", "failing" or "disabled
// (reason)") and event types (* for every type).
func endpointRow(ep events.Endpoint, names map[string]string) []string {
	tenant, status, types := names[ep.TenantID], "enabled", "*"
	if ep.TenantID == "" {
		tenant = "-"
	}
	switch {
	case ep.DisabledAt != nil:
		status = "disabled (" + ep.DisabledReason + ")"
	case ep.FailingSince != nil:
		status = "failing since " + timeCell(ep.FailingSince)
	}
	if len(ep.EventTypes) > 0 {
		types = strings.Join(ep.EventTypes, ",")
	}
	return []string{ep.ID, tenant, ep.URL, status, types}
}

func webhooksReplay(fs *flag.FlagSet) action {
	id := fs.String("endpoint", "", "endpoint ID (required)")
	event := fs.String("event", "", "event ID")
	from := fs.String("from", "", "start of the range, RFC 3339")
	to := fs.String("to", "", "end of the range (exclusive), RFC 3339")
	return func(ctx context.Context, e *invocation) error {
		in := events.ReplayInput{EventID: *event}
		for _, f := range []struct {
			name, value string
			dst         **time.Time
		}{{"from", *from, &in.From}, {"to", *to, &in.To}} {
			if f.value == "" {
				continue
			}
			t, err := time.Parse(time.RFC3339, f.value)
			if err != nil {
				return fmt.Errorf("webhooks replay: --%s: must be an RFC 3339 time such as 2026-03-01T00:00:00Z", f.name)
			}
			if !tollgate.InTimeRange(t) {
				return fmt.Errorf("webhooks replay: --%s: %s", f.name, tollgate.TimeRangeProblem)
			}
			*f.dst = &t
		}
		res, err := events.NewOps(e.db, nil, events.Guard{}).Replay(ctx, audit.CLI, "", *id, in)
		if err != nil {
			return fmt.Errorf("webhooks replay: %w", err)
		}
		queued := fmt.Sprintf("%d deliveries", res.Deliveries)
		if res.Deliveries == 1 {
			queued = "1 delivery"
		}
		fmt.Fprintf(e.stdout, "%s queued for endpoint %s\n", queued, *id)
		return nil
	}
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
