package enforce

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/internal/backoff"
	"github.com/tollgate/tollgate/internal/breaker"
	"github.com/tollgate/tollgate/internal/snapshot"
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

	// byReason holds the checks counter of each decision and reason met
	// so far ([0] denied, [1] allowed), so that a check finds its counter
	// without hashing its labels: a map replaced, never changed, when a
	// reason is first met.
	byReason [2]atomic.Pointer[map[string]prometheus.Counter]
	newMu    sync.Mutex
}

// NewMetrics registers on reg the metrics of the checks, of the holder's
// snapshot and its LISTEN connection, and of the limiter store's circuit
// breaker. Give the result to one Checker.
func NewMetrics(reg prometheus.Registerer, holder *snapshot.Holder) *Metrics {
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
	reg.MustRegister(holder.Collectors()...)
	reg.MustRegister(backoff.Collectors("limiter_store", "redis", func() backoff.MonitorStats {
		if b := m.breaker.Load(); b != nil {
			return b.OutageStats()
		}
		return backoff.MonitorStats{}
	})...)
	return m
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
	i := 0
	if allowed {
		i = 1
	}
	if byReason := m.byReason[i].Load(); byReason != nil {
		if c, ok := (*byReason)[reason]; ok {
			c.Inc()
			return
		}
	}
	m.newReason(i, reason).Inc()
}

// newReason returns the checks counter of decision i's reason, adding it
// to byReason.
func (m *Metrics) newReason(i int, reason string) prometheus.Counter {
	m.newMu.Lock()
	defer m.newMu.Unlock()
	next := map[string]prometheus.Counter{}
	if old := m.byReason[i].Load(); old != nil {
		maps.Copy(next, *old)
	}
	c := m.checks.WithLabelValues([]string{"denied", "allowed"}[i], reason)
	next[reason] = c
	m.byReason[i].Store(&next)
	return c
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
