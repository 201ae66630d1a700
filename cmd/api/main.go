// Command api is Tollgate's hot-path check server: POST /v1/check decides
// whether a caller may proceed, from an in-memory snapshot of plans and keys
// and one limiter-store call.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/enforce/limiter"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(1)
	}
}

// Config is cmd/api's configuration, read from TOLLGATE_* variables.
type Config struct {
	Addr            string
	DatabaseURL     string
	Store           string // redis | memory
	Redis           config.Redis
	KeyPrefix       string
	ReloadInterval  time.Duration
	LastUsedFlush   time.Duration
	ShutdownTimeout time.Duration
	Log             *slog.Logger

	// Usage counting: where batches go (stream | postgres | none), how
	// often, and the memory bounds; see internal/usage.
	UsageSink            string
	UsageStream          string
	UsageFlush           time.Duration
	UsageMaxRows         int
	UsageTopIPs          int
	UsageMinuteRetention int
}

func loadConfig(getenv func(string) string, stderr io.Writer) (Config, error) {
	e := config.New(getenv)
	store := e.OneOf("TOLLGATE_STORE", "redis", "redis", "memory")
	// Single-process mode has no Redis: usage goes straight to Postgres.
	defaultSink := "stream"
	if store == "memory" {
		defaultSink = "postgres"
	}
	c := Config{
		Addr:            e.String("TOLLGATE_API_ADDR", ":8080"),
		DatabaseURL:     e.String("TOLLGATE_DATABASE_URL", "postgres://tollgate@127.0.0.1:5432/tollgate?sslmode=disable"),
		Store:           store,
		Redis:           e.Redis("127.0.0.1:6379"),
		KeyPrefix:       e.KeyPrefix(),
		ReloadInterval:  e.Duration("TOLLGATE_SNAPSHOT_RELOAD", 30*time.Second),
		LastUsedFlush:   e.Duration("TOLLGATE_LAST_USED_FLUSH", 5*time.Second),
		ShutdownTimeout: e.Duration("TOLLGATE_SHUTDOWN_TIMEOUT", 10*time.Second),
		Log:             e.Logger(stderr),

		UsageSink:            e.OneOf("TOLLGATE_USAGE_SINK", defaultSink, "stream", "postgres", "none"),
		UsageStream:          e.String("TOLLGATE_USAGE_STREAM", "tollgate:usage"),
		UsageFlush:           e.Duration("TOLLGATE_USAGE_FLUSH", time.Second),
		UsageMaxRows:         e.Int("TOLLGATE_USAGE_MAX_ROWS", 50_000, 100),
		UsageTopIPs:          e.Int("TOLLGATE_USAGE_TOP_IPS", 100, 1),
		UsageMinuteRetention: e.Int("TOLLGATE_USAGE_MINUTE_RETENTION", 3, 1),
	}
	return c, e.Err()
}

