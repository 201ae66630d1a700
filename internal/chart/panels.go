package chart

import (
	"cmp"
	"html/template"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Panels is a figure of plots one under another, each with a visible
// heading (its Title), sharing one width, one left edge and the legend of
// the first plot: the same trace through several limiters.
type Panels struct {
	// Title is shown as the figure's heading and is its accessible name.
	// Note, if set, is a line of small print under the legend. Desc,
	// empty, is made of the panels' summaries.
	Title, Note, Desc string
	ID                string
	// Width defaults to 640. The height is the sum of the plots' heights
	// (each defaulting to 160) and of the heading, legend and note.
	Width int
	Plots []Plot
}

// WriteSVG writes the figure as an <svg> element; it returns only w's
// error.
func (c Panels) WriteSVG(w io.Writer) error { return writeSVG(w, c) }

// SVG returns the figure as an <svg> element for html/template.
func (c Panels) SVG() template.HTML { return svgHTML(c) }

func (c Panels) render(standalone bool) []byte {
	width := size(c.Width, defaultWidth, 60)
	seed := []any{"panels", c.Title, c.Width}
	for _, p := range c.Plots {
		seed = append(seed, p.id())
	}
	id := chartID(c.ID, seed...)

	// The panels' layouts in their own coordinates, for the widest left
	// margin, so that the panels line up.
	data := make([]*plotData, len(c.Plots))
	heights := make([]float64, len(c.Plots))
	opts := make([]plotOpts, len(c.Plots))
	left := 0.0
	for i, p := range c.Plots {
		data[i] = p.prepare()
		heights[i] = size(p.Height, 160, 40)
		opts[i] = plotOpts{heading: p.Title}
		left = max(left, p.layout(data[i], width, heights[i], opts[i]).left)
	}

	// The heading, the legend and the note above the panels.
	y := 0.0
	if c.Title != "" {
		y = 24
	}
	var legend []legendRow
	if len(c.Plots) > 0 {
		legend = layoutLegend(c.Plots[0].legendEntries(), left, y+14, width-4)
		y += 16 * float64(len(legend))
	}
	noteY := y + 12
	if c.Note != "" {
		y += 16
	}
	y += 4
	height := y + 4
	for _, h := range heights {
		height += h
	}

	var s svg
	s.open("panels", id, width, height, c.Title, c.description(data), standalone)
	if c.Title != "" {
		s.headingAt(left, 18, "14", "chart-title", fit(c.Title, (width-left)/1.3))
	}
	drawLegend(&s, legend)
	if c.Note != "" {
		s.textAt(left, noteY, "", "chart-note", fit(c.Note, width-left))
	}
	for i, p := range c.Plots {
		opts[i].left = left
		l := p.layout(data[i], width, heights[i], opts[i])
		s.raw(`<g class="chart-panel" transform="translate(0 `)
		s.num(y)
		s.raw(`)">` + "\n")
		p.draw(&s, id+"-"+strconv.Itoa(i), data[i], l, opts[i])
		s.raw("</g>\n")
		y += heights[i]
	}
	s.close()
	return s.b
}

func (c Panels) description(data []*plotData) string {
	if c.Desc != "" {
		return c.Desc
	}
	var b strings.Builder
	b.WriteString(strconv.Itoa(len(c.Plots)) + " panels.")
	if c.Note != "" {
		b.WriteString(" " + strings.TrimRight(c.Note, ".") + ".")
	}
	for i, p := range c.Plots {
		b.WriteString(" " + p.Title + ": " + p.description(data[i]))
	}
	return b.String()
}

// Table returns one table of all panels: a row per distinct x, a column per
// series of each panel, headed "panel: series".
func (c Panels) Table() Table {
	t := Table{Caption: c.Title, Header: []string{"x"}}
	type row struct {
		x     float64
		label string
	}
	var rows []row
	var tables []Table
	for i, p := range c.Plots {
		pt := p.Table()
		tables = append(tables, pt)
		if i == 0 {
			t.Header[0] = pt.Header[0]
		}
		for _, h := range pt.Header[1:] {
			t.Header = append(t.Header, p.Title+": "+h)
		}
		// The plot's rows are its distinct x values, in order.
		for r, x := range p.prepare().xs() {
			rows = append(rows, row{x, pt.Rows[r][0]})
		}
	}
	slices.SortStableFunc(rows, func(a, b row) int { return cmp.Compare(a.x, b.x) })
	index := map[string]int{} // row of each x as written
	for _, r := range rows {
		if _, ok := index[r.label]; !ok {
			index[r.label] = len(t.Rows)
			cells := make([]string, len(t.Header))
			cells[0] = r.label
			t.Rows = append(t.Rows, cells)
		}
	}
	col := 1
	for _, pt := range tables {
		for _, r := range pt.Rows {
			copy(t.Rows[index[r[0]]][col:], r[1:])
		}
		col += len(pt.Header) - 1
	}
	return t
}
