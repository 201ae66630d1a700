package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/breaker"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/usage"
)

// serverConfig is the admin server's configuration, read from TOLLGATE_*
// variables.
type serverConfig struct {
	Addr string
	// JWTSecret signs session tokens (HS256). When TOLLGATE_ADMIN_JWT_SECRET
	// is unset a random one is made at start: sessions then end with the
	// process and are not shared between admin processes.
	JWTSecret          []byte
	JWTSecretGenerated bool
	SessionTTL         time.Duration
	// LoginPerMinute bounds login attempts a minute per client network and
	// email; loginLimiter derives its other limits from it.
	LoginPerMinute int
	// Redis, when an address is set, holds the login limiter's state so
	// that every admin process shares it; otherwise it is in memory.
	Redis     config.Redis
	KeyPrefix string
	// TrustedProxies are the proxies in front of the server whose
	// X-Forwarded-For names the client (for the login limits and audit).
	TrustedProxies httpx.TrustedProxies
	// MetricsAddr, when set, serves Prometheus metrics (the usage worker's
	// and the process's) at /metrics on its own listener.
	MetricsAddr string
	// Webhooks: the deliverers' settings (TOLLGATE_WEBHOOK_*).
	Webhooks webhookConfig
	// Region is the deployment's regions (TOLLGATE_REGION*), which the
	// plans' region scopes are checked against.
	Region          region.Config
	ShutdownTimeout time.Duration
	Log             *slog.Logger
}

func loadServerConfig(getenv func(string) string, stderr io.Writer) (serverConfig, error) {
	e := config.New(getenv)
	c := serverConfig{
		Addr:            e.String("TOLLGATE_ADMIN_ADDR", ":8081"),
		JWTSecret:       []byte(e.String("TOLLGATE_ADMIN_JWT_SECRET", "")),
		SessionTTL:      e.Duration("TOLLGATE_ADMIN_SESSION_TTL", 12*time.Hour),
		LoginPerMinute:  e.Int("TOLLGATE_ADMIN_LOGIN_LIMIT", 5, 1),
		Redis:           e.Redis(""),
		KeyPrefix:       e.KeyPrefix(),
		TrustedProxies:  e.TrustedProxies(),
		MetricsAddr:     e.String("TOLLGATE_ADMIN_METRICS_ADDR", ""),
		Webhooks:        loadWebhookConfig(e),
		Region:          region.Read(e, false),
		ShutdownTimeout: e.Duration("TOLLGATE_SHUTDOWN_TIMEOUT", 10*time.Second),
		Log:             e.Logger(stderr),
	}
	switch n := len(c.JWTSecret); {
	case n == 0:
		c.JWTSecret = make([]byte, 32)
		_, _ = rand.Read(c.JWTSecret)
		c.JWTSecretGenerated = true
	case n < auth.MinSessionSecretLen:
		e.Fail("TOLLGATE_ADMIN_JWT_SECRET", fmt.Sprintf("must be at least %d bytes (e.g. `openssl rand -base64 48`)", auth.MinSessionSecretLen))
	}
	if c.SessionTTL > 30*24*time.Hour {
		e.Fail("TOLLGATE_ADMIN_SESSION_TTL", "must be at most 720h")
	}
	return c, e.Err()
}

const serveHelp = `
Serves until SIGINT or SIGTERM: the web console at /, /api/v1 (the admin
REST API), /healthz, /readyz and /metrics. Unless TOLLGATE_SERVE_WORKER=false it also runs a
usage worker (see "admin worker --help"), and unless TOLLGATE_WEBHOOK_DELIVER=false the
webhook deliverers (any number of admin processes may run them at once). Configuration is by environment
variables: TOLLGATE_ADMIN_ADDR, TOLLGATE_ADMIN_JWT_SECRET,
TOLLGATE_ADMIN_SESSION_TTL, TOLLGATE_ADMIN_LOGIN_LIMIT, TOLLGATE_REDIS_*,
TOLLGATE_USAGE_*, TOLLGATE_WEBHOOK_*, TOLLGATE_LOG_* and TOLLGATE_SHUTDOWN_TIMEOUT; the README
lists them all.`

func serveAdmin(fs *flag.FlagSet) action {
	return func(ctx context.Context, e *invocation) error {
		cfg, err := loadServerConfig(e.getenv, e.stderr)
		if err != nil {
			return err
		}
		return serve(ctx, e, cfg)
	}
}

