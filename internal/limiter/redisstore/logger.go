package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// goRedisLog is where go-redis's own lines go once SetLogger was called.
var (
	goRedisLog     atomic.Pointer[slog.Logger]
	goRedisLogOnce sync.Once
)

// SetLogger sends go-redis's own log lines (such as "connection pool:
// failed to dial" during a Redis outage), which it otherwise prints to
// standard error, to log at warn level with component=go_redis. go-redis
// has one logger per process: it is installed on the first call, and a
// later call only changes the slog.Logger it writes to.
func SetLogger(log *slog.Logger) {
	goRedisLog.Store(log)
	goRedisLogOnce.Do(func() { redis.SetLogger(slogAdapter{}) })
}

// slogAdapter is go-redis's Logging interface on goRedisLog.
type slogAdapter struct{}

func (slogAdapter) Printf(ctx context.Context, format string, v ...any) {
	log := goRedisLog.Load()
	if log == nil {
		return
	}
	line := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	log.WarnContext(ctx, line, "component", "go_redis")
}
