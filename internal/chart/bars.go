package chart

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
)

// Bars is a bar chart of values per category (usage per key, consumption
// per month), the series stacked in each category: positive values
// upwards, negative ones downwards.
type Bars struct {
	// Title, Desc, ID, Width and Height are as for Plot.
	Title, Desc   string
	ID            string
	Width, Height int
	// Categories label the bars along the x axis; labels too long for
	// their room are shortened (with "…") and given in full in tooltips
	// and the table. With no categories, there are as many as the longest
	// series has values, unlabelled.
	Categories []string
	// XLabel names the categories ("API key", "month").
	XLabel string
	Series []BarSeries
	// Y is the value axis; Time is ignored.
	Y     Axis
	Rules []Rule
}

// BarSeries is one value per category, in the order of Bars.Categories. A
// missing, NaN or infinite value draws no bar.
type BarSeries struct {
	Name   string
	Tone   Tone
	Values []float64
}

// WriteSVG writes the chart as an <svg> element; it returns only w's error.
func (c Bars) WriteSVG(w io.Writer) error { return writeSVG(w, c) }

// SVG returns the chart as an <svg> element for html/template.
func (c Bars) SVG() template.HTML { return svgHTML(c) }

// valueFormat formats values: Y.Format, or formatValue (Y.Time is
// ignored).
func (c Bars) valueFormat() func(float64) string {
	if c.Y.Format != nil {
		return c.Y.Format
	}
	return formatValue
}

func (c Bars) categories() int {
	n := len(c.Categories)
	if n == 0 {
		for _, s := range c.Series {
			n = max(n, len(s.Values))
		}
	}
	return min(n, maxBars)
}

// maxBars bounds the categories drawn; the table has them all.
const maxBars = 2000

func (c Bars) category(i int) string {
	if i < len(c.Categories) {
		return c.Categories[i]
	}
	return strconv.Itoa(i + 1)
}

// value returns series s's value in category i, and whether there is one.
func (c Bars) value(s, i int) (float64, bool) {
	vs := c.Series[s].Values
	if i >= len(vs) || !usable(vs[i]) {
		return 0, false
	}
	return vs[i], true
}

func (c Bars) render(standalone bool) []byte {
	width, height := size(c.Width, defaultWidth, 60), size(c.Height, defaultHeight, 40)
	seed := []any{"bars", c.Title, c.XLabel, c.Y.Label, c.Y.Min, c.Y.Max, c.Width, c.Height, c.Categories}
	for _, s := range c.Series {
		seed = append(seed, s.Name, s.Values)
	}
	id := chartID(c.ID, seed...)
	n := c.categories()

	// The data's extent, with stacks, zero and the rules.
	integer, empty := true, true
	lo, hi := 0.0, 0.0
	for i := range n {
		var up, down float64
		for s := range c.Series {
			v, ok := c.value(s, i)
			if !ok {
				continue
			}
			empty = false
			if v != math.Trunc(v) {
				integer = false
			}
			if v >= 0 {
				up += v
			} else {
				down += v
			}
			lo, hi = min(lo, down), max(hi, up)
		}
	}
	for _, r := range c.Rules {
		if usable(r.Value) {
			lo, hi = min(lo, r.Value), max(hi, r.Value)
		}
	}

	var s svg
	s.open("bars", id, width, height, c.Title, c.description(n, empty), standalone)
	var entries []legendEntry
	for i, bs := range c.Series {
		if bs.Name != "" {
			entries = append(entries, legendEntry{swatchBox, i, bs.Tone, bs.Name})
		}
	}
	for _, r := range c.Rules {
		if r.Label != "" {
			entries = append(entries, legendEntry{swatchRule, 0, Palette, r.Label})
		}
	}
	legend := layoutLegend(entries, 4, 18, width-4)
	top := 8 + 16*float64(len(legend))
	if c.Y.Label != "" {
		top += 14
	}
	bottom := height - 20
	if c.XLabel != "" {
		bottom -= 14
	}
	if bottom-top < 10 {
		top, bottom = max(2, height/2-5), min(height-2, height/2+5)
	}
	y, yticks, widest := yAxis(c.Y, lo, hi, integer, top, bottom)
	left := min(width/2, max(24, widest+10))
	right := max(left+10, width-8)

	drawLegend(&s, legend)
	if c.Y.Label != "" {
		s.textAt(4, top-8, "", "chart-unit", fit(c.Y.Label, width-8))
	}
	drawYAxis(&s, yticks, y, left, right)
	baseline := y.at(max(y.d0, min(y.d1, 0)))
	band := (right - left) / float64(max(n, 1))
	barW := band * 0.8
	format := c.valueFormat()
	unit := ""
	if c.Y.Label != "" {
		unit = " " + c.Y.Label
	}
	clamp := func(v float64) float64 { return max(top-1, min(bottom+1, y.at(v))) }
	var clipped pathBuilder
	up, down := make([]float64, n), make([]float64, n)
	for si, bs := range c.Series {
		s.raw("<g")
		s.seriesAttrs(si, bs.Tone, "")
		s.raw(` fill="currentColor">` + "\n")
		for i := range n {
			v, ok := c.value(si, i)
			if !ok || v == 0 {
				continue
			}
			x := left + band*float64(i) + band*0.1
			var from, to float64
			if v > 0 {
				from, to = up[i], up[i]+v
				up[i] = to
			} else {
				from, to = down[i], down[i]+v
				down[i] = to
			}
			y0, y1 := clamp(from), clamp(to)
			if to > y.d1 {
				clipped.cmd('M', x, top+1)
				clipped.cmd('h', barW)
			}
			s.raw("<rect")
			s.numAttr("x", x)
			s.numAttr("y", min(y0, y1))
			s.numAttr("width", max(barW-0.5, 0.5))
			s.numAttr("height", math.Abs(y1-y0))
			s.raw("><title>")
			label := c.category(i)
			if bs.Name != "" {
				label += ", " + bs.Name
			}
			s.text(label + ": " + format(v) + unit)
			s.raw("</title></rect>\n")
		}
		s.raw("</g>\n")
	}
	for _, r := range c.Rules {
		if !usable(r.Value) || r.Value < y.d0 || r.Value > y.d1 {
			continue
		}
		s.raw(`<path class="chart-rule" d="M`)
		s.num(left)
		s.raw(" ")
		s.num(y.at(r.Value))
		s.raw("H")
		s.num(right)
		s.raw(`" stroke="currentColor" stroke-opacity="0.8" stroke-dasharray="4 3"/>` + "\n")
	}
	if !clipped.empty() {
		s.raw(`<path class="chart-clipped" d="`)
		s.raw(string(clipped.b))
		s.raw(`" stroke="#fff" stroke-width="2" stroke-dasharray="3 2"/>` + "\n")
	}

	// Category labels, every k-th when they would not fit side by side,
	// shortened when they are long.
	var longest float64
	for i := range n {
		longest = max(longest, textWidth(c.category(i)))
	}
	// A label is centred under its bar, so the first may only be twice as
	// wide as the room left of its centre.
	labelWidth := min(longest, 12*charWidth, 2*(left+band/2-2))
	every := max(1, int(math.Ceil((labelWidth+6)/band)))
	runes := int(min(band*float64(every)-6, 2*(left+band/2-2)) / charWidth)
	var ticks []tick
	for i := 0; i < n; i += every {
		if i < len(c.Categories) {
			ticks = append(ticks, tick{float64(i), clip(c.Categories[i], runes)})
		}
	}
	axis := linear{-0.5, float64(n) - 0.5, left, right}
	drawXAxis(&s, ticks, axis, left, right, bottom, baseline)
	if c.XLabel != "" {
		s.textAt((left+right)/2, bottom+32, "middle", "chart-axis-label", fit(c.XLabel, width))
	}
	if empty {
		s.textAt((left+right)/2, (top+bottom)/2+4, "middle", "chart-empty", "No data")
	}
	s.close()
	return s.b
}

