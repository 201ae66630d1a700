// Command algochart replays a recorded bursty request trace through the
// in-memory limiter, once per algorithm with the same rate (10 per
// second), draws admitted and rejected requests over time as an SVG chart
// (one panel per algorithm), and prints how far the sliding window counter
// strays from the exact sliding window log on that trace.
//
// Run from the repository root:
//
//	go run ./scripts/algochart                 # chart docs/algorithms-trace.svg
//	go run ./scripts/algochart -generate       # rewrite the trace first
//
// The trace (testdata/bursty-trace.csv, columns t_us,cost) is generated
// from a fixed seed, so -generate reproduces it byte for byte.
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/internal/chart"
	"github.com/tollgate/tollgate/internal/limiter"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "algochart:", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	tracePath string
	svgPath   string
	generate  bool
}

func run(args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("algochart", flag.ContinueOnError)
	flags.SetOutput(stderr)
	var cfg config
	flags.StringVar(&cfg.tracePath, "trace", "scripts/algochart/testdata/bursty-trace.csv", "request trace (CSV t_us,cost)")
	flags.StringVar(&cfg.svgPath, "svg", "docs/algorithms-trace.svg", "chart to write")
	flags.BoolVar(&cfg.generate, "generate", false, "generate the trace from its seed and write it to -trace first")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if cfg.generate {
		if err := writeTrace(cfg.tracePath, generateTrace()); err != nil {
			return err
		}
	}
	trace, err := readTrace(cfg.tracePath)
	if err != nil {
		return err
	}
	replays, err := replayAll(trace)
	if err != nil {
		return err
	}
	if err := os.WriteFile(cfg.svgPath, []byte(drawChart(trace, replays)), 0o644); err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	return report(stdout, trace, replays)
}

// Trace shape: 60 s of background traffic below the limit, with bursts.
const (
	traceSeed   = 2026
	traceLength = 60 * limiter.SecondUS
	rateLimit   = 10 // per second, for every algorithm
)

// request is one line of the trace; at is µs from the trace's start.
type request struct {
	at   int64
	cost int64
}

// generateTrace returns the recorded trace: Poisson background traffic of
// 6 requests per second, bursts of 15–60 requests over 50–800 ms every
// 3–9 s, and one burst of 20 straddling the 30 s boundary, where fixed
// windows admit twice their limit.
func generateTrace() []request {
	r := rand.New(rand.NewPCG(traceSeed, 1))
	var trace []request
	for t := int64(0); ; {
		t += int64(r.ExpFloat64() * float64(limiter.SecondUS) / 6)
		if t >= traceLength {
			break
		}
		trace = append(trace, request{at: t, cost: 1})
	}
	for start := int64(2 * limiter.SecondUS); start < traceLength-limiter.SecondUS; start += 3*limiter.SecondUS + r.Int64N(6*limiter.SecondUS) {
		n, spread := 15+r.IntN(46), 50_000+r.Int64N(750_000)
		for range n {
			trace = append(trace, request{at: start + r.Int64N(spread), cost: 1})
		}
	}
	for range 20 {
		trace = append(trace, request{at: 29_900_000 + r.Int64N(200_000), cost: 1})
	}
	slices.SortStableFunc(trace, func(a, b request) int { return cmp.Compare(a.at, b.at) })
	return trace
}

func writeTrace(path string, trace []request) error {
	if err := os.WriteFile(path, []byte(formatTrace(trace)), 0o644); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	return nil
}

// formatTrace returns trace as CSV with a t_us,cost header.
func formatTrace(trace []request) string {
	var b strings.Builder
	b.WriteString("t_us,cost\n")
	for _, q := range trace {
		fmt.Fprintf(&b, "%d,%d\n", q.at, q.cost)
	}
	return b.String()
}

func readTrace(path string) ([]request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	defer f.Close()
	rows, err := csv.NewReader(bufio.NewReader(f)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("read trace %s: %w", path, err)
	}
	if len(rows) == 0 || !slices.Equal(rows[0], []string{"t_us", "cost"}) {
		return nil, fmt.Errorf("read trace %s: want a t_us,cost header", path)
	}
	trace := make([]request, 0, len(rows)-1)
	for i, row := range rows[1:] {
		at, err1 := strconv.ParseInt(row[0], 10, 64)
		cost, err2 := strconv.ParseInt(row[1], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("read trace %s line %d: %w", path, i+2, err)
		}
		if i > 0 && at < trace[i-1].at {
			return nil, fmt.Errorf("read trace %s line %d: time goes back", path, i+2)
		}
		trace = append(trace, request{at: at, cost: cost})
	}
	return trace, nil
}

