package snapshot

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collectors returns the holder's metrics: the snapshot's age, reloads and
// failed reloads, the LISTEN connection's outages (backoff.Collectors)
// and what became of keys looked up outside the snapshot.
func (h *Holder) Collectors() []prometheus.Collector {
	return append([]prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_snapshot_age_seconds", Help: "Age of the plans/keys snapshot the checks are served from.",
		}, func() float64 {
			if s := h.Current(); s != nil {
				return time.Since(s.loadedAt).Seconds()
			}
			return -1
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_snapshot_reloads_total", Help: "Snapshot reloads that succeeded.",
		}, func() float64 { return float64(h.reloads.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_snapshot_reload_errors_total", Help: "Snapshot reloads that failed.",
		}, func() float64 { return float64(h.reloadErrors.Load()) }),
		lookupCollector{desc: prometheus.NewDesc("tollgate_key_lookups_total",
			"Well-formed keys not in the snapshot, by what became of them: found or not_found in Postgres, failed (Postgres error), cached_miss (not found lately), skipped (Postgres known down), limited (over 50 lookups a second).",
			[]string{"result"}, nil), counts: &h.lookups},
	}, h.postgres.Collectors()...)
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
