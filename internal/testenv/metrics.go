package testenv

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
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

// Scrape reads the /metrics page of the server at addr (host:port) and
// returns the values of the samples of the metric called name, or, when
// name holds a "{", of those whose line starts with it (a metric and its
// first labels). An error says the page could not be read or holds no
// such sample.
func Scrape(addr, name string) ([]float64, error) {
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var values []float64
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || !strings.Contains(name, "{") && !strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, "{") {
			continue // another metric, or one whose name starts with name
		}
		fields := strings.Fields(rest)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %v", name, line, err)
		}
		values = append(values, v)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(values) == 0 {
		return nil, fmt.Errorf("%s: no such metric at %s", name, addr)
	}
	return values, nil
}

// ScrapeSum is the sum of what Scrape returns.
func ScrapeSum(addr, name string) (float64, error) {
	values, err := Scrape(addr, name)
	sum := 0.0
	for _, v := range values {
		sum += v
	}
	return sum, err
}
