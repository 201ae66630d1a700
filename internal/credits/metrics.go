package credits

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the credits drainer's Prometheus metrics. A nil *Metrics
// counts nothing.
type Metrics struct {
	drift    prometheus.Gauge
	entries  prometheus.Counter
	repairs  prometheus.Counter
	rebuilds prometheus.Counter
	expired  prometheus.Counter
	held     prometheus.Gauge
}

// NewMetrics returns the metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		drift: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tollgate_credits_drift_units",
			Help: "Units by which the hot-path balances differed from the ledger at the last drain, summed over tenants (repaired at once; 0 when they agree)."}),
		entries: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_credits_log_entries_total",
			Help: "Consumption log entries recorded in the ledger."}),
		repairs: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_credits_drift_repairs_total",
			Help: "Units of drift repaired on hot-path counters."}),
		rebuilds: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_credits_counters_rebuilt_total",
			Help: "Hot-path counters rebuilt from the ledger after Redis lost them."}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_credits_grants_expired_total",
			Help: "Grants expired."}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tollgate_credits_escrow_held_units",
			Help: "Units of prepaid balances the drainer's region holds in escrow at the last drain, summed over tenants (a deployment of several regions; 0 in one)."}),
	}
}

// Collectors returns what to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.drift, m.entries, m.repairs, m.rebuilds, m.expired, m.held}
}

func (m *Metrics) drained(r Report) {
	if m == nil {
		return
	}
	m.drift.Set(float64(r.Drift))
	m.entries.Add(float64(r.Entries))
	m.repairs.Add(float64(r.Drift))
	m.rebuilds.Add(float64(r.Rebuilt))
	m.expired.Add(float64(r.Expired))
	m.held.Set(float64(r.Held))
}
