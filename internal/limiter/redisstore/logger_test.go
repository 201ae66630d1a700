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
	goRedisLines.reset() // the line may have been logged before

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

// TestGoRedisLinesAreKeptToOneAnInterval: the same line is logged the
// first time, then held back until the interval has passed, and then
// logged with the count of repeats held back; another line passes.
func TestGoRedisLinesAreKeptToOneAnInterval(t *testing.T) {
	g := lineGate{every: 10 * time.Second}
	at := time.Unix(0, 0)
	dial := "connection pool: failed to dial after 1 attempts"
	if ok, n := g.pass(dial, at); !ok || n != 0 {
		t.Fatalf("first line: %v, %d; want logged", ok, n)
	}
	for i := 1; i <= 9; i++ {
		if ok, _ := g.pass(dial, at.Add(time.Duration(i)*time.Second)); ok {
			t.Fatalf("repeat %d s later logged; want held back", i)
		}
	}
	if ok, _ := g.pass("another line", at.Add(time.Second)); !ok {
		t.Error("another line held back")
	}
	if ok, n := g.pass(dial, at.Add(10*time.Second)); !ok || n != 9 {
		t.Errorf("10 s later: %v, %d; want logged with 9 repeats", ok, n)
	}
}
