package backoff

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MonitorConfig configures a Monitor.
type MonitorConfig struct {
	// Component names what retries, in log lines and in the metrics'
	// component label, e.g. "snapshot_listener".
	Component string
	// Dependency names what it needs, e.g. "postgres".
	Dependency string
	Log        *slog.Logger
	// Remind is how often a "still down" line is logged during an outage
	// (default 10s).
	Remind time.Duration
	// Detail, when set, returns more attributes for every line, e.g. a
	// count of the work skipped during the outage.
	Detail func() []any
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Monitor follows one component's view of one dependency through outages
// and logs the changes only: one line when it goes down, one every Remind
// while it stays down (with the number of failed attempts), one when it is
// back (with how long it was down). It exports the same as metrics. Safe
// for concurrent use.
type Monitor struct {
	cfg MonitorConfig

	mu sync.Mutex
	// In the current outage: since when, failed attempts, and when the
	// last line was logged.
	since    time.Time
	failures int64
	lastLine time.Time

	down                  atomic.Bool
	failuresTotal, spells atomic.Int64
}

// NewMonitor returns a Monitor that starts in the up state.
func NewMonitor(cfg MonitorConfig) *Monitor {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Remind <= 0 {
		cfg.Remind = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Monitor{cfg: cfg}
}

func (m *Monitor) attrs(extra ...any) []any {
	a := append([]any{"component", m.cfg.Component}, extra...)
	if m.cfg.Detail != nil {
		a = append(a, m.cfg.Detail()...)
	}
	return a
}

// Failure records a failed attempt. The first of an outage is logged as a
// warning; later ones only as a reminder every Remind.
func (m *Monitor) Failure(err error) {
	m.failuresTotal.Add(1)
	now := m.cfg.Now()
	m.mu.Lock()
	if !m.down.Load() {
		m.down.Store(true)
		m.spells.Add(1)
		m.since, m.failures, m.lastLine = now, 1, now
		m.mu.Unlock()
		m.cfg.Log.Warn(m.cfg.Component+": "+m.cfg.Dependency+" unavailable; retrying with backoff", m.attrs("err", err)...)
		return
	}
	m.failures++
	if now.Sub(m.lastLine) < m.cfg.Remind {
		m.mu.Unlock()
		return
	}
	m.lastLine = now
	downFor, failures := now.Sub(m.since), m.failures
	m.mu.Unlock()
	m.cfg.Log.Warn(m.cfg.Component+": "+m.cfg.Dependency+" still unavailable",
		m.attrs("down_for", downFor.Round(time.Millisecond).String(), "failed_attempts", failures, "err", err)...)
}

// Success records a successful attempt; after an outage it logs that the
// dependency is back. Cheap when nothing was down.
func (m *Monitor) Success() {
	if !m.down.Load() {
		return
	}
	now := m.cfg.Now()
	m.mu.Lock()
	if !m.down.Load() {
		m.mu.Unlock()
		return
	}
	m.down.Store(false)
	downFor, failures := now.Sub(m.since), m.failures
	m.mu.Unlock()
	m.cfg.Log.Info(m.cfg.Component+": "+m.cfg.Dependency+" back",
		m.attrs("down_for", downFor.Round(time.Millisecond).String(), "failed_attempts", failures)...)
}

// Down reports whether the last attempt failed.
func (m *Monitor) Down() bool { return m.down.Load() }

// MonitorStats are a Monitor's counters since it was made.
type MonitorStats struct {
	// Failures is every failed attempt; Outages the times the dependency
	// went from up to down.
	Failures, Outages int64
	Down              bool
}

// Stats returns the monitor's counters.
func (m *Monitor) Stats() MonitorStats {
	return MonitorStats{Failures: m.failuresTotal.Load(), Outages: m.spells.Load(), Down: m.down.Load()}
}

// Collectors returns the monitor's metrics (see Collectors).
func (m *Monitor) Collectors() []prometheus.Collector {
	return Collectors(m.cfg.Component, m.cfg.Dependency, m.Stats)
}

// Collectors returns the metrics of one component's view of one
// dependency, read from stats at each scrape and labelled with component
// and dependency: tollgate_dependency_up (1 or 0),
// tollgate_dependency_failures_total and tollgate_dependency_outages_total.
// The metrics of different components may share one registry.
func Collectors(component, dependency string, stats func() MonitorStats) []prometheus.Collector {
	labels := prometheus.Labels{"component": component, "dependency": dependency}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_dependency_up", ConstLabels: labels,
			Help: "1 when the component's last attempt to use the dependency succeeded, 0 during an outage.",
		}, func() float64 {
			if stats().Down {
				return 0
			}
			return 1
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_dependency_failures_total", ConstLabels: labels,
			Help: "Failed attempts of the component to use the dependency (each retried after a backoff).",
		}, func() float64 { return float64(stats().Failures) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_dependency_outages_total", ConstLabels: labels,
			Help: "Times the dependency went from up to down, as the component saw it.",
		}, func() float64 { return float64(stats().Outages) }),
	}
}
