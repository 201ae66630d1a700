package ui

import (
	"bytes"
	"html/template"
	"time"

	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/usage"
)

// chartHTML is a chart ready to put in a page: an SVG figure with its
// data as a text table.
type chartHTML = template.HTML

// bar is one bar of a bar chart.
type bar struct {
	Label, Href     string
	Allowed, Denied int64
}

// table is a chart's data, as an accessible table.
type table struct {
	Caption string
	Head    []string
	Rows    [][]string
}

var figure = template.Must(template.New("figure").Parse(`<figure class="chart">
<div class="chart-placeholder" role="img" aria-label="{{.Caption}}">{{.Caption}}</div>
<details><summary>Data table</summary><table class="compact"><caption class="sr-only">{{.Caption}}</caption>
<thead><tr>{{range .Head}}<th scope="col">{{.}}</th>{{end}}</tr></thead>
<tbody>{{range .Rows}}<tr>{{range $i, $c := .}}{{if eq $i 0}}<th scope="row">{{$c}}</th>{{else}}<td class="num">{{$c}}</td>{{end}}{{end}}</tr>{{end}}</tbody>
</table></details></figure>`))

func render(t table) chartHTML {
	var b bytes.Buffer
	if err := figure.Execute(&b, t); err != nil {
		return ""
	}
	return chartHTML(b.String())
}

// bucketLabel formats a bucket's start for g.
func bucketLabel(t time.Time, g usage.Granularity) string {
	switch g {
	case usage.GranularityMinute:
		return t.UTC().Format("15:04")
	case usage.GranularityHour:
		return t.UTC().Format("Jan 2 15:04")
	case usage.GranularityDay:
		return t.UTC().Format("Jan 2")
	}
	return t.UTC().Format("2006-01")
}

// usageChart draws allowed and rejected checks per bucket.
func usageChart(title string, points []usage.Point, g usage.Granularity) chartHTML {
	t := table{Caption: title, Head: []string{"Time (UTC)", "Allowed", "Rejected"}}
	for _, p := range points {
		t.Rows = append(t.Rows, []string{bucketLabel(p.At, g), formatInt(p.Allowed), formatInt(p.Denied)})
	}
	return render(t)
}

// barsChart draws allowed and rejected checks per label.
func barsChart(title string, bars []bar) chartHTML {
	t := table{Caption: title, Head: []string{"", "Allowed", "Rejected"}}
	for _, b := range bars {
		t.Rows = append(t.Rows, []string{b.Label, formatInt(b.Allowed), formatInt(b.Denied)})
	}
	return render(t)
}

// consumptionChart draws the month's units against the included ones,
// with the projection to the month's end.
func consumptionChart(p usage.Projection) chartHTML {
	return render(table{Caption: "Units this month against the included units", Head: []string{"", "Units"},
		Rows: [][]string{{"Used so far", formatInt(p.UsedUnits)}, {"Included", formatInt(p.IncludedUnits)},
			{"Projected at the month's end", formatInt(p.ProjectedUnits)}}})
}

// sparkline draws a key's checks per hour over the last 24 hours.
func sparkline(hours [24]int64) chartHTML {
	var total int64
	for _, n := range hours {
		total += n
	}
	return template.HTML(`<span class="muted small">` + template.HTMLEscapeString(formatInt(total)) + `</span>`)
}

// burstChart draws a rule's preview: the requests offered and admitted
// at each instant.
func burstChart(r plans.Rule, p preview) chartHTML {
	t := table{Caption: "What " + r.Name + " admits of a burst of " + formatInt(p.Burst) + " then " +
		formatInt(p.Sustained) + " every " + formatPeriod(p.TickUS), Head: []string{"Time since the burst", "Offered", "Admitted"}}
	for _, tick := range p.Ticks {
		t.Rows = append(t.Rows, []string{formatPeriod(max(tick.AtUS, 1)), formatInt(tick.Offered), formatInt(tick.Admitted)})
	}
	return render(t)
}
