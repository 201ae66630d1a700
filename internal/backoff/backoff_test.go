package backoff_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/internal/backoff"
	"github.com/tollgate/tollgate/internal/testenv"
)

func TestWaitsDoubleToTheCapWithJitter(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name   string
		policy backoff.Policy
		random float64
		want   []time.Duration
	}{
		{"no jitter", backoff.Policy{Initial: 100 * ms, Max: time.Second, Jitter: -1}, 0.9,
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second}},
		{"most jitter taken off", backoff.Policy{Initial: 100 * ms, Max: time.Second, Jitter: 0.5}, 0.999999,
			[]time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 500 * ms, 500 * ms}},
		{"no jitter drawn", backoff.Policy{Initial: 100 * ms, Max: time.Second}, 0,
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second}},
		{"defaults", backoff.Policy{}, 0,
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5 * time.Second, 5 * time.Second}},
		{"cap below initial", backoff.Policy{Initial: time.Second, Max: 10 * ms}, 0,
			[]time.Duration{time.Second, time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := backoff.NewWithRandom(tt.policy, func() float64 { return tt.random })
			for i, want := range tt.want {
				// Whole milliseconds: jitter of 0.999999 leaves a few ns.
				if got := b.Next().Round(ms); got != want {
					t.Errorf("wait %d = %v, want %v", i, got, want)
				}
			}
		})
	}
}

func TestResetStartsOver(t *testing.T) {
	b := backoff.NewWithRandom(backoff.Policy{Initial: 10 * time.Millisecond, Max: time.Second}, func() float64 { return 0 })
	for range 5 {
		b.Next()
	}
	b.Reset()
	if got := b.Next(); got != 10*time.Millisecond {
		t.Errorf("first wait after Reset = %v, want 10ms", got)
	}
}

// TestJitterStaysInBounds draws real random waits: each lies within
// [(1-Jitter)·w, w] of the unjittered wait w.
func TestJitterStaysInBounds(t *testing.T) {
	b := backoff.New(backoff.Policy{Initial: 100 * time.Millisecond, Max: 800 * time.Millisecond, Jitter: 0.25})
	ceiling := 100 * time.Millisecond
	for i := range 50 {
		got := b.Next()
		if got > ceiling || got < ceiling*3/4 {
			t.Fatalf("wait %d = %v, want within [%v, %v]", i, got, ceiling*3/4, ceiling)
		}
		ceiling = min(2*ceiling, 800*time.Millisecond)
	}
}

// TestMonitorLogsStateChangesOnly: a minute of failures, ten a second,
// is four lines — down, still down after 20 s and 40 s (Remind), back —
// and the metrics count every failure.
func TestMonitorLogsStateChangesOnly(t *testing.T) {
	var logs bytes.Buffer
	clock := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	m := backoff.NewMonitor(backoff.MonitorConfig{
		Component: "snapshot_listener", Dependency: "postgres", Remind: 20 * time.Second,
		Log: slog.New(slog.NewTextHandler(&logs, nil)), Now: func() time.Time { return clock },
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)

	m.Success() // up to begin with: nothing to say
	if logs.Len() != 0 {
		t.Fatalf("a success while up logged %q", logs.String())
	}
	down := errors.New("connection refused")
	for range 600 { // 60 s
		m.Failure(down)
		clock = clock.Add(100 * time.Millisecond)
	}
	if !m.Down() {
		t.Error("Down() = false during the outage")
	}
	m.Success()
	m.Success()

	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var kinds []string
	for _, l := range lines {
		switch {
		case strings.Contains(l, "postgres unavailable; retrying"):
			kinds = append(kinds, "down")
		case strings.Contains(l, "still unavailable"):
			kinds = append(kinds, "still")
		case strings.Contains(l, "postgres back"):
			kinds = append(kinds, "back")
		default:
			kinds = append(kinds, "?")
		}
	}
	if got, want := strings.Join(kinds, ","), "down,still,still,back"; got != want {
		t.Errorf("lines %s, want %s:\n%s", got, want, logs.String())
	}
	if !strings.Contains(lines[len(lines)-1], "failed_attempts=600") || !strings.Contains(lines[len(lines)-1], "down_for=1m0s") {
		t.Errorf("back line lacks the outage's count and length: %s", lines[len(lines)-1])
	}
	if !strings.Contains(lines[1], "failed_attempts=201") {
		t.Errorf("first reminder, 20 s in: %s", lines[1])
	}

	for name, want := range map[string]float64{
		"tollgate_dependency_failures_total": 600, "tollgate_dependency_outages_total": 1, "tollgate_dependency_up": 1,
	} {
		if got := gathered(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// gathered returns the value of the one series of the named metric.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	v, labels, ok := testenv.Metric(t, reg, name)
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	if labels["component"] != "snapshot_listener" || labels["dependency"] != "postgres" {
		t.Errorf("%s labels %v", name, labels)
	}
	return v
}

// TestMonitorsShareARegistry: components register side by side.
func TestMonitorsShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, c := range []string{"a", "b"} {
		m := backoff.NewMonitor(backoff.MonitorConfig{Component: c, Dependency: "redis"})
		if err := reg.Register(m.Collectors()[0]); err != nil {
			t.Fatal(err)
		}
	}
}
