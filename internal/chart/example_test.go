package chart_test

import (
	"html/template"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/tollgate/tollgate/internal/chart"
)

// A console page: the handler builds the charts, the template inserts them
// with their data tables, and the stylesheet is served as a file, so that
// a Content-Security-Policy of style-src 'self' holds.
func Example_page() {
	page := template.Must(template.New("usage").Parse(`<link rel="stylesheet" href="/static/chart.css">
<figure>
  {{.Checks.SVG}}
  <details><summary>Data</summary>{{.Checks.Table.HTML}}</details>
</figure>
<table>{{range .Keys}}<tr><td>{{.Name}}</td><td>{{.Trend.SVG}}</td></tr>{{end}}</table>
{{.Quota.SVG}}`))

	type key struct {
		Name  string
		Trend chart.Sparkline
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /static/chart.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		io.WriteString(w, chart.CSS)
	})
	mux.HandleFunc("GET /usage", func(w http.ResponseWriter, r *http.Request) {
		start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		var allowed, rejected []chart.Point
		for i := range 60 {
			t := start.Add(time.Duration(i) * time.Minute)
			allowed = append(allowed, chart.At(t, float64(900+i)))
			rejected = append(rejected, chart.At(t, float64(i%7)))
		}
		data := struct {
			Checks chart.Plot
			Keys   []key
			Quota  chart.Progress
		}{
			Checks: chart.Plot{
				Title:   "Checks per minute, last hour",
				X:       chart.Axis{Time: true},
				Y:       chart.Axis{Label: "checks per minute"},
				Stacked: true,
				Series: []chart.Series{
					{Name: "allowed", Kind: chart.StepArea, Tone: chart.Good, Points: allowed},
					{Name: "rejected", Kind: chart.StepArea, Tone: chart.Bad, Points: rejected},
				},
				Rules: []chart.Rule{{Value: 1000, Label: "limit"}},
			},
			Keys: []key{{"ci-runner", chart.Sparkline{Title: "ci-runner: checks per hour, last day", Values: []float64{3, 5, 2, 8}}}},
			Quota: chart.Progress{Title: "Checks this month", Unit: "checks",
				Used: 7_200_000, Included: 10_000_000, Projected: 12_500_000},
		}
		if err := page.Execute(w, data); err != nil {
			http.Error(w, "internal error", http.StatusInternalServerError)
		}
	})
	_ = mux // served by the console's server
}

func ExampleSparkline() {
	spark := chart.Sparkline{Title: "Checks per hour", ID: "key-1-trend", Values: []float64{3, 5, 2, 8}}
	spark.WriteSVG(os.Stdout)
	// Output:
	// <svg xmlns="http://www.w3.org/2000/svg" class="chart chart-sparkline" width="100" height="20" viewBox="0 0 100 20" role="img" aria-labelledby="key-1-trend-title" aria-describedby="key-1-trend-desc" font-family="sans-serif" font-size="11" fill="currentColor">
	// <title id="key-1-trend-title">Checks per hour</title>
	// <desc id="key-1-trend-desc">4 values from 3 to 8; lowest 2, highest 8.</desc>
	// <path class="series series-0 chart-line" color="#0072b2" d="M2.5 11.9L34.2 8.1L65.8 13.8L97.5 2.5" fill="none" stroke="currentColor" stroke-width="1.2" stroke-linejoin="round"/>
	// <path class="series series-0 chart-dots" color="#0072b2" d="M97.5 2.5h0" stroke="currentColor" stroke-width="4" stroke-linecap="round"/>
	// </svg>
}

func ExampleBars_Table() {
	usage := chart.Bars{
		Title:      "Calls per key",
		XLabel:     "key",
		Y:          chart.Axis{Label: "calls"},
		Categories: []string{"ci-runner", "<b>web</b>"},
		Series:     []chart.BarSeries{{Name: "March", Values: []float64{1200, 34000}}},
	}
	os.Stdout.WriteString(string(usage.Table().HTML()) + "\n")
	// Output:
	// <table class="chart-table"><caption>Calls per key (calls)</caption><thead><tr><th scope="col">key</th><th scope="col">March</th></tr></thead><tbody><tr><th scope="row">ci-runner</th><td>1,200</td></tr><tr><th scope="row">&lt;b&gt;web&lt;/b&gt;</th><td>34,000</td></tr></tbody></table>
}
