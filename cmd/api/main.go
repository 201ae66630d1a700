// Command api is Tollgate's hot-path check server: POST /v1/check decides
// whether a caller may proceed, from an in-memory snapshot of plans and keys
// and one limiter-store call.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tollgate/tollgate/internal/breaker"
	"github.com/tollgate/tollgate/internal/buildinfo"
	"github.com/tollgate/tollgate/internal/checkapi"
	"github.com/tollgate/tollgate/internal/checkapi/envoyrls"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/snapshot"
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
	Addr string
	// DebugAddr, when set, serves net/http/pprof there (for profiling;
	// keep it on loopback).
	DebugAddr   string
	DatabaseURL string
	Store       string // redis | memory
	Redis       config.Redis
	// Linger is how long a check that would reach Redis alone may wait
	// for others to share its script call, while checks arrive often
	// enough (redisstore.BatchConfig.Linger).
	Linger time.Duration
	// BatchOps queues settlements and lease operations with the checks
	// (redisstore.BatchConfig.Operations).
	BatchOps        bool
	KeyPrefix       string
	ReloadInterval  time.Duration
	LastUsedFlush   time.Duration
	ShutdownTimeout time.Duration
	IPv6Prefix      int
	Usage           config.Usage
	// TrustedProxies are hops in front of the gateways (forward-auth).
	TrustedProxies httpx.TrustedProxies
	Forward        config.Forward
	Envoy          config.Envoy
	// Region is the process's region (TOLLGATE_REGION*): the zero value
	// for a deployment of one region.
	Region region.Config
	Log    *slog.Logger
}

// maxLingerShare: TOLLGATE_REDIS_LINGER may be at most
// TOLLGATE_REDIS_TIMEOUT / maxLingerShare.
const maxLingerShare = 4

func loadConfig(getenv func(string) string, stderr io.Writer) (Config, error) {
	e := config.New(getenv)
	store := e.Store()
	c := Config{
		Addr:            e.String("TOLLGATE_API_ADDR", ":8080"),
		DebugAddr:       e.String("TOLLGATE_DEBUG_ADDR", ""),
		DatabaseURL:     e.String("TOLLGATE_DATABASE_URL", "postgres://tollgate@127.0.0.1:5432/tollgate?sslmode=disable"),
		Store:           store,
		Redis:           e.Redis("127.0.0.1:6379"),
		Linger:          e.Duration("TOLLGATE_REDIS_LINGER", 0),
		BatchOps:        e.Bool("TOLLGATE_REDIS_BATCH_OPS", false),
		KeyPrefix:       e.KeyPrefix(),
		ReloadInterval:  e.Duration("TOLLGATE_SNAPSHOT_RELOAD", 30*time.Second),
		LastUsedFlush:   e.Duration("TOLLGATE_LAST_USED_FLUSH", 5*time.Second),
		ShutdownTimeout: e.Duration("TOLLGATE_SHUTDOWN_TIMEOUT", 10*time.Second),
		IPv6Prefix:      e.Int("TOLLGATE_IPV6_PREFIX", 64, 1),
		Usage:           e.Usage(store),
		TrustedProxies:  e.TrustedProxies(),
		Forward:         e.Forward(),
		Envoy:           e.Envoy(),
		Region:          region.Read(e, false),
		Log:             e.Logger(stderr),
	}
	if c.IPv6Prefix > 128 {
		e.Fail("TOLLGATE_IPV6_PREFIX", "must be from 1 to 128")
	}
	// A check's linger counts against its call's timeout: with a linger
	// near TOLLGATE_REDIS_TIMEOUT, checks that waited fail with a deadline
	// and the failure modes decide them under steady traffic.
	if c.Linger > c.Redis.Timeout/maxLingerShare {
		e.Fail("TOLLGATE_REDIS_LINGER", fmt.Sprintf("%v: at most a quarter of TOLLGATE_REDIS_TIMEOUT (%v), which bounds the linger and the script call together",
			c.Linger, c.Redis.Timeout))
	}
	return c, e.Err()
}

const usageText = `usage: api [flags]
       api healthcheck

Without a command, serves the check API (POST /v1/check, /healthz, /readyz,
/metrics) on TOLLGATE_API_ADDR until SIGINT or SIGTERM. Configuration is by
TOLLGATE_* environment variables; see the README.

healthcheck asks the server on TOLLGATE_API_ADDR for /healthz over loopback
and exits 0 when it answers, 1 otherwise (for container health checks).

flags:
`

// helpRequested reports whether args ask for help anywhere before "--"
// (`api healthcheck --help` explains, it does not probe).
func helpRequested(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}

