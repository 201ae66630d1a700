package usage

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/testenv"
)

// TestBacklogCollector: the stream's length, its pending entries and the
// age of its oldest entry, read at each scrape; "up" 0 without Redis.
func TestBacklogCollector(t *testing.T) {
	client, prefix := testenv.Redis(t)
	ctx := context.Background()
	stream := prefix + "usage"
	c := NewRedisConsumer(client, RedisConsumerConfig{Stream: stream, Group: "g", Consumer: "w", Block: 10 * time.Millisecond})
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewBacklogCollector(c, time.Second, nil))
	metrics := func() string {
		t.Helper()
		families, err := reg.Gather()
		testenv.Must(t, err)
		var b strings.Builder
		for _, f := range families {
			for _, m := range f.GetMetric() {
				fmt.Fprintf(&b, "%s %g\n", f.GetName(), m.GetGauge().GetValue())
			}
		}
		return b.String()
	}

	// Nothing published yet: no stream, no group.
	if got, want := metrics(), "tollgate_usage_oldest_unapplied_age_seconds 0\ntollgate_usage_stream_length 0\n"+
		"tollgate_usage_stream_pending 0\ntollgate_usage_stream_up 1\n"; got != want {
		t.Errorf("empty:\n%swant:\n%s", got, want)
	}

	// The oldest of two entries was published 5s ago by Redis's clock.
	now, err := client.Time(ctx).Result()
	testenv.Must(t, err)
	old := fmt.Sprintf("%d-0", now.Add(-5*time.Second).UnixMilli())
	testenv.Must(t, client.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: old, Values: []any{"id", "a", "batch", "{}"}}).Err())
	testenv.Must(t, client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"id", "b", "batch", "{}"}}).Err())
	msgs, err := c.Fetch(ctx, 1) // delivered, not acknowledged
	if err != nil || len(msgs) != 1 {
		t.Fatalf("fetch: %v, %v", msgs, err)
	}
	s, err := c.BacklogStats(ctx)
	if err != nil || s.Entries != 2 || s.Pending != 1 || s.OldestAge < 5*time.Second || s.OldestAge > 30*time.Second {
		t.Errorf("backlog: %+v, %v; want 2 entries, 1 pending, about 5s old", s, err)
	}
	if got := metrics(); !strings.Contains(got, "tollgate_usage_stream_length 2\n") ||
		!strings.Contains(got, "tollgate_usage_stream_pending 1\n") || !strings.Contains(got, "tollgate_usage_stream_up 1\n") {
		t.Errorf("with a backlog:\n%s", got)
	}

	// Applied entries are deleted: the backlog is empty again.
	testenv.Must(t, c.Ack(ctx, msgs[0].ID))
	msgs, err = c.Fetch(ctx, 8)
	testenv.Must(t, err)
	testenv.Must(t, c.Ack(ctx, msgs[0].ID))
	if s, err := c.BacklogStats(ctx); err != nil || s != (BacklogStats{}) {
		t.Errorf("after acknowledging everything: %+v, %v", s, err)
	}

	// Redis unreachable: up is 0 and the rest is left out.
	unreachable := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { unreachable.Close() })
	down := NewRedisConsumer(unreachable, RedisConsumerConfig{Stream: stream})
	reg = prometheus.NewRegistry()
	reg.MustRegister(NewBacklogCollector(down, time.Second, nil))
	if got := metrics(); got != "tollgate_usage_stream_up 0\n" {
		t.Errorf("without Redis:\n%s", got)
	}
}
