package enforce

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/internal/backoff"
	"github.com/tollgate/tollgate/internal/breaker"
)

// Metrics are the check path's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	checks     *prometheus.CounterVec
	latency    prometheus.Histogram
	storeErrs  prometheus.Counter
	degraded   *prometheus.CounterVec
	wouldDenyC *prometheus.CounterVec
	// breaker is the circuit breaker of the checker these metrics are
	// given to (NewChecker sets it).
	breaker atomic.Pointer[breaker.Breaker]
}

// NewMetrics registers on reg the metrics of the checks, of the holder's
// snapshot and its LISTEN connection, and of the limiter store's circuit
// breaker. Give the result to one Checker.
func NewMetrics(reg prometheus.Registerer, holder *Holder) *Metrics {
	m := &Metrics{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_checks_total", Help: "Checks decided, by decision and reason.",
		}, []string{"decision", "reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_check_duration_seconds",
			Help:    "Time to decide a check, from request body read to response written.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		storeErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_store_errors_total", Help: "Checks whose limiter store (Redis) call failed, or was not made because the circuit was open; failure modes decided them.",
		}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_checks_degraded_total",
			Help: "Checks decided by their rules' failure modes because the limiter store failed, by decision (fail-open rules allow, fail-closed ones deny).",
		}, []string{"decision"}),
		wouldDenyC: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_shadow_would_deny_total", Help: "Checks a shadow-mode rule would have denied, by rule name.",
		}, []string{"rule"}),
	}
	// Both series exist from the start, so that rate() sees the first one.
	m.degraded.WithLabelValues("allowed")
	m.degraded.WithLabelValues("denied")
	reg.MustRegister(m.checks, m.latency, m.storeErrs, m.degraded, m.wouldDenyC,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_snapshot_age_seconds", Help: "Age of the plans/keys snapshot the checks are served from.",
		}, func() float64 {
			if s := holder.Current(); s != nil {
				return time.Since(s.loadedAt).Seconds()
			}
			return -1
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_snapshot_reloads_total", Help: "Snapshot reloads that succeeded.",
		}, func() float64 { return float64(holder.reloads.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_snapshot_reload_errors_total", Help: "Snapshot reloads that failed.",
		}, func() float64 { return float64(holder.reloadErrors.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_limiter_circuit_open", Help: "1 while the limiter store's circuit breaker is open (the store is known down and failure modes decide every check), else 0.",
		}, func() float64 {
			if b := m.breaker.Load(); b != nil && b.Open() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_limiter_circuit_rejected_total", Help: "Checks decided by failure modes without calling the limiter store, because its circuit was open.",
		}, func() float64 {
			if b := m.breaker.Load(); b != nil {
				return float64(b.Stats().Rejected)
			}
			return 0
		}),
	)
	reg.MustRegister(holder.postgres.Collectors()...)
	reg.MustRegister(backoff.Collectors("limiter_store", "redis", func() backoff.MonitorStats {
		if b := m.breaker.Load(); b != nil {
			return b.OutageStats()
		}
		return backoff.MonitorStats{}
	})...)
	lookups := prometheus.NewDesc("tollgate_key_lookups_total",
		"Well-formed keys not in the snapshot, by what became of them: found or not_found in Postgres, failed (Postgres error), cached_miss (not found lately), skipped (Postgres known down), limited (over 50 lookups a second).",
		[]string{"result"}, nil)
	reg.MustRegister(lookupCollector{desc: lookups, counts: &holder.lookups})
	return m
}

// lookupCollector exports a holder's lookup counts.
type lookupCollector struct {
	desc   *prometheus.Desc
	counts *lookupCounts
}

func (c lookupCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c lookupCollector) Collect(ch chan<- prometheus.Metric) {
	for result, n := range map[string]*atomic.Int64{
		"found": &c.counts.found, "not_found": &c.counts.notFound, "failed": &c.counts.failed,
		"cached_miss": &c.counts.cachedMiss, "skipped": &c.counts.skipped, "limited": &c.counts.limited,
	} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n.Load()), result)
	}
}

func (m *Metrics) watchBreaker(b *breaker.Breaker) {
	if m != nil {
		m.breaker.Store(b)
	}
}

func (m *Metrics) decision(allowed bool, reason string) {
	if m == nil {
		return
	}
	d := "denied"
	if allowed {
		d = "allowed"
	}
	m.checks.WithLabelValues(d, reason).Inc()
}

func (m *Metrics) degradedDecision(allowed bool) {
	if m == nil {
		return
	}
	d := "denied"
	if allowed {
		d = "allowed"
	}
	m.degraded.WithLabelValues(d).Inc()
}

func (m *Metrics) observe(d time.Duration) {
	if m != nil {
		m.latency.Observe(d.Seconds())
	}
}

func (m *Metrics) storeError() {
	if m != nil {
		m.storeErrs.Inc()
	}
}

func (m *Metrics) wouldDeny(rule string) {
	if m != nil {
		m.wouldDenyC.WithLabelValues(rule).Inc()
	}
}