// run starts the server and blocks until ctx ends or SIGINT/SIGTERM. When
// ready is not nil, the check API's listening address is sent on it once
// serving, then, when TOLLGATE_ENVOY_GRPC_ADDR is set, the Envoy
// rate-limit service's.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, ready chan<- string) error {
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	if helpRequested(args) {
		// Help that was asked for goes to stdout; after a mistake, to
		// stderr.
		fs.SetOutput(stdout)
		fs.Usage()
		return nil
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *showVersion {
		fmt.Fprintln(stdout, "api", buildinfo.Read())
		return nil
	}
	switch fs.Arg(0) {
	case "":
	case "healthcheck":
		addr := config.New(getenv).String("TOLLGATE_API_ADDR", ":8080")
		return httpx.Healthcheck(ctx, addr, 3*time.Second)
	default:
		fs.SetOutput(stderr)
		fs.Usage()
		return fmt.Errorf("unknown command %q", strings.Join(fs.Args(), " "))
	}
	cfg, err := loadConfig(getenv, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv, err := load(ctx, cfg)
	if err != nil {
		return err
	}
	defer srv.close()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("TOLLGATE_API_ADDR=%s: %w", cfg.Addr, err)
	}
	if cfg.DebugAddr != "" {
		dln, err := net.Listen("tcp", cfg.DebugAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("TOLLGATE_DEBUG_ADDR=%s: %w", cfg.DebugAddr, err)
		}
		debug := &http.Server{Handler: debugHandler(), ReadHeaderTimeout: 5 * time.Second}
		go debug.Serve(dln) //nolint:errcheck // closed below
		defer debug.Close()
		cfg.Log.Info("debug listening", "addr", dln.Addr().String())
	}
	cfg.Log.Info("api listening", "addr", ln.Addr().String(), "store", cfg.Store)
	if ready != nil {
		ready <- ln.Addr().String()
		if srv.envoyAddr != "" {
			ready <- srv.envoyAddr
		}
	}
	err = httpx.Serve(ctx, srv.http, ln, cfg.ShutdownTimeout, cfg.Log)
	cfg.Log.Info("api stopped")
	return err
}

// debugHandler serves the runtime profiles of net/http/pprof.
func debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// server is a loaded check server: its handler and everything that runs
// behind it.
type server struct {
	cfg  Config
	http *http.Server
	// envoyAddr is where the Envoy rate-limit service listens ("": off).
	envoyAddr string
	// closers release what load started, last started first.
	closers []func()
}

