package redisstore

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/testenv"
)

// TestSetLoggerRoutesGoRedisLinesThroughSlog: a failed dial, which
// go-redis reports with a line of its own, reaches the slog.Logger given
// last, structured, at warn level.
func TestSetLoggerRoutesGoRedisLinesThroughSlog(t *testing.T) {
	first, logs := &testenv.LogBuffer{}, &testenv.LogBuffer{}
	SetLogger(slog.New(slog.NewTextHandler(first, nil)))
	SetLogger(slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(func() { SetLogger(slog.New(slog.DiscardHandler)) })

	// Nothing listens on port 1: the dial fails at once.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: time.Second, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	if err := c.Ping(context.Background()).Err(); err == nil {
		t.Fatal("PING of a closed port succeeded")
	}
	got := logs.String()
	for _, want := range []string{"level=WARN", "failed to dial", "component=go_redis"} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q does not contain %q", got, want)
		}
	}
	if strings.Contains(got, `msg="redis: `) {
		t.Errorf("log %q keeps go-redis's own prefix", got)
	}
	if first.String() != "" {
		t.Errorf("the logger given first got %q; want every line at the one given last", first.String())
	}
}
