package events

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the webhooks' Prometheus metrics: attempts by outcome,
// counted by this process's deliverers, and the outbox's state, read
// from Postgres at each scrape (so every admin process reports the same
// figures). A nil *Metrics counts nothing.
type Metrics struct {
	attempts *prometheus.CounterVec
	outbox   *outboxCollector
}

// NewMetrics returns the metrics; the outbox figures are read from db.
func NewMetrics(db *pgxpool.Pool) *Metrics {
	m := &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_webhook_deliveries_total",
			Help: "Delivery attempts by outcome: delivered, retrying (failed, another attempt to come), failed (the last attempt of the schedule failed).",
		}, []string{"outcome"}),
		outbox: &outboxCollector{db: db,
			events: prometheus.NewDesc("tollgate_events_total", "Events written to the outbox, by type.", []string{"type"}, nil),
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

// outboxCollector reads the outbox's figures at each scrape.
type outboxCollector struct {
	db                      *pgxpool.Pool
	events, pending, oldest *prometheus.Desc
}

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.pending
	ch <- c.oldest
}

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := c.db.Query(ctx, `SELECT type, count(*) FROM events GROUP BY type`)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.events, err)
		return
	}
	// Every type has a series, 0 until its first event.
	counts := map[string]int64{}
	for _, typ := range Types {
		counts[typ] = 0
	}
	for rows.Next() {
		var typ string
		var n int64
		if rows.Scan(&typ, &n) == nil {
			counts[typ] = n
		}
	}
	rows.Close()
	for typ, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(n), typ)
	}
	var pending int64
	var age float64
	err = c.db.QueryRow(ctx, `SELECT count(*), coalesce(extract(epoch FROM now() - min(d.created_at)), 0)::float8
		FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id
		WHERE d.state = 'pending' AND w.disabled_at IS NULL`).Scan(&pending, &age)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.pending, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, max(age, 0))
}