// load opens the stores, loads the first snapshot and starts the
// background work (snapshot sync, last-used writer, usage counting). On
// an error it releases what it had started.
func load(ctx context.Context, cfg Config) (_ *server, err error) {
	s := &server{cfg: cfg} // not the result: a failure returns nil, and closes s
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	log := cfg.Log
	redisstore.SetLogger(log) // go-redis's own lines (failed dials) too
	db, err := postgres.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	s.onClose(db.Close)
	if err := postgres.CheckSchema(ctx, db); err != nil {
		return nil, err
	}

	store, pingStore, breakerPing := s.limiterStore(ctx)
	if ms, ok := store.(*limiter.MemoryStore); ok {
		// This process's store holds none of what an earlier one
		// counted: its tallies are rebuilt from the rollups before any
		// check decides on them, as after a Redis restarted empty.
		ms.Flush()
		s.drainCredits(db, ms)
	}
	if seeder, ok := store.(limiter.TallySeeder); ok {
		s.rebuildTallies(ctx, db, seeder)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildinfo.Collector())

	// Deferred before the usage flush below, so it runs after it: the
	// syncer stops once the last usage is published.
	holder := snapshot.NewHolder(snapshot.NewPostgresSource(db).InRegion(cfg.Region.Name), log)
	if err := holder.Reload(ctx); err != nil {
		return nil, err
	}
	s.background(func(ctx context.Context) { holder.Sync(ctx, db, cfg.ReloadInterval) })

	// Keys' last-used times are written in the background, never on the
	// hot path; the last flush still has Postgres.
	lastUsed := enforce.NewLastUsed(tenants.NewStore(db), log)
	reg.MustRegister(lastUsed.Collectors()...)
	s.background(func(ctx context.Context) { lastUsed.Run(ctx, cfg.LastUsedFlush) })

	recorders := enforce.Recorders{lastUsed}
	if recorder := s.startUsage(db, reg); recorder != nil {
		recorders = append(recorders, recorder)
	}
	checker := enforce.NewChecker(holder, store, enforce.CheckerConfig{
		Prefix: cfg.KeyPrefix, StoreTimeout: cfg.Redis.Timeout, Metrics: enforce.NewMetrics(reg, holder), Log: log,
		Recorder: recorders, IPv6Prefix: cfg.IPv6Prefix, Breaker: breaker.Config{Ping: breakerPing},
		// The usage worker drains the store's journals with the stream.
		JournalUsage: cfg.Store == "redis" && cfg.Usage.Sink == "stream" && cfg.Usage.Journal,
		Region:       cfg.Region,
	})
	s.onClose(checker.Close) // the breaker's background probing
	// Holds that expire unsettled give back (or keep) their estimate; any
	// api process may expire any hold, each exactly once.
	s.background(func(ctx context.Context) { checker.RunHoldExpiry(ctx, time.Second, log) })
	// Gateways refused for their own service token, over HTTP and gRPC.
	refusals := checkapi.NewGatewayRefusals(reg, log)
	s.http = &http.Server{
		Handler: checkapi.NewHandler(checkapi.Deps{
			Log: log, Holder: holder, Checker: checker, Registry: reg, GatewayRefusals: refusals,
			PingPostgres: pingPostgres(db), PingStore: pingStore,
			Forward: checkapi.ForwardConfig{KeyHeaders: cfg.Forward.KeyHeaders, KeyQuery: cfg.Forward.KeyQuery,
				TrustedProxies: cfg.TrustedProxies},
			Region: cfg.Region,
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	if cfg.Envoy.Addr != "" {
		if err := s.startEnvoy(checker, enforce.NewTokenVerifier(holder), refusals); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// pingPostgres is how /readyz asks Postgres: it answers, with the schema
// this binary expects (asked at most every 5 s). A schema migrated down or
// up under the process fails every snapshot reload, which it logs; the
// checks go on from the snapshot it holds.
func pingPostgres(db *pgxpool.Pool) func(context.Context) error {
	schema := postgres.NewSchemaCheck(db, 5*time.Second)
	return func(ctx context.Context) error {
		if err := db.Ping(ctx); err != nil {
			return err
		}
		return schema.Check(ctx)
	}
}

// startEnvoy serves Envoy's rate-limit service (gRPC) on
// TOLLGATE_ENVOY_GRPC_ADDR. Closing the server stops it first: calls in
// flight finish (for at most ShutdownTimeout) while usage and the stores
// are still there.
func (s *server) startEnvoy(checker *enforce.Checker, tokens *enforce.TokenVerifier, refusals *checkapi.GatewayRefusals) error {
	cfg := s.cfg
	ln, err := net.Listen("tcp", cfg.Envoy.Addr)
	if err != nil {
		return fmt.Errorf("TOLLGATE_ENVOY_GRPC_ADDR=%s: %w", cfg.Envoy.Addr, err)
	}
	g := envoyrls.NewServer(checker, tokens, envoyrls.Config{KeyEntry: cfg.Envoy.KeyEntry, IPEntry: cfg.Envoy.IPEntry,
		ResourceEntries: cfg.Envoy.ResourceEntries, TrustedProxies: cfg.TrustedProxies, Refusals: refusals}, cfg.Log)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.Serve(ln); err != nil {
			cfg.Log.Error("envoy rate-limit service stopped", "err", err)
		}
	}()
	s.envoyAddr = ln.Addr().String()
	cfg.Log.Info("envoy rate-limit service listening", "addr", s.envoyAddr)
	s.onClose(func() {
		stopped := make(chan struct{})
		go func() { g.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(cfg.ShutdownTimeout):
			cfg.Log.Warn("envoy rate-limit service did not drain in time", "drain", cfg.ShutdownTimeout)
			g.Stop()
		}
		<-done
	})
	return nil
}

// limiterStore returns the limiter store cfg.Store names, how to ping it
// for /readyz, and how the circuit breaker pings Redis on a fresh
// connection (nil for the memory store).
func (s *server) limiterStore(ctx context.Context) (store limiter.Store, ping, breakerPing func(context.Context) error) {
	if s.cfg.Store == "memory" {
		s.cfg.Log.Warn("TOLLGATE_STORE=memory: limiter state lives in this process only; run exactly one api process")
		return limiter.NewMemoryStore(nil), func(context.Context) error { return nil }, nil
	}
	limiterRedis := s.cfg.Redis
	limiterRedis.NoRetries = true
	rc := limiterRedis.Client()
	s.onClose(func() { rc.Close() })
	if err := redisstore.LoadScript(ctx, rc); err != nil {
		// Not fatal: checks fail by their rules' failure modes until
		// Redis is back, and the script is loaded on first use.
		s.cfg.Log.Warn("redis not reachable at start", "err", err)
	}
	r := s.cfg.Redis
	breakerPing = redisstore.PingConfigured(r.Addr, r.Cluster, r.Master, r.Sentinels)
	// Concurrent checks share script calls: a lone check goes out at
	// once, the ones that arrive while a call is under way go together in
	// the next.
	rs := redisstore.NewBatching(rc, redisstore.BatchConfig{Timeout: limiterRedis.Timeout, Linger: s.cfg.Linger,
		Operations: s.cfg.BatchOps})
	rs.HoldIndex = s.cfg.KeyPrefix + "holds"
	rs.WaitReplicas, rs.WaitTimeout = r.WaitReplicas, r.WaitTimeout
	// Before the client closes: the holds still being listed for expiry
	// are logged, and no listing outlives the server.
	s.onClose(rs.Close)
	if r.WaitReplicas > 0 {
		s.cfg.Log.Info("money waits for replicas", "replicas", r.WaitReplicas, "timeout", r.WaitTimeout)
	}
	return rs, func(ctx context.Context) error { return rc.Ping(ctx).Err() }, breakerPing
}

// rebuildTallies rebuilds the tenants' month counts the limiter store
// lost (quota.RebuildTallies): once before the server serves, so that a
// new store decides them at once, then every second in the background,
// so that a Redis restarted empty refuses capped checks for about a
// second at most.
func (s *server) rebuildTallies(ctx context.Context, db *pgxpool.Pool, seeder limiter.TallySeeder) {
	first, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := quota.RebuildTallies(first, db, seeder, s.cfg.KeyPrefix, time.Now()); err != nil {
		s.cfg.Log.Warn("tally rebuild at start failed; retrying every second", "err", err)
	}
	s.background(func(ctx context.Context) {
		quota.RunTallyRebuild(ctx, db, seeder, s.cfg.KeyPrefix, time.Second, s.cfg.Log)
	})
}

// drainCredits runs the credits drainer on the memory store's balances:
// in single-process mode this process keeps them, so it makes their
// counters from the ledger (at start too, after a restart lost them) and
// writes their consumption logs into it every second, and once more when
// it stops.
func (s *server) drainCredits(db *pgxpool.Pool, ms *limiter.MemoryStore) {
	d := credits.NewDrainer(db, ms, credits.DrainerConfig{Prefix: s.cfg.KeyPrefix, Log: s.cfg.Log})
	s.background(func(ctx context.Context) {
		d.Run(ctx, time.Second)
		last, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		defer cancel()
		if _, err := d.Drain(last); err != nil {
			s.cfg.Log.Error("credits: last drain", "err", err)
		}
	})
}

// startUsage starts counting decisions for cfg.Usage.Sink and returns the
// recorder for the checker (nil when usage is not counted). Closing the
// server publishes what is left, retrying until ShutdownTimeout.
func (s *server) startUsage(db *pgxpool.Pool, reg prometheus.Registerer) enforce.Recorder {
	cfg, log := s.cfg, s.cfg.Log
	var producer metering.Producer
	switch cfg.Usage.Sink {
	case "none":
		log.Warn("TOLLGATE_USAGE_SINK=none: decisions are not counted and will not be billed")
		return nil
	case "postgres":
		// Quota's crossings and rate alerts are recorded as the batches
		// are applied, as the usage worker's are.
		ingest := quota.NewIngest(db, quota.IngestConfig{
			RateAlert: quota.RateAlert{Denials: int64(cfg.Usage.RateAlertDenials), TenantDenials: int64(cfg.Usage.TenantRateAlertDenials),
				Window: cfg.Usage.RateAlertWindow}})
		store := usage.NewStore(db, usage.StoreConfig{MinuteRetention: cfg.Usage.MinuteRetention, ResourceCap: cfg.Usage.ResourceCap,
			Hooks: []usage.Hook{ingest}})
		producer = usage.StoreProducer{Store: store}
		s.background(func(ctx context.Context) { store.MaintainEvery(ctx, time.Hour, log) })
	default:
		// Its own client: publishing must not take connections from the
		// checks, and may take longer than one check's timeout.
		rs := cfg.Redis
		rs.Timeout = max(rs.Timeout, 5*time.Second)
		client := rs.Client()
		s.onClose(func() { client.Close() })
		producer = metering.NewRedisProducer(client, cfg.Usage.Stream)
	}
	agg := metering.NewAggregator(metering.AggregatorConfig{
		Producer: producer, FlushInterval: cfg.Usage.Flush, MaxRows: cfg.Usage.MaxRows,
		TopIPs: cfg.Usage.TopIPs, Registerer: reg, Log: log,
	})
	agg.Start()
	log.Info("counting usage", "sink", cfg.Usage.Sink, "producer", agg.ProducerID(), "flush", cfg.Usage.Flush)
	s.onClose(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		if err := agg.Close(ctx); err != nil {
			log.Error("usage not fully published", "err", err)
		}
	})
	return agg
}

// onClose registers f to run when the server closes, before everything
// registered earlier.
func (s *server) onClose(f func()) { s.closers = append(s.closers, f) }

// background runs f until the server closes, and waits for it then.
func (s *server) background(f func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f(ctx) }()
	s.onClose(func() { cancel(); <-done })
}

// close releases everything load started, in reverse order: the usage is
// published, the background work stops, then Redis and Postgres close.
func (s *server) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}
