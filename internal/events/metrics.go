package events

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Metrics are the webhooks' Prometheus metrics: attempts by outcome,
// counted by this process's deliverers; events by type, counted by this
// process from the outbox as they are written; and the deliveries
// pending, read from Postgres at each scrape (so every admin process
// reports the same figures). A nil *Metrics counts nothing.
type Metrics struct {
	attempts *prometheus.CounterVec
	outbox   *outboxCollector
}

// NewMetrics returns the metrics; the outbox figures are read from db.
func NewMetrics(db postgres.Conn) *Metrics {
	m := &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_webhook_deliveries_total",
			Help: "Delivery attempts by outcome: delivered, retrying (failed, another attempt to come), failed (the last attempt of the schedule failed).",
		}, []string{"outcome"}),
		outbox: &outboxCollector{db: db, now: time.Now, counts: map[string]int64{},
			events: prometheus.NewDesc("tollgate_events_total",
				"Events written to the outbox since this process started, by type (those older than a minute when scraped).",
				[]string{"type"}, nil),
			pending: prometheus.NewDesc("tollgate_webhook_deliveries_pending",
				"Deliveries to enabled endpoints not yet delivered nor failed.", nil, nil),
			oldest: prometheus.NewDesc("tollgate_webhook_oldest_pending_seconds",
				"Age of the oldest pending delivery to an enabled endpoint; 0 when none.", nil, nil),
		},
	}
	for _, o := range []string{"delivered", "retrying", "failed"} {
		m.attempts.WithLabelValues(o)
	}
	return m
}

// Collectors returns what to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.attempts, m.outbox}
}

func (m *Metrics) delivered(outcome string) {
	if m != nil {
		m.attempts.WithLabelValues(outcome).Inc()
	}
}

// Events are counted in windows of their created_at, each counted once
// when it is eventsSettle old, so that an event whose transaction commits
// a little after its time is still counted; a window longer than
// eventsMaxWindow (scrapes stopped, or failed, for that long) is shortened
// to it, its oldest events not counted.
const (
	eventsSettle    = time.Minute
	eventsMaxWindow = time.Hour
)

// outboxCollector reads the outbox's figures at each scrape. Safe for
// concurrent use.
type outboxCollector struct {
	db                      postgres.Conn
	now                     func() time.Time
	events, pending, oldest *prometheus.Desc

	mu      sync.Mutex
	counted time.Time        // events created before it are counted; zero until the first scrape
	counts  map[string]int64 // by type
}

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.pending
	ch <- c.oldest
}

// Collect sends the pending deliveries' figures and the events' counts,
// each read on its own: one query failing (a timeout) fails its metrics
// alone.
func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var pending int64
	var age float64
	err := c.db.QueryRow(ctx, `SELECT count(*), coalesce(extract(epoch FROM now() - min(d.created_at)), 0)::float8
		FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id
		WHERE d.state = 'pending' AND w.disabled_at IS NULL`).Scan(&pending, &age)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.pending, fmt.Errorf("events: pending deliveries: %w", err))
	} else {
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(pending))
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, max(age, 0))
	}
	counts, err := c.countEvents(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.events, fmt.Errorf("events: count events: %w", err))
		return
	}
	for typ, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(n), typ)
	}
}

// countEvents adds the events created since the last window to the
// counts, and returns a copy of them. Every type has a series, 0 until
// its first event.
func (c *outboxCollector) countEvents(ctx context.Context) (map[string]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	until := c.now().Add(-eventsSettle)
	if c.counted.IsZero() {
		// Counting starts with the process: the events before were
		// counted, if at all, by the process before it.
		c.counted = until
		for _, typ := range Types {
			c.counts[typ] = 0
		}
	}
	from := c.counted
	if oldest := until.Add(-eventsMaxWindow); from.Before(oldest) {
		from = oldest
	}
	if until.After(from) {
		rows, err := c.db.Query(ctx, `SELECT type, count(*) FROM events WHERE created_at >= $1 AND created_at < $2 GROUP BY type`,
			from, until)
		if err != nil {
			return nil, err
		}
		found := map[string]int64{}
		for rows.Next() {
			var typ string
			var n int64
			if err := rows.Scan(&typ, &n); err != nil {
				rows.Close()
				return nil, err
			}
			found[typ] = n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		for typ, n := range found {
			c.counts[typ] += n
		}
		c.counted = until
	}
	return maps.Clone(c.counts), nil
}