// rule is one algorithm of the comparison, all at rateLimit per second.
type rule struct {
	name   string
	params limiter.Params
}

var rules = []rule{
	{"gcra", limiter.Params{Algorithm: limiter.GCRA, Limit: rateLimit, PeriodUS: limiter.SecondUS}},
	{"token_bucket", limiter.Params{Algorithm: limiter.TokenBucket, Limit: rateLimit, PeriodUS: limiter.SecondUS}},
	{"leaky_bucket (police)", limiter.Params{Algorithm: limiter.LeakyBucket, Limit: rateLimit, PeriodUS: limiter.SecondUS}},
	{"leaky_bucket (shape)", limiter.Params{Algorithm: limiter.LeakyBucket, Limit: rateLimit, PeriodUS: limiter.SecondUS, Shape: true}},
	{"fixed_window", limiter.Params{Algorithm: limiter.FixedWindow, Limit: rateLimit, PeriodUS: limiter.SecondUS}},
	{"sliding_window_log", limiter.Params{Algorithm: limiter.SlidingWindowLog, Limit: rateLimit, PeriodUS: limiter.SecondUS}},
	{"sliding_window_counter", limiter.Params{Algorithm: limiter.SlidingWindowCounter, Limit: rateLimit, PeriodUS: limiter.SecondUS}},
}

// traceStart is where the trace is placed on the clock: 2026-01-01T00:00Z,
// so windows start at whole seconds of the trace.
const traceStart int64 = 1_767_225_600_000_000

// replay is one rule's verdicts on the trace.
type replay struct {
	rule    rule
	results []limiter.Result
}

func replayAll(trace []request) ([]replay, error) {
	out := make([]replay, len(rules))
	for i, r := range rules {
		store := limiter.NewMemoryStore(func() int64 { return traceStart })
		reqs := []limiter.Request{{Key: "{trace}:" + r.name, Params: r.params}}
		out[i] = replay{rule: r, results: make([]limiter.Result, len(trace))}
		for j, q := range trace {
			o, err := store.Check(context.Background(), limiter.Batch{Requests: reqs, Cost: q.cost, NowUS: traceStart + q.at})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.name, err)
			}
			out[i].results[j] = o.Results[0]
		}
	}
	return out, nil
}

// maxInWindow returns the most units let through within any period (the
// true sliding window (t − period, t]), counted when released: at the
// request's time plus any shaping delay.
func maxInWindow(trace []request, results []limiter.Result, period int64) int64 {
	var admitted []request
	for i, q := range trace {
		if results[i].Allowed {
			admitted = append(admitted, request{at: q.at + results[i].DelayUS, cost: q.cost})
		}
	}
	slices.SortStableFunc(admitted, func(a, b request) int { return cmp.Compare(a.at, b.at) })
	var best, sum int64
	first := 0
	for _, q := range admitted {
		sum += q.cost
		for admitted[first].at <= q.at-period {
			sum -= admitted[first].cost
			first++
		}
		best = max(best, sum)
	}
	return best
}

// counterError compares the sliding window counter with the exact log.
type counterError struct {
	requests int
	// Verdicts of two independent replays of the trace.
	counterOnly, logOnly int // admitted by one algorithm, denied by the other
	// Verdicts of the counter judged on its own admitted history against
	// the true sliding window.
	over  int   // admitted though the true window was already full
	under int   // denied though the true window had room
	peak  int64 // most units in any true window
}

func measureCounter(trace []request, log, counter []limiter.Result) counterError {
	e := counterError{requests: len(trace)}
	var window []request // the counter's admitted units in the true window
	for i, q := range trace {
		if counter[i].Allowed != log[i].Allowed {
			if counter[i].Allowed {
				e.counterOnly++
			} else {
				e.logOnly++
			}
		}
		cut := 0
		for cut < len(window) && window[cut].at <= q.at-limiter.SecondUS {
			cut++
		}
		window = window[cut:]
		var inWindow int64
		for _, w := range window {
			inWindow += w.cost
		}
		fits := inWindow+q.cost <= rateLimit
		switch {
		case counter[i].Allowed && !fits:
			e.over++
		case !counter[i].Allowed && fits:
			e.under++
		}
		if counter[i].Allowed {
			window = append(window, q)
			e.peak = max(e.peak, inWindow+q.cost)
		}
	}
	return e
}

func pct(n, of int) float64 { return 100 * float64(n) / float64(of) }

