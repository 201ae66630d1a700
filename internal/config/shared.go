package config

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a Redis connection's settings (TOLLGATE_REDIS_*): one server,
// a Cluster when Cluster lists seed nodes, or the primary that Redis
// Sentinel names when Sentinels lists sentinels.
type Redis struct {
	Addr     string
	Cluster  []string
	Password string
	// Sentinels are the addresses of the sentinels that watch the
	// primary named Master; the client asks them for the primary's
	// address and follows a failover to the replica they promote.
	Sentinels []string
	// Master is the name the sentinels know the primary by.
	Master string
	// SentinelPassword authenticates to the sentinels (Password is the
	// primary's).
	SentinelPassword string
	// Timeout bounds each read and write (dial: twice it); 0 keeps
	// go-redis's defaults.
	Timeout  time.Duration
	PoolSize int
	// NoRetries stops go-redis from resending a command after a network
	// error: a limiter script that reached Redis before the connection
	// broke must not run twice and charge a check twice. It also makes
	// one dial attempt per new connection instead of five, 100ms apart:
	// while Redis refuses connections a call fails at once, and the
	// failure modes decide without waiting for the timeout.
	NoRetries bool
	// WaitReplicas, when > 0, makes calls that carry money answer only
	// once that many replicas have their writes (redisstore.Store's
	// WaitReplicas); WaitTimeout bounds that wait.
	WaitReplicas int
	WaitTimeout  time.Duration
}

// Redis reads TOLLGATE_REDIS_ADDR (default defaultAddr; "" means none),
// TOLLGATE_REDIS_CLUSTER_ADDRS, TOLLGATE_REDIS_SENTINEL_ADDRS with
// TOLLGATE_REDIS_SENTINEL_MASTER and TOLLGATE_REDIS_SENTINEL_PASSWORD,
// TOLLGATE_REDIS_PASSWORD, TOLLGATE_REDIS_TIMEOUT (default 250ms),
// TOLLGATE_REDIS_POOL_SIZE, and TOLLGATE_REDIS_WAIT_REPLICAS (default 0)
// with TOLLGATE_REDIS_WAIT_TIMEOUT (default 50ms, whole milliseconds,
// shorter than TOLLGATE_REDIS_TIMEOUT, which bounds the whole call). A
// Cluster and sentinels are one or the other; either is used instead of
// TOLLGATE_REDIS_ADDR.
func (e *Env) Redis(defaultAddr string) Redis {
	r := Redis{
		Addr:             e.String("TOLLGATE_REDIS_ADDR", defaultAddr),
		Cluster:          e.List("TOLLGATE_REDIS_CLUSTER_ADDRS"),
		Password:         e.String("TOLLGATE_REDIS_PASSWORD", ""),
		Sentinels:        e.List("TOLLGATE_REDIS_SENTINEL_ADDRS"),
		Master:           e.String("TOLLGATE_REDIS_SENTINEL_MASTER", ""),
		SentinelPassword: e.String("TOLLGATE_REDIS_SENTINEL_PASSWORD", ""),
		Timeout:          e.Duration("TOLLGATE_REDIS_TIMEOUT", 250*time.Millisecond),
		PoolSize:         e.Int("TOLLGATE_REDIS_POOL_SIZE", 0, 0),
		WaitReplicas:     e.Int("TOLLGATE_REDIS_WAIT_REPLICAS", 0, 0),
		WaitTimeout:      e.Duration("TOLLGATE_REDIS_WAIT_TIMEOUT", 50*time.Millisecond),
	}
	switch {
	case r.WaitTimeout%time.Millisecond != 0:
		e.Fail("TOLLGATE_REDIS_WAIT_TIMEOUT", "must be whole milliseconds (Redis's WAIT counts in them), e.g. 50ms")
	case r.WaitReplicas > 0 && r.WaitTimeout >= r.Timeout:
		e.Fail("TOLLGATE_REDIS_WAIT_TIMEOUT", fmt.Sprintf("must be shorter than TOLLGATE_REDIS_TIMEOUT (%v), which bounds the script call and the wait together", r.Timeout))
	}
	switch {
	case len(r.Sentinels) > 0 && len(r.Cluster) > 0:
		e.Fail("TOLLGATE_REDIS_SENTINEL_ADDRS", "set either it or TOLLGATE_REDIS_CLUSTER_ADDRS, not both (a Cluster fails over by itself)")
	case len(r.Sentinels) > 0 && r.Master == "":
		e.Fail("TOLLGATE_REDIS_SENTINEL_MASTER", "must name the primary the sentinels watch (their `sentinel monitor` name) when TOLLGATE_REDIS_SENTINEL_ADDRS is set")
	case len(r.Sentinels) == 0 && r.Master != "":
		e.Fail("TOLLGATE_REDIS_SENTINEL_ADDRS", "must list the sentinels when TOLLGATE_REDIS_SENTINEL_MASTER is set")
	}
	return r
}

