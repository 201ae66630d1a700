package chart

import (
	"html/template"
	"io"
	"math"
	"strings"
)

// Progress is a horizontal consumption bar: units used against the units
// a plan includes, with a marker where the usage is projected to end (the
// month's end). Usage beyond the included units is drawn in the bad tone,
// and a line across the bar marks the included amount. A line of text
// under the bar gives the figures.
type Progress struct {
	// Title is the accessible name ("API calls this month"); Desc, empty,
	// is the line of text.
	Title, Desc string
	ID          string
	// Width and Height default to 360 × 36.
	Width, Height int
	// Used, Included and Projected are in Unit. Negative, NaN and infinite
	// values count as zero; Included 0 means nothing is included (pay as
	// you go) and Projected 0 means no projection.
	Used, Included, Projected float64
	// Unit names the units ("calls").
	Unit string
	// Format, if set, formats the figures.
	Format func(v float64) string
}

// WriteSVG writes the bar as an <svg> element; it returns only w's error.
func (c Progress) WriteSVG(w io.Writer) error { return writeSVG(w, c) }

// SVG returns the bar as an <svg> element for html/template.
func (c Progress) SVG() template.HTML { return svgHTML(c) }

func nonNegative(v float64) float64 {
	if !usable(v) || v < 0 {
		return 0
	}
	return v
}

func (c Progress) values() (used, included, projected float64) {
	return nonNegative(c.Used), nonNegative(c.Included), nonNegative(c.Projected)
}

func (c Progress) format(v float64) string {
	if c.Format != nil {
		return c.Format(v)
	}
	return formatValue(v)
}

// text is the line of figures under the bar: "7,200 of 10,000 calls (72%),
// projected 12,500 (2,500 over)".
func (c Progress) text() string {
	used, included, projected := c.values()
	unit := ""
	if c.Unit != "" {
		unit = " " + c.Unit
	}
	var b strings.Builder
	b.WriteString(c.format(used))
	if included > 0 {
		b.WriteString(" of " + c.format(included) + unit + " (" + formatValue(math.Round(100*used/included)) + "%)")
	} else {
		b.WriteString(unit)
	}
	if projected > 0 {
		b.WriteString(", projected " + c.format(projected))
		if included > 0 && projected > included {
			b.WriteString(" (" + c.format(projected-included) + " over)")
		}
	}
	return b.String()
}

func (c Progress) render(standalone bool) []byte {
	width, height := size(c.Width, 360, 20), size(c.Height, 36, 12)
	id := chartID(c.ID, "progress", c.Title, c.Unit, c.Width, c.Height, c.Used, c.Included, c.Projected)
	desc := c.Desc
	if desc == "" {
		desc = c.text() + "."
	}
	var s svg
	s.open("progress", id, width, height, c.Title, desc, standalone)
	used, included, projected := c.values()
	full := max(included, max(used, projected))
	if full == 0 {
		full = 1
	}
	// The bar leaves room on both sides for the projection's marker.
	const barY, barH, pad = 4.0, 12.0, 4.0
	x := linear{0, full, pad, width - pad}
	s.raw(`<rect class="chart-track"`)
	s.numAttr("x", pad)
	s.numAttr("y", barY)
	s.numAttr("width", width-2*pad)
	s.numAttr("height", barH)
	s.raw(` fill="currentColor" fill-opacity="0.12"/>` + "\n")
	within := used
	if included > 0 {
		within = min(used, included)
	}
	if within > 0 {
		s.raw("<rect")
		s.seriesAttrs(0, Palette, "chart-used")
		s.numAttr("x", pad)
		s.numAttr("y", barY)
		s.numAttr("width", x.at(within)-pad)
		s.numAttr("height", barH)
		s.raw(` fill="currentColor"/>` + "\n")
	}
	if included > 0 && used > included {
		s.raw("<rect")
		s.seriesAttrs(0, Bad, "chart-over")
		s.numAttr("x", x.at(included))
		s.numAttr("y", barY)
		s.numAttr("width", x.at(used)-x.at(included))
		s.numAttr("height", barH)
		s.raw(` fill="currentColor"/>` + "\n")
	}
	if included > 0 && included < full {
		var d pathBuilder
		d.cmd('M', x.at(included), barY-3)
		d.cmd('v', barH+6)
		s.raw(`<path class="chart-limit" d="`)
		s.raw(string(d.b))
		s.raw(`" stroke="currentColor" stroke-width="1.5"><title>`)
		s.text("included: " + c.format(included))
		s.raw("</title></path>\n")
	}
	if projected > 0 {
		px := x.at(projected)
		var d pathBuilder
		d.cmd('M', px, barY-2)
		d.cmd('v', barH+4)
		d.cmd('M', px-3.5, barY-3.5)
		d.cmd('h', 7)
		d.cmd('l', -3.5, 4)
		d.cmd('Z')
		tone := Neutral
		if included > 0 && projected > included {
			tone = Warning
		}
		s.raw("<path")
		s.seriesAttrs(0, tone, "chart-projected")
		s.raw(` d="`)
		s.raw(string(d.b))
		s.raw(`" stroke="currentColor" stroke-width="1.5" fill="currentColor"><title>`)
		s.text("projected: " + c.format(projected))
		s.raw("</title></path>\n")
	}
	if height >= barY+barH+14 {
		s.textAt(pad, barY+barH+14, "", "chart-figures", fit(c.text(), width-pad))
	}
	s.close()
	return s.b
}

// Table returns the figures: included, used and projected, each with its
// share of the included units.
func (c Progress) Table() Table {
	used, included, projected := c.values()
	t := Table{Caption: c.Title, Header: []string{"", c.Unit, "of included"}}
	if c.Unit == "" {
		t.Header[1] = "units"
	}
	share := func(v float64) string {
		if included == 0 {
			return ""
		}
		return formatValue(math.Round(100*v/included)) + "%"
	}
	t.Rows = append(t.Rows, []string{"included", c.format(included), ""})
	t.Rows = append(t.Rows, []string{"used", c.format(used), share(used)})
	if projected > 0 {
		t.Rows = append(t.Rows, []string{"projected", c.format(projected), share(projected)})
	}
	return t
}