// run starts the server and blocks until ctx ends or SIGINT/SIGTERM. When
// ready is not nil, the listening address is sent on it once serving.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, ready chan<- string) error {
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: api\n\nServes the check API. Configuration is by environment variables; see the README.")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	cfg, err := loadConfig(getenv, stderr)
	if err != nil {
		return err
	}
	log := cfg.Log
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	db, err := postgres.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := postgres.CheckSchema(ctx, db); err != nil {
		return err
	}

	var store limiter.Store
	var ping, breakerPing func(context.Context) error
	switch cfg.Store {
	case "memory":
		log.Warn("TOLLGATE_STORE=memory: limiter state lives in this process only; run exactly one api process")
		store = limiter.NewMemoryStore(nil)
		ping = func(context.Context) error { return nil }
	default:
		limiterRedis := cfg.Redis
		limiterRedis.NoRetries = true
		rc := limiterRedis.Client()
		defer rc.Close()
		if err := limiter.LoadScript(ctx, rc); err != nil {
			// Not fatal: checks fail by their rules' failure modes until
			// Redis is back, and the script is loaded on first use.
			log.Warn("redis not reachable at start", "err", err)
		}
		store = limiter.NewRedisStore(rc)
		ping = func(ctx context.Context) error { return rc.Ping(ctx).Err() }
		if len(cfg.Redis.Cluster) > 0 {
			breakerPing = enforce.RedisPing(cfg.Redis.Cluster...)
		} else {
			breakerPing = enforce.RedisPing(cfg.Redis.Addr)
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	recorder, closeUsage := startUsage(cfg, db, reg, log)
	defer func() { // on early returns; a no-op after the flush below
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		closeUsage(ctx)
	}()

	holder := enforce.NewHolder(enforce.NewPostgresSource(db), log)
	if err := holder.Reload(ctx); err != nil {
		return err
	}
	syncCtx, stopSync := context.WithCancel(ctx)
	defer stopSync()
	syncDone := make(chan struct{})
	go func() { defer close(syncDone); holder.Sync(syncCtx, db, cfg.ReloadInterval) }()

	metrics := enforce.NewMetrics(reg, holder)
	// Keys' last-used times are written in the background, never on the
	// hot path.
	lastUsed := enforce.NewLastUsed(tenants.NewStore(db), log)
	reg.MustRegister(lastUsed.Collectors()...)
	lastUsedCtx, stopLastUsed := context.WithCancel(context.WithoutCancel(ctx))
	lastUsedDone := make(chan struct{})
	go func() { defer close(lastUsedDone); lastUsed.Run(lastUsedCtx, cfg.LastUsedFlush) }()
	// Runs after the server has stopped and before the pool closes: the
	// last flush still has Postgres.
	defer func() { stopLastUsed(); <-lastUsedDone }()
	recorders := enforce.Recorders{lastUsed}
	if recorder != nil {
		recorders = append(recorders, recorder)
	}
	checker := enforce.NewChecker(holder, store, enforce.CheckerConfig{
		Prefix: cfg.KeyPrefix, StoreTimeout: cfg.Redis.Timeout, Metrics: metrics, Log: log,
		Recorder: recorders, Breaker: enforce.BreakerConfig{Ping: breakerPing},
	})

	srv := &http.Server{
		Handler:           routes(log, holder, checker, reg, db, ping),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("TOLLGATE_API_ADDR=%s: %w", cfg.Addr, err)
	}
	log.Info("api listening", "addr", ln.Addr().String(), "store", cfg.Store)
	if ready != nil {
		ready <- ln.Addr().String()
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	// Stop accepting, finish in-flight checks, publish the usage they
	// recorded, then stop the syncer; the deferred closes release Redis
	// and Postgres last.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	flushCtx, cancelFlush := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancelFlush()
	closeUsage(flushCtx)
	stopSync()
	<-syncDone
	log.Info("api stopped")
	return err
}

// startUsage starts counting decisions for cfg.UsageSink and returns the
// recorder for the checker and a function that publishes what is left
// (retrying until its context ends) and releases what startUsage opened;
// calls after the first do nothing.
func startUsage(cfg Config, db *pgxpool.Pool, reg prometheus.Registerer, log *slog.Logger) (enforce.Recorder, func(context.Context)) {
	var producer usage.Producer
	release := func() {}
	stopMaintenance := func() {}
	switch cfg.UsageSink {
	case "none":
		log.Warn("TOLLGATE_USAGE_SINK=none: decisions are not counted and will not be billed")
		return nil, func(context.Context) {}
	case "postgres":
		store := usage.NewStore(db, usage.StoreConfig{MinuteRetention: cfg.UsageMinuteRetention})
		producer = usage.StoreProducer{Store: store}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); store.MaintainEvery(ctx, time.Hour, log) }()
		stopMaintenance = func() { cancel(); <-done }
	default:
		// Its own client: publishing must not take connections from the
		// checks, and may take longer than one check's timeout.
		rs := cfg.Redis
		rs.Timeout = max(rs.Timeout, 5*time.Second)
		client := rs.Client()
		producer = usage.NewRedisProducer(client, cfg.UsageStream)
		release = func() { client.Close() }
	}
	agg := usage.NewAggregator(usage.AggregatorConfig{
		Producer: producer, FlushInterval: cfg.UsageFlush, MaxRows: cfg.UsageMaxRows,
		TopIPs: cfg.UsageTopIPs, Registerer: reg, Log: log,
	})
	agg.Start()
	log.Info("counting usage", "sink", cfg.UsageSink, "producer", agg.ProducerID(), "flush", cfg.UsageFlush)
	var once sync.Once
	return agg, func(ctx context.Context) {
		once.Do(func() {
			if err := agg.Close(ctx); err != nil {
				log.Error("usage not fully published", "err", err)
			}
			stopMaintenance()
			release()
		})
	}
}
