package ui

import (
	"bytes"
	"fmt"
	"html/template"
	"time"

	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/chart"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/usage"
)

// The console's charts, drawn by internal/chart as inline SVG (styled by
// classes from /static/chart.css, so that the CSP's style-src 'self'
// holds), each with its data as a table behind a disclosure for screen
// readers and for reading exact figures.

// chartHTML is a chart ready to put in a page.
type chartHTML = template.HTML

// figure puts a chart and its data table in a <figure>.
func figure(c chart.Chart) chartHTML {
	var b bytes.Buffer
	b.WriteString(`<figure class="chart-figure">`)
	b.WriteString(string(c.SVG()))
	b.WriteString(`<details class="chart-data"><summary>Data table</summary>`)
	b.WriteString(string(c.Table().HTML()))
	b.WriteString(`</details></figure>`)
	return chartHTML(b.String())
}

// bar is one category of a bar chart of checks.
type bar struct {
	Label           string
	Allowed, Denied int64
}

// perBucket names the unit of a series of buckets of g.
func perBucket(g usage.Granularity) string {
	switch g {
	case usage.GranularityMinute:
		return "checks per minute"
	case usage.GranularityHour:
		return "checks per hour"
	case usage.GranularityDay:
		return "checks per day"
	}
	return "checks per month"
}

// Chart widths: for a full-width card and for a half-width one, so that
// the text of charts keeps about the same size.
const (
	wide   = 1120
	narrow = 560
)

// usageChart draws allowed and rejected checks per bucket, stacked, width
// wide or narrow.
func usageChart(id, title string, points []usage.Point, g usage.Granularity, width int) chartHTML {
	var allowed, denied []chart.Point
	for _, p := range points {
		allowed = append(allowed, chart.At(p.At, float64(p.Allowed)))
		denied = append(denied, chart.At(p.At, float64(p.Denied)))
	}
	return figure(chart.Plot{
		Title: title, ID: id, Width: width, Height: 220,
		X:       chart.Axis{Time: true},
		Y:       chart.Axis{Label: perBucket(g)},
		Stacked: true,
		Series: []chart.Series{
			{Name: "allowed", Kind: chart.StepArea, Tone: chart.Good, Points: allowed},
			{Name: "rejected", Kind: chart.StepArea, Tone: chart.Bad, Points: denied},
		},
	})
}

// barsChart draws allowed and rejected checks per category, stacked.
func barsChart(id, title, category string, bars []bar) chartHTML {
	c := chart.Bars{Title: title, ID: id, Width: narrow, Height: 220, XLabel: category,
		Y:      chart.Axis{Label: "checks"},
		Series: []chart.BarSeries{{Name: "allowed", Tone: chart.Good}, {Name: "rejected", Tone: chart.Bad}}}
	for _, b := range bars {
		c.Categories = append(c.Categories, b.Label)
		c.Series[0].Values = append(c.Series[0].Values, float64(b.Allowed))
		c.Series[1].Values = append(c.Series[1].Values, float64(b.Denied))
	}
	return figure(c)
}

// consumptionChart draws the month's units against the included ones,
// with the projection to the month's end.
func consumptionChart(p billing.Projection) chartHTML {
	return figure(chart.Progress{Title: "Units this month against the included units", ID: "consumption",
		Width: wide, Height: 40, Used: float64(p.UsedUnits), Included: float64(p.IncludedUnits),
		Projected: float64(p.ProjectedUnits), Unit: "units"})
}

// sparkline draws a key's checks per hour over the last 24 hours; id
// must be unique on the page.
func sparkline(id string, hours [24]int64, now time.Time) chartHTML {
	s := chart.Sparkline{Title: "Checks per hour, last 24 hours", ID: id, Width: 120, Height: 24, Fill: true}
	first := now.UTC().Truncate(time.Hour).Add(-23 * time.Hour)
	for i, n := range hours {
		s.Values = append(s.Values, float64(n))
		s.Labels = append(s.Labels, first.Add(time.Duration(i)*time.Hour).Format("15:04"))
	}
	return s.SVG()
}

// previewUnit is the time unit a preview's axis counts in.
func previewUnit(horizonUS int64) (int64, string) {
	switch {
	case horizonUS <= 2*limiter.SecondUS:
		return 1000, "ms"
	case horizonUS <= 3*limiter.MinuteUS:
		return limiter.SecondUS, "s"
	case horizonUS <= 3*limiter.HourUS:
		return limiter.MinuteUS, "min"
	case horizonUS <= 3*limiter.DayUS:
		return limiter.HourUS, "h"
	}
	return limiter.DayUS, "days"
}

// burstChart draws a rule's preview: the requests offered and admitted
// so far, against time. The burst is the first step; the slope after it
// is the rate the rule lets through.
func burstChart(r plans.Rule, p preview) chartHTML {
	unit, name := previewUnit(p.HorizonUS)
	var offered, admitted []chart.Point
	var o, a int64
	for _, t := range p.Ticks {
		o, a = o+t.Offered, a+t.Admitted
		x := float64(t.AtUS) / float64(unit)
		offered = append(offered, chart.Point{X: x, Y: float64(o)})
		admitted = append(admitted, chart.Point{X: x, Y: float64(a)})
	}
	return figure(chart.Plot{
		Title: fmt.Sprintf("%s: requests offered and admitted so far, for a burst of %s then %s every %s", r.Name,
			formatInt(p.Burst), formatInt(p.Sustained), formatPeriod(p.TickUS)),
		ID: "preview-" + r.Name, Width: 520, Height: 200,
		X: chart.Axis{Label: "time since the burst (" + name + ")"},
		Y: chart.Axis{Label: "requests so far"},
		Series: []chart.Series{
			{Name: "offered", Kind: chart.Step, Tone: chart.Neutral, Points: offered},
			{Name: "admitted", Kind: chart.StepArea, Tone: chart.Good, Points: admitted},
		},
	})
}
