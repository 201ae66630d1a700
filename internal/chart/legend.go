package chart

// swatch is the legend's picture of a series.
type swatch int

const (
	swatchBox  swatch = iota // step areas and bars
	swatchLine               // steps
	swatchRule               // a dashed reference line
)

type legendEntry struct {
	swatch swatch
	index  int // the series' position, for its colour
	tone   Tone
	label  string
}

type legendItem struct {
	legendEntry
	x float64
}

// legendRow is one line of the legend; y is the text's baseline.
type legendRow struct {
	y     float64
	items []legendItem
}

// legendLabelRunes bounds a legend label; the table has it in full.
const legendLabelRunes = 40

// layoutLegend places entries in rows from x0, wrapping before maxX. Rows
// are 16 units apart, the first one's baseline at y0.
func layoutLegend(entries []legendEntry, x0, y0, maxX float64) []legendRow {
	var rows []legendRow
	x := x0
	for _, e := range entries {
		e.label = clip(e.label, legendLabelRunes)
		w := 18 + textWidth(e.label)
		if len(rows) == 0 || x > x0 && x+w > maxX {
			rows = append(rows, legendRow{y: y0 + 16*float64(len(rows))})
			x = x0
		}
		row := &rows[len(rows)-1]
		row.items = append(row.items, legendItem{e, x})
		x += w + 14
	}
	return rows
}

func drawLegend(s *svg, rows []legendRow) {
	if len(rows) == 0 {
		return
	}
	s.raw(`<g class="chart-legend">` + "\n")
	for _, row := range rows {
		mid := row.y - 4
		for _, it := range row.items {
			var stroke pathBuilder // of a step or a rule
			stroke.cmd('M', it.x, mid)
			stroke.cmd('h', 12)
			switch it.swatch {
			case swatchBox:
				s.raw("<rect")
				s.seriesAttrs(it.index, it.tone, "")
				s.numAttr("x", it.x)
				s.numAttr("y", mid-5)
				s.raw(` width="12" height="10" fill="currentColor"/>`)
			case swatchLine:
				s.raw("<path")
				s.seriesAttrs(it.index, it.tone, "")
				s.raw(` d="` + string(stroke.b) + `" stroke="currentColor" stroke-width="2"/>`)
			case swatchRule:
				s.raw(`<path class="chart-rule" d="` + string(stroke.b) + `" stroke="currentColor" stroke-dasharray="4 3"/>`)
			}
			s.textAt(it.x+18, row.y, "", "", it.label)
		}
	}
	s.raw("</g>\n")
}
