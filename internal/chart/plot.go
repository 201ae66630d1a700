package chart

import (
	"cmp"
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Kind is how a plot draws a series.
type Kind int

// Kinds of series.
const (
	// Step, the zero value, holds each value until the next point: the
	// last one for as long as the step before it (for counts per bucket,
	// a point per bucket start).
	Step Kind = iota
	// StepArea is Step filled down to zero, or, when the plot is Stacked,
	// down to the stacked series before it: a histogram.
	StepArea
)

func (k Kind) String() string {
	switch k {
	case Step:
		return "step"
	case StepArea:
		return "step area"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Point is one value of a series: X is a number or, on a time axis, Unix
// seconds (At converts a time.Time).
type Point struct{ X, Y float64 }

// Series is one named set of points.
type Series struct {
	// Name labels the series in the legend, tooltips and the table.
	Name string
	// Kind is Step unless set; a Kind other than StepArea draws as Step.
	Kind Kind
	// Tone, if set, colours the series by meaning instead of position.
	Tone Tone
	// Points need not be sorted by X. Points with a NaN or infinite
	// coordinate are skipped.
	Points []Point
}

// Plot is a chart of series against a numeric or time x axis: a time
// series of checks per minute, a limiter's admissions over a trace.
type Plot struct {
	// Title is the chart's accessible name (its <title>); the page shows
	// its own heading. Desc describes it for screen readers; empty, it is
	// a summary of the data.
	Title, Desc string
	// ID prefixes the ids inside the SVG, which must be unique on a page.
	// Empty, it is derived from the title, size and a sample of the data:
	// set it where a page may show two charts that are alike in those.
	ID string
	// Width and Height default to 640 × 240.
	Width, Height int
	X, Y          Axis
	Series        []Series
	// Stacked stacks the StepArea series, in order, on each other: a
	// point is added to the earlier stacked points at the same X. Step
	// series are drawn on top, unstacked.
	Stacked bool
	Rules   []Rule
}

// WriteSVG writes the plot as an <svg> element; it returns only w's error.
func (p Plot) WriteSVG(w io.Writer) error { return writeSVG(w, p) }

// SVG returns the plot as an <svg> element for html/template.
func (p Plot) SVG() template.HTML { return svgHTML(p) }

func (p Plot) id() string {
	// Not Axis as a whole: a Format func prints as its address.
	seed := []any{"plot", p.Title, p.X.Label, p.X.Time, p.X.Min, p.X.Max, p.Y.Label, p.Y.Min, p.Y.Max, p.Width, p.Height}
	for _, s := range p.Series {
		seed = append(seed, s.Name, s.Kind, len(s.Points))
		if n := len(s.Points); n > 0 {
			seed = append(seed, s.Points[0], s.Points[n/2], s.Points[n-1])
		}
	}
	return chartID(p.ID, seed...)
}

func (p Plot) render(standalone bool) []byte {
	d := p.prepare()
	w, h := size(p.Width, defaultWidth, 60), size(p.Height, defaultHeight, 40)
	id := p.id()
	var s svg
	s.open("plot", id, w, h, p.Title, p.description(d), standalone)
	opts := plotOpts{legendX: 4, legend: true}
	lay := p.layout(d, w, h, opts)
	p.draw(&s, id, d, lay, opts)
	s.close()
	return s.b
}

// plotData is a plot's usable points, sorted, stacked, and their extent.
type plotData struct {
	series  []seriesData
	integer bool // every value is a whole number
	empty   bool // no usable point at all
	// Extent of the data: x including the last steps, y including zero,
	// the stacks and the rules.
	xlo, xhi, ylo, yhi float64
}

type seriesData struct {
	Series
	index int       // position in Plot.Series, for its colour
	base  []float64 // stacked series: the value under each point
	end   float64   // where the last step ends
}

func (d seriesData) top(i int) float64 {
	if d.base != nil {
		return d.base[i] + d.Points[i].Y
	}
	return d.Points[i].Y
}

func (p Plot) prepare() *plotData {
	d := &plotData{integer: true, empty: true}
	d.xlo, d.xhi = math.Inf(1), math.Inf(-1)
	d.ylo, d.yhi = 0, 0
	stacks := map[float64]float64{}
	for i, s := range p.Series {
		pts := make([]Point, 0, len(s.Points))
		sorted := true
		for _, q := range s.Points {
			if !usable(q.X) || !usable(q.Y) {
				continue
			}
			if n := len(pts); n > 0 && q.X < pts[n-1].X {
				sorted = false
			}
			pts = append(pts, q)
		}
		if !sorted {
			slices.SortStableFunc(pts, func(a, b Point) int { return cmp.Compare(a.X, b.X) })
		}
		sd := seriesData{Series: s, index: i}
		sd.Points = pts
		if p.Stacked && s.Kind == StepArea {
			sd.base = make([]float64, len(pts))
			for j, q := range pts {
				sd.base[j] = stacks[q.X]
				stacks[q.X] += q.Y
			}
		}
		if n := len(pts); n > 0 {
			d.empty = false
			d.xlo = min(d.xlo, pts[0].X)
			d.xhi = max(d.xhi, pts[n-1].X)
			sd.end = pts[n-1].X
			if n > 1 {
				sd.end += pts[n-1].X - pts[n-2].X
				d.xhi = max(d.xhi, sd.end)
			}
		}
		for j, q := range pts {
			if q.Y != math.Trunc(q.Y) {
				d.integer = false
			}
			v := sd.top(j)
			d.ylo, d.yhi = min(d.ylo, v), max(d.yhi, v)
		}
		d.series = append(d.series, sd)
	}
	for _, r := range p.Rules {
		if usable(r.Value) {
			d.ylo, d.yhi = min(d.ylo, r.Value), max(d.yhi, r.Value)
		}
	}
	if d.empty {
		d.xlo, d.xhi = 0, 1
	}
	return d
}

// plotOpts are the differences between a plot on its own and a panel.
type plotOpts struct {
	legend  bool    // draw the plot's own legend
	legendX float64 // where legend rows start
	heading string  // a visible heading above the plot area
	left    float64 // the plot area's left edge; 0 to fit the tick labels
}

// plotLayout is where everything goes, in the plot's own coordinates.
type plotLayout struct {
	width, height            float64
	left, top, right, bottom float64 // the plot area
	legend                   []legendRow
	x, y                     linear
	xticks, yticks           []tick
	xLabel                   string
}

func (p Plot) layout(d *plotData, width, height float64, o plotOpts) plotLayout {
	l := plotLayout{width: width, height: height}
	top := 8.0
	if o.heading != "" {
		top += 16
	}
	if o.legend {
		l.legend = layoutLegend(p.legendEntries(), o.legendX, 18, width-4)
		top += 16*float64(len(l.legend)) + 4*b2f(len(l.legend) > 0)
	}
	if p.Y.Label != "" {
		top += 14
	}
	// The x label: the axis's, or for time the UTC date range.
	var xlo, xhi float64
	if p.X.fixed() {
		xlo, xhi = p.X.Min, p.X.Max
	} else {
		xlo, xhi = d.xlo, d.xhi
		if xlo == xhi {
			pad := max(1, math.Abs(xlo)*0.1)
			if p.X.Time {
				pad = 30 * minute
			}
			xlo, xhi = xlo-pad, xhi+pad
		}
	}
	l.xLabel = p.X.Label
	if l.xLabel == "" && p.X.Time && timeRange(xlo, xhi) && (!d.empty || p.X.fixed()) {
		l.xLabel = timeAxisLabel(xlo, xhi)
	}
	bottom := height - 20
	if l.xLabel != "" {
		bottom -= 14
	}
	if bottom-top < 10 { // too small for everything: keep a sliver
		top, bottom = max(2, height/2-5), min(height-2, height/2+5)
	}
	l.top, l.bottom = top, bottom

	var widest float64
	l.y, l.yticks, widest = yAxis(p.Y, d.ylo, d.yhi, d.integer, top, bottom)
	l.left = o.left
	if l.left == 0 {
		l.left = min(width/2, max(24, widest+10))
	}
	l.right = max(l.left+10, width-14)

	// x axis.
	l.x = linear{xlo, xhi, l.left, l.right}
	plotW := l.right - l.left
	xcount := max(2, int(plotW/90))
	switch {
	case d.empty && !p.X.fixed():
		// No data, no range: no x ticks.
	case p.X.Time:
		if timeRange(xlo, xhi) {
			l.xticks = timeTicks(xlo, xhi, xcount, plotW)
		}
		if p.X.Format != nil {
			for i := range l.xticks {
				l.xticks[i].label = p.X.Format(l.xticks[i].value)
			}
		}
	default:
		for ; xcount >= 1; xcount-- {
			vals, step, _, _ := niceTicks(xlo, xhi, xcount, false, false)
			format := p.X.Format
			if format == nil {
				format = tickFormatter(step, max(math.Abs(xlo), math.Abs(xhi)))
			}
			l.xticks = l.xticks[:0]
			for _, v := range vals {
				l.xticks = append(l.xticks, tick{v, format(v)})
			}
			if fits(l.xticks, plotW, xhi-xlo, xlo) {
				break
			}
		}
	}
	return l
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// yAxis returns the scale and ticks of a y axis for data from lo to hi
// drawn between top and bottom, and the width of the widest tick label.
func yAxis(a Axis, lo, hi float64, integer bool, top, bottom float64) (linear, []tick, float64) {
	// Stacks of huge values may add up beyond what ranges can hold.
	lo, hi = max(lo, -1e300), min(hi, 1e300)
	count := max(2, int((bottom-top)/25))
	var vals []float64
	var step float64
	if a.fixed() {
		lo, hi = a.Min, a.Max
		vals, step, _, _ = niceTicks(lo, hi, count, integer, false)
	} else {
		vals, step, lo, hi = niceTicks(lo, hi, count, integer, true)
	}
	format := a.Format
	if format == nil {
		format = tickFormatter(step, max(math.Abs(lo), math.Abs(hi)))
	}
	ticks := make([]tick, len(vals))
	widest := 0.0
	for i, v := range vals {
		ticks[i] = tick{v, format(v)}
		widest = max(widest, textWidth(ticks[i].label))
	}
	return linear{lo, hi, bottom, top}, ticks, widest
}

// timeRange reports whether [lo, hi] lies within the years 1 to 9999,
// which time ticks can name.
func timeRange(lo, hi float64) bool {
	return lo >= -62135596800 && hi <= 253402300799 && hi > lo
}

func (p Plot) legendEntries() []legendEntry {
	var entries []legendEntry
	for i, s := range p.Series {
		if s.Name == "" {
			continue
		}
		swatch := swatchLine
		if s.Kind == StepArea {
			swatch = swatchBox
		}
		entries = append(entries, legendEntry{swatch, i, s.Tone, s.Name})
	}
	for _, r := range p.Rules {
		if r.Label != "" {
			entries = append(entries, legendEntry{swatchRule, 0, Palette, r.Label})
		}
	}
	return entries
}

// draw writes the plot laid out by l.
func (p Plot) draw(s *svg, id string, d *plotData, l plotLayout, o plotOpts) {
	drawLegend(s, l.legend)
	if o.heading != "" {
		s.headingAt(l.left, 8+12+16*float64(len(l.legend)), "", "chart-heading", fit(o.heading, l.width-l.left))
	}
	if p.Y.Label != "" {
		s.textAt(4, l.top-8, "", "chart-unit", fit(p.Y.Label, l.width-8))
	}
	drawYAxis(s, l.yticks, l.y, l.left, l.right)
	baseline := l.y.at(max(l.y.d0, min(l.y.d1, 0)))
	drawXAxis(s, l.xticks, l.x, l.left, l.right, l.bottom, baseline)

	// Series, clipped to the plot area.
	clipID := id + "-clip"
	s.raw("<clipPath")
	s.attr("id", clipID)
	// Dots and lines at the ends of a range that fits the data show
	// whole; a fixed range cuts exactly.
	padX, padY := 4*b2f(!p.X.fixed()), 4*b2f(!p.Y.fixed())
	s.raw("><rect")
	s.numAttr("x", l.left-padX)
	s.numAttr("y", l.top-padY)
	s.numAttr("width", l.right-l.left+2*padX)
	s.numAttr("height", l.bottom-l.top+2*padY)
	s.raw("/></clipPath>\n<g")
	s.attr("clip-path", "url(#"+clipID+")")
	s.raw(">\n")
	for pass := range 2 { // step areas under steps
		for _, sd := range d.series {
			if (sd.Kind == StepArea) != (pass == 0) || len(sd.Points) == 0 {
				continue
			}
			drawSeries(s, sd, l, baseline, p.Stacked)
		}
	}
	s.raw("</g>\n")
	for _, r := range p.Rules {
		if !usable(r.Value) || r.Value < l.y.d0 || r.Value > l.y.d1 {
			continue
		}
		y := l.y.at(r.Value)
		s.raw(`<path class="chart-rule" d="M`)
		s.num(l.left)
		s.raw(" ")
		s.num(y)
		s.raw("H")
		s.num(l.right)
		s.raw(`" stroke="currentColor" stroke-opacity="0.8" stroke-dasharray="4 3">`)
		if r.Label != "" {
			s.raw("<title>")
			s.text(r.Label + ": " + p.Y.formatter()(r.Value))
			s.raw("</title>")
		}
		s.raw("</path>\n")
	}
	if p.Y.fixed() {
		for _, sd := range d.series {
			drawClipped(s, sd, l)
		}
	}
	if l.xLabel != "" {
		s.textAt((l.left+l.right)/2, l.bottom+32, "middle", "chart-axis-label", fit(l.xLabel, l.width))
	}
	if d.empty {
		s.textAt((l.left+l.right)/2, (l.top+l.bottom)/2+4, "middle", "chart-empty", "No data")
	}
}

// drawYAxis writes the grid lines and labels of the y ticks.
func drawYAxis(s *svg, ticks []tick, y linear, left, right float64) {
	if len(ticks) == 0 {
		return
	}
	var grid pathBuilder
	for _, t := range ticks {
		grid.cmd('M', left, y.at(t.value))
		grid.cmd('H', right)
	}
	s.raw(`<path class="chart-grid" d="`)
	s.raw(string(grid.b))
	s.raw(`" stroke="currentColor" stroke-opacity="0.15"/>` + "\n")
	s.raw(`<g class="chart-ticks chart-y" text-anchor="end">` + "\n")
	for _, t := range ticks {
		s.textAt(left-6, y.at(t.value)+4, "", "", t.label)
	}
	s.raw("</g>\n")
}

// drawXAxis writes the x axis line at baseline, tick marks and labels.
func drawXAxis(s *svg, ticks []tick, x linear, left, right, bottom, baseline float64) {
	var axis pathBuilder
	axis.cmd('M', left, baseline)
	axis.cmd('H', right)
	for _, t := range ticks {
		axis.cmd('M', x.at(t.value), bottom)
		axis.cmd('v', 4)
	}
	s.raw(`<path class="chart-axis" d="`)
	s.raw(string(axis.b))
	s.raw(`" stroke="currentColor" stroke-opacity="0.6"/>` + "\n")
	if len(ticks) == 0 {
		return
	}
	s.raw(`<g class="chart-ticks chart-x" text-anchor="middle">` + "\n")
	for i, t := range ticks {
		px, anchor := x.at(t.value), ""
		// Keep the labels at the ends inside the chart.
		half := textWidth(t.label) / 2
		switch {
		case i == len(ticks)-1 && px+half > right+12:
			anchor = "end"
		case i == 0 && px-half < 2:
			px, anchor = max(px, 2), "start"
		}
		s.textAt(px, bottom+15, anchor, "", t.label)
	}
	s.raw("</g>\n")
}

// downsample returns the indices of the points to draw. A series with more
// points than twice the plot's width in pixels is reduced to its lowest and
// highest point per pixel column, in their order; this keeps every peak and
// trough that would show.
func downsample(xs, ys []float64, width float64) []int {
	idx := make([]int, 0, min(len(xs), int(2*width)+4))
	if float64(len(xs)) <= 2*width {
		for i := range xs {
			idx = append(idx, i)
		}
		return idx
	}
	col := math.Inf(-1)
	lo, hi := -1, -1
	flush := func() {
		switch {
		case lo < 0:
		case lo == hi:
			idx = append(idx, lo)
		case lo < hi:
			idx = append(idx, lo, hi)
		default:
			idx = append(idx, hi, lo)
		}
	}
	for i, x := range xs {
		c := math.Floor(x)
		if c != col {
			flush()
			col, lo, hi = c, i, i
			continue
		}
		// Screen y grows downwards: lo is the highest value.
		if ys[i] < ys[lo] {
			lo = i
		}
		if ys[i] > ys[hi] {
			hi = i
		}
	}
	flush()
	return idx
}

// visible returns the range of points to draw: those within the x range
// and one neighbour on each side, so that lines leave the plot area.
func visible(pts []Point, lo, hi float64) (int, int) {
	first, _ := slices.BinarySearchFunc(pts, lo, func(q Point, x float64) int { return cmp.Compare(q.X, x) })
	last, _ := slices.BinarySearchFunc(pts, hi, func(q Point, x float64) int {
		if q.X <= x {
			return -1
		}
		return 1
	})
	return max(0, first-1), min(len(pts), last+1)
}

func drawSeries(s *svg, sd seriesData, l plotLayout, baseline float64, stacked bool) {
	from, to := visible(sd.Points, l.x.d0, l.x.d1)
	pts := sd.Points[from:to]
	if len(pts) == 0 {
		return
	}
	xs, tops := make([]float64, len(pts)), make([]float64, len(pts))
	var bases []float64
	if sd.base != nil {
		bases = make([]float64, len(pts))
	}
	for i, q := range pts {
		xs[i] = l.x.at(q.X)
		tops[i] = l.y.at(sd.top(from + i))
		if bases != nil {
			bases[i] = l.y.at(sd.base[from+i])
		}
	}
	idx := downsample(xs, tops, l.right-l.left)
	// Steps need every point; downsampled, a step is a line.
	stepped := len(idx) == len(pts)
	end := l.x.at(sd.end)
	if to < len(sd.Points) { // the last step is beyond the plot
		end = xs[len(xs)-1]
	}

	var line pathBuilder
	for n, i := range idx {
		switch {
		case n == 0:
			line.cmd('M', xs[i], tops[i])
		case stepped:
			line.cmd('H', xs[i])
			line.cmd('V', tops[i])
		default:
			line.cmd('L', xs[i], tops[i])
		}
	}
	if stepped {
		line.cmd('H', end)
	}

	if sd.Kind == StepArea {
		area := pathBuilder{b: slices.Clone(line.b)}
		last, first := idx[len(idx)-1], idx[0]
		lastX := xs[last]
		if stepped {
			lastX = end
		}
		if bases == nil {
			area.cmd('L', lastX, baseline)
			area.cmd('L', xs[first], baseline)
		} else {
			area.cmd('L', lastX, bases[last])
			for n := len(idx) - 1; n >= 0; n-- {
				i := idx[n]
				if stepped {
					if n < len(idx)-1 {
						area.cmd('V', bases[i])
					}
					area.cmd('H', xs[i])
				} else {
					area.cmd('L', xs[i], bases[i])
				}
			}
		}
		area.cmd('Z')
		opacity := "0.25"
		if stacked {
			opacity = "0.85"
		}
		seriesPath(s, sd, "chart-area", area.b, `fill="currentColor" fill-opacity="`+opacity+`"`)
		if stacked {
			return
		}
	}
	if len(idx) == 1 { // one point: a dot
		var dot pathBuilder
		dot.cmd('M', xs[idx[0]], tops[idx[0]])
		dot.cmd('h', 0)
		seriesPath(s, sd, "chart-dots", dot.b, `fill="none" stroke="currentColor" stroke-width="5" stroke-linecap="round"`)
		return
	}
	seriesPath(s, sd, "chart-line", line.b, `fill="none" stroke="currentColor" stroke-width="1.5" stroke-linejoin="round"`)
}

// seriesName is a series' name for text: its own, or "series N" (N from
// 1) for the i-th when it has none.
func seriesName(name string, i int) string {
	if name == "" {
		return "series " + strconv.Itoa(i+1)
	}
	return name
}

// seriesPath draws the path d of series sd, styled by class and painted
// by paint (fill and stroke attributes), titled with the series' name.
func seriesPath(s *svg, sd seriesData, class string, d []byte, paint string) {
	s.raw("<path")
	s.seriesAttrs(sd.index, sd.Tone, class)
	s.raw(` d="`)
	s.raw(string(d))
	s.raw(`" ` + paint + `>`)
	seriesTitle(s, sd.Name)
	s.raw("</path>\n")
}

func seriesTitle(s *svg, name string) {
	if name != "" {
		s.raw("<title>")
		s.text(name)
		s.raw("</title>")
	}
}

// drawClipped marks, along the top of the plot area, where a series goes
// beyond a fixed y range.
func drawClipped(s *svg, sd seriesData, l plotLayout) {
	var marks pathBuilder
	mark := func(x0, x1 float64) { // within the plot area only
		if x0, x1 = max(x0, l.left), min(x1, l.right); x0 < x1 {
			marks.cmd('M', x0, l.top+1)
			marks.cmd('H', x1)
		}
	}
	from, to := visible(sd.Points, l.x.d0, l.x.d1)
	openX := math.NaN() // start of the current run of clipped steps
	for i := from; i < to; i++ {
		over := sd.top(i) > l.y.d1
		x := l.x.at(sd.Points[i].X)
		switch {
		case over && math.IsNaN(openX):
			openX = x
		case !over && !math.IsNaN(openX):
			mark(openX, x)
			openX = math.NaN()
		}
	}
	if !math.IsNaN(openX) {
		end := l.x.at(sd.end)
		if to < len(sd.Points) {
			end = l.x.at(sd.Points[to-1].X)
		}
		mark(openX, end)
	}
	if marks.empty() {
		return
	}
	s.raw(`<path class="chart-clipped" d="`)
	s.raw(string(marks.b))
	s.raw(`" stroke="#fff" stroke-width="2" stroke-dasharray="3 2">`)
	s.raw("<title>")
	s.text(strings.TrimPrefix(sd.Name+": ", ": ") + "beyond " + formatValue(l.y.d1))
	s.raw("</title></path>\n")
}

// description summarises the data for screen readers, unless p.Desc is set.
func (p Plot) description(d *plotData) string {
	if p.Desc != "" {
		return p.Desc
	}
	if d.empty {
		return "No data."
	}
	var b strings.Builder
	formatX, formatY := p.X.formatter(), p.Y.formatter()
	unit := ""
	if p.Y.Label != "" {
		unit = " " + p.Y.Label
	}
	fmt.Fprintf(&b, "%d series", len(d.series))
	if p.Stacked {
		b.WriteString(", stacked")
	}
	if p.X.Time {
		b.WriteString(" over time (UTC)")
	} else if p.X.Label != "" {
		b.WriteString(" against " + p.X.Label)
	}
	b.WriteString(".")
	for i, sd := range d.series {
		if i == 10 {
			fmt.Fprintf(&b, " And %d more.", len(d.series)-i)
			break
		}
		name := seriesName(sd.Name, i)
		if len(sd.Points) == 0 {
			fmt.Fprintf(&b, " %s: no data.", name)
			continue
		}
		lo, hi, sum := sd.Points[0].Y, sd.Points[0].Y, 0.0
		for _, q := range sd.Points {
			lo, hi, sum = min(lo, q.Y), max(hi, q.Y), sum+q.Y
		}
		fmt.Fprintf(&b, " %s (%s): %d points from %s to %s, values %s to %s%s", name, sd.Kind, len(sd.Points),
			formatX(sd.Points[0].X), formatX(sd.Points[len(sd.Points)-1].X), formatY(lo), formatY(hi), unit)
		if d.integer { // counts: their total says most
			fmt.Fprintf(&b, ", total %s", formatY(sum))
		}
		b.WriteString(".")
	}
	for _, r := range p.Rules {
		if r.Label != "" && usable(r.Value) {
			fmt.Fprintf(&b, " %s at %s.", r.Label, formatY(r.Value))
		}
	}
	return b.String()
}

// xs returns the distinct x values of all series, sorted.
func (d *plotData) xs() []float64 {
	var xs []float64
	for _, sd := range d.series {
		for _, q := range sd.Points {
			xs = append(xs, q.X)
		}
	}
	slices.Sort(xs)
	return slices.Compact(xs)
}

// Table returns one row per distinct x (time or number) and one column per
// series, the values as given (not stacked). It is not downsampled: for a
// month of minutes, give the page's table hourly or daily sums instead.
func (p Plot) Table() Table {
	d := p.prepare()
	t := Table{Caption: p.Title}
	if p.Y.Label != "" {
		t.Caption += " (" + p.Y.Label + ")"
	}
	first := p.X.Label
	switch {
	case first != "":
	case p.X.Time:
		first = "time (UTC)"
	default:
		first = "x"
	}
	t.Header = append(t.Header, first)
	for i, sd := range d.series {
		name := seriesName(sd.Name, i)
		t.Header = append(t.Header, name)
	}
	xs := d.xs()
	formatX, formatY := p.X.formatter(), p.Y.formatter()
	t.Rows = make([][]string, len(xs))
	for i, x := range xs {
		t.Rows[i] = make([]string, len(d.series)+1)
		t.Rows[i][0] = formatX(x)
	}
	for c, sd := range d.series {
		for _, q := range sd.Points {
			r, _ := slices.BinarySearch(xs, q.X)
			t.Rows[r][c+1] = formatY(q.Y)
		}
	}
	return t
}
