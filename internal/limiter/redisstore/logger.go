package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
// later call only changes the slog.Logger it writes to. A Store without
// a Log of its own logs to it too.
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
	pass, repeated := goRedisLines.pass(line, time.Now())
	if !pass {
		return
	}
	if repeated > 0 {
		log.WarnContext(ctx, line, "component", "go_redis", "repeated_since_last", repeated)
		return
	}
	log.WarnContext(ctx, line, "component", "go_redis")
}

// goRedisLines keeps an outage's go-redis lines (one per failed dial of
// every pool, several a second) to the first of each and a reminder
// every repeatEvery with how many were left out, as every outage is
// logged (backoff.Monitor).
var goRedisLines = &lineGate{every: repeatEvery}

const repeatEvery = 10 * time.Second

// lineGate passes a line the first time and then at most once every
// every, counting the repeats it held back.
type lineGate struct {
	every time.Duration
	mu    sync.Mutex
	seen  map[string]*gatedLine
}

type gatedLine struct {
	last     time.Time
	repeated int
}

// reset forgets every line.
func (g *lineGate) reset() {
	g.mu.Lock()
	g.seen = nil
	g.mu.Unlock()
}

// pass reports whether line is logged at now, and how many times it was
// held back since it last was.
func (g *lineGate) pass(line string, now time.Time) (bool, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.seen == nil || len(g.seen) > 256 {
		g.seen = map[string]*gatedLine{} // bounded: lines name addresses
	}
	l := g.seen[line]
	if l == nil {
		g.seen[line] = &gatedLine{last: now}
		return true, 0
	}
	if now.Sub(l.last) < g.every {
		l.repeated++
		return false, 0
	}
	repeated := l.repeated
	l.last, l.repeated = now, 0
	return true, repeated
}
