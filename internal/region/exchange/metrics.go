package exchange

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the exchanger's metrics, labelled by the source region.
type Metrics struct {
	lag      *prometheus.GaugeVec
	up       *prometheus.GaugeVec
	debits   *prometheus.CounterVec
	share    *prometheus.GaugeVec
	active   prometheus.Gauge
	interval prometheus.Gauge
}

// NewMetrics returns the metrics, unregistered.
func NewMetrics() *Metrics {
	return &Metrics{
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tollgate_region_exchange_lag_seconds",
			Help: "Largest age of the messages applied from each other region in the last second or two, when each was applied (from its claim in that region to its debits here)."}, []string{"source"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tollgate_region_exchange_up",
			Help: "1 while each other region's messages arrive, 0 after three heartbeats without one (the region keeps deciding within its partition bound)."}, []string{"source"}),
		debits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_region_debits_applied_total",
			Help: "Units admitted in each other region applied here as debits, each message once."}, []string{"source"}),
		share: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tollgate_region_share",
			Help: "This region's allotment of each global_split rule (plan/rule), as a fraction of the rule's limit: the equal share until the rebalancer moves units, then the mean over the rule's states with demand or moved units."}, []string{"rule"}),
		interval: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tollgate_region_exchange_interval_seconds",
			Help: "Largest time between two claims of this region's outboxes in the last second or two (the E of the bounds as the exchanger runs: the interval and its delays); 0 on a worker standing by."}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tollgate_region_exchanger_active",
			Help: "1 while this worker holds the region's exchange lease and exchanges; 0 while it stands by (the gauges by source are the exchanging worker's alone)."}),
	}
}

// Register registers the metrics on reg.
func (m *Metrics) Register(reg prometheus.Registerer) {
	reg.MustRegister(m.lag, m.up, m.debits, m.share, m.active, m.interval)
}
