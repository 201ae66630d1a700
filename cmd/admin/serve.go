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

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/enforce/limiter"
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
	// LoginPerMinute bounds login attempts per client IP and per email.
	LoginPerMinute int
	// Redis, when an address is set, holds the login limiter's state so
	// that every admin process shares it; otherwise it is in memory.
	RedisAddr       string
	RedisCluster    []string
	RedisPassword   string
	RedisTimeout    time.Duration
	KeyPrefix       string
	ShutdownTimeout time.Duration
	LogLevel        string
	LogFormat       string
}

func loadServerConfig(getenv func(string) string) (serverConfig, error) {
	e := config.New(getenv)
	c := serverConfig{
		Addr:            e.String("TOLLGATE_ADMIN_ADDR", ":8081"),
		JWTSecret:       []byte(e.String("TOLLGATE_ADMIN_JWT_SECRET", "")),
		SessionTTL:      e.Duration("TOLLGATE_ADMIN_SESSION_TTL", 12*time.Hour),
		LoginPerMinute:  e.Int("TOLLGATE_ADMIN_LOGIN_LIMIT", 5, 1),
		RedisAddr:       e.String("TOLLGATE_REDIS_ADDR", ""),
		RedisCluster:    e.List("TOLLGATE_REDIS_CLUSTER_ADDRS"),
		RedisPassword:   e.String("TOLLGATE_REDIS_PASSWORD", ""),
		RedisTimeout:    e.Duration("TOLLGATE_REDIS_TIMEOUT", 250*time.Millisecond),
		KeyPrefix:       e.String("TOLLGATE_KEY_PREFIX", "tg:"),
		ShutdownTimeout: e.Duration("TOLLGATE_SHUTDOWN_TIMEOUT", 10*time.Second),
		LogLevel:        e.OneOf("TOLLGATE_LOG_LEVEL", "info", "debug", "info", "warn", "error"),
		LogFormat:       e.OneOf("TOLLGATE_LOG_FORMAT", "text", "text", "json"),
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
	for _, ch := range c.KeyPrefix {
		if ch == '{' || ch == '}' {
			e.Fail("TOLLGATE_KEY_PREFIX", "must not contain { or } (they would break Redis Cluster hash tags)")
		}
	}
	return c, e.Err()
}

func newLogger(w io.Writer, level, format string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func serveCommand() command {
	return command{
		name:    "serve",
		summary: "run the admin server (TOLLGATE_ADMIN_ADDR): the admin REST API under /api/v1",
		flags: func(fs *flag.FlagSet) func(context.Context, *env) error {
			return func(ctx context.Context, e *env) error {
				cfg, err := loadServerConfig(e.getenv)
				if err != nil {
					return err
				}
				return serve(ctx, e, cfg)
			}
		},
	}
}

// serve runs the admin server until ctx ends.
func serve(ctx context.Context, e *env, cfg serverConfig) error {
	log := newLogger(e.stderr, cfg.LogLevel, cfg.LogFormat)
	if cfg.JWTSecretGenerated {
		log.Warn("TOLLGATE_ADMIN_JWT_SECRET is not set: using a random secret; sessions end when this process does and are not shared with other admin processes")
	}
	var store limiter.Store
	switch {
	case len(cfg.RedisCluster) > 0 || cfg.RedisAddr != "":
		var rc redis.UniversalClient
		// Short timeouts: when Redis is down, logins fail open quickly
		// rather than hang.
		if len(cfg.RedisCluster) > 0 {
			rc = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.RedisCluster, Password: cfg.RedisPassword,
				DialTimeout: 2 * cfg.RedisTimeout, ReadTimeout: cfg.RedisTimeout, WriteTimeout: cfg.RedisTimeout})
		} else {
			rc = redis.NewClient(&redis.Options{Addr: cfg.RedisAddr, Password: cfg.RedisPassword,
				DialTimeout: 2 * cfg.RedisTimeout, ReadTimeout: cfg.RedisTimeout, WriteTimeout: cfg.RedisTimeout})
		}
		defer rc.Close()
		store = limiter.NewRedisStore(rc)
	default:
		store = limiter.NewMemoryStore(nil)
	}
	// The usage worker (usage.go) runs inside the server unless
	// TOLLGATE_SERVE_WORKER=false.
	usageCfg, err := loadUsageConfig(e.getenv)
	if err != nil {
		return err
	}
	usageStore := usageCfg.store(e)
	stopWorker, err := startServeWorker(ctx, e, log)
	if err != nil {
		return err
	}
	defer stopWorker()

	logins := &loginLimiter{store: store, prefix: cfg.KeyPrefix, perMinute: int64(cfg.LoginPerMinute), log: log}
	sessions := &sessionAuth{store: auth.NewStore(e.db), secret: cfg.JWTSecret, ttl: cfg.SessionTTL, now: time.Now}

	srv := &http.Server{
		Handler:           routes(log, e.db, sessions, logins, usageStore),
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
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(shutdown)
	log.Info("admin stopped")
	return err
}
