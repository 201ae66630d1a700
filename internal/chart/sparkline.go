package chart

import (
	"fmt"
	"html/template"
	"io"
	"strconv"
)

// Sparkline is a tiny line without axes for a table row: equally spaced
// values, the last one marked with a dot. Its scale runs from zero (or the
// lowest value, if negative) to the highest value.
type Sparkline struct {
	// Title is the accessible name ("checks per hour, last 24 hours");
	// Desc, empty, summarises the values.
	Title, Desc string
	ID          string
	// Width and Height default to 100 × 20.
	Width, Height int
	// Values are drawn left to right; NaN and infinite ones are skipped.
	Values []float64
	// Labels, if given, name the values in the table (hours, days).
	Labels []string
	// Fill fills the area under the line.
	Fill bool
	Tone Tone
}

// WriteSVG writes the sparkline as an <svg> element; it returns only w's
// error.
func (c Sparkline) WriteSVG(w io.Writer) error { return writeSVG(w, c) }

// SVG returns the sparkline as an <svg> element for html/template.
func (c Sparkline) SVG() template.HTML { return svgHTML(c) }

func (c Sparkline) render(standalone bool) []byte {
	width, height := size(c.Width, 100, 8), size(c.Height, 20, 6)
	seed := []any{"sparkline", c.Title, c.Width, c.Height, len(c.Values)}
	if n := len(c.Values); n > 0 {
		seed = append(seed, c.Values[0], c.Values[n/2], c.Values[n-1])
	}
	id := chartID(c.ID, seed...)
	var s svg
	s.open("sparkline", id, width, height, c.Title, c.description(), standalone)
	// Padding of the dot's radius, so that it stays inside.
	const pad = 2.5
	var xs, ys []float64
	lo, hi := 0.0, 0.0
	for _, v := range c.Values {
		if usable(v) {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if lo == hi {
		hi = lo + 1
	}
	x := linear{0, float64(max(len(c.Values)-1, 1)), pad, width - pad}
	if len(c.Values) == 1 {
		x = linear{-1, 1, pad, width - pad}
	}
	y := linear{lo, hi, height - pad, pad}
	for i, v := range c.Values {
		if usable(v) {
			xs, ys = append(xs, x.at(float64(i))), append(ys, y.at(v))
		}
	}
	if len(xs) > 0 {
		idx := downsample(xs, ys, width-2*pad)
		var line pathBuilder
		for n, i := range idx {
			if n == 0 {
				line.cmd('M', xs[i], ys[i])
			} else {
				line.cmd('L', xs[i], ys[i])
			}
		}
		if c.Fill && len(idx) > 1 {
			base := y.at(max(lo, min(hi, 0)))
			area := pathBuilder{b: append([]byte(nil), line.b...)}
			area.cmd('L', xs[idx[len(idx)-1]], base)
			area.cmd('L', xs[idx[0]], base)
			area.cmd('Z')
			s.raw("<path")
			s.seriesAttrs(0, c.Tone, "chart-area")
			s.raw(` d="`)
			s.raw(string(area.b))
			s.raw(`" fill="currentColor" fill-opacity="0.25"/>` + "\n")
		}
		if len(idx) > 1 {
			s.raw("<path")
			s.seriesAttrs(0, c.Tone, "chart-line")
			s.raw(` d="`)
			s.raw(string(line.b))
			s.raw(`" fill="none" stroke="currentColor" stroke-width="1.2" stroke-linejoin="round"/>` + "\n")
		}
		var dot pathBuilder
		dot.cmd('M', xs[len(xs)-1], ys[len(ys)-1])
		dot.cmd('h', 0)
		s.raw("<path")
		s.seriesAttrs(0, c.Tone, "chart-dots")
		s.raw(` d="`)
		s.raw(string(dot.b))
		s.raw(`" stroke="currentColor" stroke-width="4" stroke-linecap="round"/>` + "\n")
	} else {
		var base pathBuilder
		base.cmd('M', pad, height-pad)
		base.cmd('H', width-pad)
		s.raw(`<path class="chart-empty" d="`)
		s.raw(string(base.b))
		s.raw(`" stroke="currentColor" stroke-opacity="0.3" stroke-dasharray="2 2"/>` + "\n")
	}
	s.close()
	return s.b
}

func (c Sparkline) description() string {
	if c.Desc != "" {
		return c.Desc
	}
	var first, last, lo, hi float64
	n := 0
	for _, v := range c.Values {
		if !usable(v) {
			continue
		}
		if n == 0 {
			first, lo, hi = v, v, v
		}
		last, lo, hi = v, min(lo, v), max(hi, v)
		n++
	}
	if n == 0 {
		return "No data."
	}
	return fmt.Sprintf("%d values from %s to %s; lowest %s, highest %s.", n,
		formatValue(first), formatValue(last), formatValue(lo), formatValue(hi))
}

// Table returns a row per value, named by its label or its position.
func (c Sparkline) Table() Table {
	t := Table{Caption: c.Title, Header: []string{"#", "value"}}
	if len(c.Labels) > 0 {
		t.Header[0] = ""
	}
	for i, v := range c.Values {
		name := strconv.Itoa(i + 1)
		if i < len(c.Labels) {
			name = c.Labels[i]
		}
		cell := ""
		if usable(v) {
			cell = formatValue(v)
		}
		t.Rows = append(t.Rows, []string{name, cell})
	}
	return t
}
