package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const recordedTrace = "testdata/bursty-trace.csv"

// TestRecordedTraceIsReproducible: the committed trace is exactly what
// -generate writes, so the chart and the figures in the docs can be
// regenerated from the seed.
func TestRecordedTraceIsReproducible(t *testing.T) {
	recorded, err := os.ReadFile(recordedTrace)
	if err != nil {
		t.Fatal(err)
	}
	if got := formatTrace(generateTrace()); got != string(recorded) {
		t.Errorf("generated trace differs from %s: regenerate with go run ./scripts/algochart -generate", recordedTrace)
	}
}

func TestRunWritesChartAndReport(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "chart.svg")
	var stdout, stderr strings.Builder
	if err := run([]string{"-trace", recordedTrace, "-svg", svg}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	chart, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(chart), "<svg ") || strings.Count(string(chart), `font-weight="bold">`) != len(rules)+1 {
		t.Errorf("chart: want an SVG with a title and %d panels", len(rules))
	}
	for _, want := range []string{"| sliding_window_log |", "over-admitted", "under-admitted"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("report: missing %q in\n%s", want, stdout.String())
		}
	}
}

func TestRunRejectsBadTrace(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(bad, []byte("t_us,cost\n5,1\n4,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run([]string{"-trace", bad, "-svg", filepath.Join(t.TempDir(), "x.svg")}, &out, &out); err == nil || !strings.Contains(err.Error(), "time goes back") {
		t.Errorf("got %v, want a time-goes-back error", err)
	}
}