// serve runs the admin server until ctx ends.
func serve(ctx context.Context, e *invocation, cfg serverConfig) error {
	log := cfg.Log
	redisstore.SetLogger(log) // go-redis's own lines (failed dials) too
	keys, err := e.secretKeys()
	if err != nil {
		return err
	}
	if cfg.JWTSecretGenerated {
		log.Warn("TOLLGATE_ADMIN_JWT_SECRET is not set: using a random secret; sessions end when this process does and are not shared with other admin processes")
	}
	var logins *breaker.Breaker
	if cfg.Redis.Configured() {
		// Short timeouts (TOLLGATE_REDIS_TIMEOUT) and a circuit breaker:
		// when Redis is down, logins fail open at once rather than hang,
		// and the outage is logged once, not per attempt.
		limiterRedis := cfg.Redis
		limiterRedis.NoRetries = true // an attempt must not be counted twice
		rc := limiterRedis.Client()
		defer rc.Close()
		r := cfg.Redis
		ping := redisstore.PingConfigured(r.Addr, r.Cluster, r.Master, r.Sentinels)
		logins = breaker.New(redisstore.New(rc), breaker.Config{
			Component: "login_limiter", Log: log, Ping: ping, Probe: adminapi.LoginProbe(cfg.KeyPrefix),
		})
		defer logins.Close()
	}
	// The usage worker (usage.go) runs inside the server unless
	// TOLLGATE_SERVE_WORKER=false.
	usageCfg, err := loadUsageConfig(e.getenv, e.stderr)
	if err != nil {
		return err
	}
	// One registry: /metrics of the admin server and, when
	// TOLLGATE_ADMIN_METRICS_ADDR is set, of a listener of its own.
	metrics := newRegistry()
	var loginStore limiter.Store // nil: in memory
	if logins != nil {
		loginStore = logins
		metrics.MustRegister(logins.Collectors()...)
	}
	if cfg.MetricsAddr != "" {
		mln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("TOLLGATE_ADMIN_METRICS_ADDR=%s: %w", cfg.MetricsAddr, err)
		}
		// As the admin server's /metrics: a failing collector leaves its
		// metrics out, not the scrape.
		msrv := &http.Server{Handler: promhttp.HandlerFor(metrics, promhttp.HandlerOpts{Registry: metrics, ErrorHandling: promhttp.ContinueOnError}), ReadHeaderTimeout: 5 * time.Second}
		go msrv.Serve(mln) //nolint:errcheck // closed below
		defer msrv.Close()
		log.Info("admin metrics listening", "addr", mln.Addr().String())
	}
	stopWorker, err := startServeWorker(ctx, e, usageCfg, log, metrics)
	if err != nil {
		return err
	}
	defer stopWorker()
	stopDeliverers, err := startDeliverers(ctx, e, cfg.Webhooks, keys, log, metrics)
	if err != nil {
		return err
	}
	defer stopDeliverers()
	stopKeyExpiry := startKeyExpiry(ctx, e, log)
	defer stopKeyExpiry()
	stopSweep := startOutboxSweep(ctx, e, cfg.Webhooks, log)
	defer stopSweep()
	// Invoices at Stripe (billing.go): off without TOLLGATE_STRIPE_SECRET_KEY.
	invoicing, invoicingCfg, err := e.invoicing(log)
	if err != nil {
		return err
	}
	stopInvoicing := startInvoicing(ctx, invoicing, invoicingCfg, log, metrics)
	defer stopInvoicing()
	// The console's overview shows how far behind the usage worker is,
	// when the server has a Redis to read the stream from.
	var usageLag func(context.Context) (usage.Lag, error)
	if usageCfg.ServeWorker || cfg.Redis.Configured() {
		rc := usageCfg.Redis.Client()
		defer rc.Close()
		usageLag = usage.NewRedisConsumer(rc, usage.RedisConsumerConfig{Stream: usageCfg.Stream, Group: usageCfg.Group}).Lag
	}

	srv := &http.Server{
		// Every route sees the client behind the trusted proxies.
		Handler: cfg.TrustedProxies.Middleware(adminapi.NewHandler(adminapi.Config{
			DB: e.db, Usage: usageCfg.reader(e), Log: log, SecretKeys: keys,
			SessionSecret: cfg.JWTSecret, SessionTTL: cfg.SessionTTL,
			LoginStore: loginStore, LoginPerMinute: cfg.LoginPerMinute, KeyPrefix: cfg.KeyPrefix,
			Metrics: metrics, UsageLag: usageLag, Webhooks: cfg.Webhooks.Guard,
			Invoicing: invoicing, Region: cfg.Region,
		})),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("TOLLGATE_ADMIN_ADDR=%s: %w", cfg.Addr, err)
	}
	log.Info("admin listening", "addr", ln.Addr().String())
	if e.ready != nil {
		e.ready <- ln.Addr().String()
	}
	err = httpx.Serve(ctx, srv, ln, cfg.ShutdownTimeout, log)
	log.Info("admin stopped")
	return err
}

// goUntilStopped runs run in a goroutine, on a context that ends with ctx
// or when the returned stop is called; stop then waits for run to return.
// It is how serve and the worker start their background jobs.
func goUntilStopped(ctx context.Context, run func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(ctx)
	}()
	return func() { cancel(); <-done }
}

func healthcheck(fs *flag.FlagSet) action {
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	return func(ctx context.Context, e *invocation) error {
		addr := config.New(e.getenv).String("TOLLGATE_ADMIN_ADDR", ":8081")
		return httpx.Healthcheck(ctx, addr, *timeout)
	}
}