func report(w io.Writer, trace []request, replays []replay) error {
	fmt.Fprintf(w, "trace: %d requests over %d s, limit %d per second for every algorithm\n\n", len(trace), traceLength/limiter.SecondUS, rateLimit)
	fmt.Fprintln(w, "| algorithm | admitted | rejected | most let through in any 1 s |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	byName := map[string][]limiter.Result{}
	for _, r := range replays {
		admitted := 0
		for _, res := range r.results {
			if res.Allowed {
				admitted++
			}
		}
		byName[r.rule.name] = r.results
		fmt.Fprintf(w, "| %s | %d | %d | %d |\n", r.rule.name, admitted, len(trace)-admitted, maxInWindow(trace, r.results, limiter.SecondUS))
	}
	log := byName["sliding_window_log"]
	// The measure itself, applied to the exact log, must find no error.
	if self := measureCounter(trace, log, log); self.over != 0 || self.under != 0 || self.peak > rateLimit {
		return fmt.Errorf("error measure is broken: the exact log scores %+v", self)
	}
	e := measureCounter(trace, log, byName["sliding_window_counter"])
	fmt.Fprintln(w)
	fmt.Fprintln(w, "sliding_window_counter vs the exact sliding_window_log:")
	fmt.Fprintf(w, "  independent replays: counter admitted %d (%.2f%%) the log denied, denied %d (%.2f%%) the log admitted\n",
		e.counterOnly, pct(e.counterOnly, e.requests), e.logOnly, pct(e.logOnly, e.requests))
	fmt.Fprintf(w, "  against the true window of its own admissions: over-admitted %d (%.2f%%), under-admitted %d (%.2f%%) of %d requests; peak %d in a window of limit %d\n",
		e.over, pct(e.over, e.requests), e.under, pct(e.under, e.requests), e.requests, e.peak, rateLimit)
	return nil
}

// Chart geometry (SVG user units).
const (
	chartWidth  = 960
	panelHeight = 126     // per algorithm: its name, the plot and the time axis
	binUS       = 250_000 // 250 ms bins
)

// chartTop is the y-axis maximum, requests per bin; taller bars (rejected
// bursts) are clipped so that admitted traffic stays readable.
const chartTop = 15

// drawChart draws one panel per replay: per 250 ms, admitted requests
// (for shaping, at the time they are released) stacked under rejected
// ones, clipped at chartTop, with the limit's rate as a dashed line.
func drawChart(trace []request, replays []replay) string {
	bins := int(traceLength / binUS)
	binSeconds := float64(binUS) / float64(limiter.SecondUS)
	seconds := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + " s" }
	limitPerBin := float64(rateLimit) * binSeconds
	panels := make([]chart.Plot, len(replays))
	for i, r := range replays {
		admitted, rejected := make([]int, bins+1), make([]int, bins+1)
		for j, q := range trace {
			res := r.results[j]
			if res.Allowed {
				admitted[min(bins, int((q.at+res.DelayUS)/binUS))]++
			} else {
				rejected[min(bins, int(q.at/binUS))]++
			}
		}
		// The last bin holds what shaping releases after the trace's end:
		// beyond the chart, as before.
		a, rej := make([]chart.Point, bins), make([]chart.Point, bins)
		for bin := range bins {
			x := float64(bin) * binSeconds
			a[bin] = chart.Point{X: x, Y: float64(admitted[bin])}
			rej[bin] = chart.Point{X: x, Y: float64(rejected[bin])}
		}
		panels[i] = chart.Plot{
			Title:   r.rule.name,
			Height:  panelHeight,
			X:       chart.Axis{Min: 0, Max: float64(traceLength / limiter.SecondUS), Format: seconds},
			Y:       chart.Axis{Min: 0, Max: chartTop},
			Stacked: true,
			Series: []chart.Series{
				{Name: "admitted", Kind: chart.StepArea, Tone: chart.Good, Points: a},
				{Name: "rejected", Kind: chart.StepArea, Tone: chart.Bad, Points: rej},
			},
			Rules: []chart.Rule{{Value: limitPerBin, Label: fmt.Sprintf("limit rate (%g per 250 ms)", limitPerBin)}},
		}
	}
	var b strings.Builder // never fails to write
	_ = chart.Standalone(&b, chart.Panels{
		Title: fmt.Sprintf("The same bursty trace (%d requests, 60 s) through each algorithm at %d per second", len(trace), rateLimit),
		Note:  fmt.Sprintf("Requests per 250 ms, admitted under rejected; bars clipped at %d (dashed where cut); shaping: admitted shown when released", chartTop),
		Width: chartWidth,
		Plots: panels,
	})
	return b.String()
}
