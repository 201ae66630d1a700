package testenv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric returns the first series of the metric called name in reg: its
// value (a counter's, else a gauge's) and its labels. ok is false when reg
// has no such metric; an error gathering fails the test.
func Metric(t testing.TB, reg prometheus.Gatherer, name string) (value float64, labels map[string]string, ok bool) {
	t.Helper()
	families, err := reg.Gather()
	Must(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		m := f.GetMetric()[0]
		labels = map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue(), labels, true
		}
		return m.GetGauge().GetValue(), labels, true
	}
	return 0, nil, false
}