// Configured reports whether a server, cluster or sentinels are set.
func (r Redis) Configured() bool { return r.Addr != "" || len(r.Cluster) > 0 || len(r.Sentinels) > 0 }

// Client returns a client of the server, the cluster, or the primary the
// sentinels name.
func (r Redis) Client() redis.UniversalClient {
	retries, dialRetries := 0, 0 // go-redis's defaults
	if r.NoRetries {
		retries, dialRetries = -1, 1
	}
	if len(r.Sentinels) > 0 {
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: r.Master, SentinelAddrs: r.Sentinels,
			SentinelPassword: r.SentinelPassword, Password: r.Password,
			PoolSize: r.PoolSize, DialTimeout: 2 * r.Timeout, ReadTimeout: r.Timeout, WriteTimeout: r.Timeout,
			MaxRetries: retries, DialerRetries: dialRetries})
	}
	if len(r.Cluster) > 0 {
		// The slot map is read again at most clusterReload after the last
		// read, on the next call: after a master fails, the calls to its
		// slots reach the replica the Cluster promoted within that much
		// of the promotion (go-redis's default is a minute).
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: r.Cluster, Password: r.Password,
			PoolSize: r.PoolSize, DialTimeout: 2 * r.Timeout, ReadTimeout: r.Timeout, WriteTimeout: r.Timeout,
			MaxRetries: retries, DialerRetries: dialRetries, ClusterStateReloadInterval: clusterReload})
	}
	return redis.NewClient(&redis.Options{Addr: r.Addr, Password: r.Password,
		PoolSize: r.PoolSize, DialTimeout: 2 * r.Timeout, ReadTimeout: r.Timeout, WriteTimeout: r.Timeout,
		MaxRetries: retries, DialerRetries: dialRetries})
}

// clusterReload is how old a Cluster client's slot map may grow before a
// call has it read again (CLUSTER SLOTS, in the background): a few calls a
// second per process, for checks on a failed master's slots decided again
// within about this much of the Cluster promoting its replica.
const clusterReload = 500 * time.Millisecond

// KeyPrefix reads TOLLGATE_KEY_PREFIX (default "tg:"), the start of every
// limiter key; braces would break Redis Cluster hash tags.
func (e *Env) KeyPrefix() string {
	p := e.String("TOLLGATE_KEY_PREFIX", "tg:")
	if strings.ContainsAny(p, "{}") {
		e.Fail("TOLLGATE_KEY_PREFIX", "must not contain { or } (they would break Redis Cluster hash tags)")
	}
	return p
}

// Logger reads TOLLGATE_LOG_LEVEL (debug|info|warn|error, default info)
// and TOLLGATE_LOG_FORMAT (text|json, default text) and returns a logger
// writing to w.
func (e *Env) Logger(w io.Writer) *slog.Logger {
	level := e.OneOf("TOLLGATE_LOG_LEVEL", "info", "debug", "info", "warn", "error")
	format := e.OneOf("TOLLGATE_LOG_FORMAT", "text", "text", "json")
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
