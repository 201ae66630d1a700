package enforce

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the check path's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	checks     *prometheus.CounterVec
	latency    prometheus.Histogram
	storeErrs  prometheus.Counter
	degraded   *prometheus.CounterVec
	wouldDenyC *prometheus.CounterVec
}

// NewMetrics registers the check metrics on reg; snapshotAge reports the
// age of the current snapshot.
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
			Name: "tollgate_store_errors_total", Help: "Limiter store (Redis) calls that failed; their checks were decided by failure modes.",
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
	)
	return m
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