func (c Bars) description(n int, empty bool) string {
	if c.Desc != "" {
		return c.Desc
	}
	if empty {
		return "No data."
	}
	format := c.valueFormat()
	var b strings.Builder
	fmt.Fprintf(&b, "Bars for %d categories", n)
	if c.XLabel != "" {
		b.WriteString(" (" + c.XLabel + ")")
	}
	fmt.Fprintf(&b, ", %d series, stacked.", len(c.Series))
	unit := ""
	if c.Y.Label != "" {
		unit = " " + c.Y.Label
	}
	for si, bs := range c.Series {
		if si == 10 {
			fmt.Fprintf(&b, " And %d more.", len(c.Series)-si)
			break
		}
		name := seriesName(bs.Name, si)
		best, highest, sum := -1, 0.0, 0.0
		for i := range n {
			v, ok := c.value(si, i)
			if !ok {
				continue
			}
			sum += v
			if best < 0 || v > highest {
				best, highest = i, v
			}
		}
		if best < 0 {
			fmt.Fprintf(&b, " %s: no data.", name)
			continue
		}
		fmt.Fprintf(&b, " %s: total %s%s, highest %s in %s.", name, format(sum), unit, format(highest), c.category(best))
	}
	return b.String()
}

// Table returns a row per category and a column per series, with a total
// column when there are two series or more.
func (c Bars) Table() Table {
	t := Table{Caption: c.Title}
	if c.Y.Label != "" {
		t.Caption += " (" + c.Y.Label + ")"
	}
	first := c.XLabel
	if first == "" {
		first = "category"
	}
	t.Header = []string{first}
	for i, s := range c.Series {
		name := seriesName(s.Name, i)
		t.Header = append(t.Header, name)
	}
	total := len(c.Series) > 1
	if total {
		t.Header = append(t.Header, "total")
	}
	format := c.valueFormat()
	n := len(c.Categories)
	if n == 0 {
		for _, s := range c.Series {
			n = max(n, len(s.Values))
		}
	}
	for i := range n {
		row := []string{c.category(i)}
		var sum float64
		var any bool
		for s := range c.Series {
			v, ok := c.value(s, i)
			if !ok {
				row = append(row, "")
				continue
			}
			sum, any = sum+v, true
			row = append(row, format(v))
		}
		if total {
			if any {
				row = append(row, format(sum))
			} else {
				row = append(row, "")
			}
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}
