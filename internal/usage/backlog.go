package usage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// BacklogStats describe the usage stream's backlog: the batches published
// and not yet applied.
type BacklogStats struct {
	// Entries in the stream. Applied entries are deleted, so these are
	// the batches not applied yet.
	Entries int64
	// Pending entries were delivered to a worker and not acknowledged
	// yet (being applied, or their worker died).
	Pending int64
	// OldestAge is how long ago, by Redis's clock, the oldest entry was
	// published: the lag of the usage tables. 0 when the stream is empty.
	OldestAge time.Duration
}

// BacklogStats reads the backlog in three round trips. Unlike Fetch, it
// is safe to call concurrently with the consumer's other methods.
func (c *RedisConsumer) BacklogStats(ctx context.Context) (BacklogStats, error) {
	var s BacklogStats
	info, err := c.client.XInfoStream(ctx, c.cfg.Stream).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return s, nil // nothing published yet
		}
		return s, fmt.Errorf("usage: xinfo stream: %w", err)
	}
	s.Entries = info.Length
	p, err := c.client.XPending(ctx, c.cfg.Stream, c.cfg.Group).Result()
	switch {
	case err != nil && !strings.Contains(err.Error(), "NOGROUP"):
		return s, fmt.Errorf("usage: xpending: %w", err)
	case err == nil:
		s.Pending = p.Count
	}
	if s.Entries == 0 || info.FirstEntry.ID == "" {
		return s, nil
	}
	published, err := entryTime(info.FirstEntry.ID)
	if err != nil {
		return s, err
	}
	now, err := c.client.Time(ctx).Result()
	if err != nil {
		return s, fmt.Errorf("usage: time: %w", err)
	}
	s.OldestAge = max(0, now.Sub(published))
	return s, nil
}

// entryTime returns when a stream entry with an automatic ID
// ("<ms>-<seq>") was added.
func entryTime(id string) (time.Time, error) {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("usage: stream entry ID %q: %w", id, err)
	}
	return time.UnixMilli(n), nil
}

// backlogCollector reports a RedisConsumer's BacklogStats on every
// scrape.
type backlogCollector struct {
	consumer                  *RedisConsumer
	timeout                   time.Duration
	log                       *slog.Logger
	entries, pending, age, up *prometheus.Desc
}

// NewBacklogCollector returns a Prometheus collector that reads c's
// backlog at every scrape, waiting at most timeout for Redis:
// tollgate_usage_stream_length, tollgate_usage_stream_pending,
// tollgate_usage_oldest_unapplied_age_seconds, and
// tollgate_usage_stream_up (0 when Redis did not answer; the other three
// are then left out rather than reported as zero).
func NewBacklogCollector(c *RedisConsumer, timeout time.Duration, log *slog.Logger) prometheus.Collector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &backlogCollector{
		consumer: c, timeout: timeout, log: log,
		entries: prometheus.NewDesc("tollgate_usage_stream_length",
			"Usage batches in the stream, published and not applied yet (applied ones are deleted).", nil, nil),
		pending: prometheus.NewDesc("tollgate_usage_stream_pending",
			"Usage batches delivered to a worker and not acknowledged yet.", nil, nil),
		age: prometheus.NewDesc("tollgate_usage_oldest_unapplied_age_seconds",
			"Age of the oldest usage batch not applied yet, by Redis's clock (0 when none): how far the usage tables lag.", nil, nil),
		up: prometheus.NewDesc("tollgate_usage_stream_up",
			"1 when the usage stream's backlog could be read from Redis at this scrape, 0 otherwise.", nil, nil),
	}
}

func (b *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- b.entries
	ch <- b.pending
	ch <- b.age
	ch <- b.up
}

func (b *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	s, err := b.consumer.BacklogStats(ctx)
	if err != nil {
		if !errors.Is(err, redis.ErrClosed) {
			b.log.Debug("usage: backlog not read for /metrics", "err", err)
		}
		ch <- prometheus.MustNewConstMetric(b.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(b.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(b.entries, prometheus.GaugeValue, float64(s.Entries))
	ch <- prometheus.MustNewConstMetric(b.pending, prometheus.GaugeValue, float64(s.Pending))
	ch <- prometheus.MustNewConstMetric(b.age, prometheus.GaugeValue, s.OldestAge.Seconds())
}
