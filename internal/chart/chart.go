// Package chart draws small server-side SVG charts for the web console and
// for the documentation: time-series and XY plots of steps and step areas
// (optionally stacked), stacked bar charts, sparklines, consumption bars
// with a projection marker, and panels of plots that share a legend.
//
// Every chart is a plain struct. Its SVG method returns a template.HTML that
// html/template inserts as is; WriteSVG writes the same bytes to an
// io.Writer; Table returns the data as rows for an accessible text table
// (Table.HTML renders it). All text that reaches the output (titles, series
// names, category labels such as tenant names) is escaped, and characters
// that XML does not allow are replaced by U+FFFD, so any input gives
// well-formed SVG.
//
// Charts suit a strict Content-Security-Policy: there are no scripts and no
// style attributes. Colours come from classes (series-0, series-1, …, and
// the tones chart-good, chart-bad, chart-warning, chart-neutral) styled by
// CSS, the package's stylesheet with light and dark palettes, which the
// console serves as a file (style-src 'self'). Presentation attributes give
// the light palette as a fallback, so a chart without the stylesheet is
// still readable. Axes and text use currentColor and follow the page.
// Standalone writes a self-contained SVG file with the stylesheet and a
// background inside, for documentation.
//
// Inputs are float64: drawing needs neither exact money nor exact time.
// NaN and ±Inf values, and values beyond ±1e300, are skipped. Output is
// deterministic (coordinates are rounded to 0.1 unit), so tests can compare
// it byte for byte. Long series are reduced to the lowest and highest value
// of each pixel column before drawing, so a month of minutes stays a few
// tens of kilobytes. Charts never panic on odd input: no data, one point,
// all zeros, huge or negative values all give a readable chart.
//
// The zero value of every option is a sensible default. Charts are values
// without shared state and safe for concurrent use.
package chart

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A Chart is one of the package's charts: Plot, Bars, Sparkline, Progress
// or Panels.
type Chart interface {
	// WriteSVG writes the chart as an <svg> element for inline use in
	// HTML. It returns only w's error.
	WriteSVG(w io.Writer) error
	// SVG returns the same element as WriteSVG, ready for html/template.
	SVG() template.HTML
	// Table returns the chart's data as a table.
	Table() Table

	render(standalone bool) []byte
}

// Standalone writes c as a self-contained SVG document: the same element as
// WriteSVG with the stylesheet (CSS) and a background inside, so it reads
// well as an image file in light and dark mode. It is for files such as
// the documentation's charts, not for pages with a Content-Security-Policy
// that forbids inline styles.
func Standalone(w io.Writer, c Chart) error {
	_, err := w.Write(c.render(true))
	return err
}

func writeSVG(w io.Writer, c Chart) error {
	_, err := w.Write(c.render(false))
	return err
}

func svgHTML(c Chart) template.HTML {
	// The markup is built here from escaped text and numbers only.
	return template.HTML(c.render(false))
}

// Table is a chart's data as text, for a table beside or behind the chart.
// The first column names the row (a time, a category); the others hold one
// value each, formatted as on the chart. A missing value is "".
type Table struct {
	Caption string
	Header  []string
	Rows    [][]string
}

// HTML returns t as an HTML <table class="chart-table"> with a caption,
// column headers and row headers, every cell escaped.
func (t Table) HTML() template.HTML {
	var b bytes.Buffer
	b.WriteString(`<table class="chart-table">`)
	if t.Caption != "" {
		b.WriteString("<caption>")
		b.WriteString(escape(t.Caption))
		b.WriteString("</caption>")
	}
	if len(t.Header) > 0 {
		b.WriteString("<thead><tr>")
		for _, h := range t.Header {
			b.WriteString(`<th scope="col">`)
			b.WriteString(escape(h))
			b.WriteString("</th>")
		}
		b.WriteString("</tr></thead>")
	}
	b.WriteString("<tbody>")
	for _, row := range t.Rows {
		b.WriteString("<tr>")
		for i, cell := range row {
			if i == 0 {
				b.WriteString(`<th scope="row">`)
				b.WriteString(escape(cell))
				b.WriteString("</th>")
				continue
			}
			b.WriteString("<td>")
			b.WriteString(escape(cell))
			b.WriteString("</td>")
		}
		b.WriteString("</tr>")
	}
	b.WriteString("</tbody></table>")
	return template.HTML(b.String())
}

// Tone is a colour with a meaning, for a series whose colour should not
// depend on its position: allowed checks good, rejected ones bad.
type Tone int

// Tones. Palette, the zero value, colours a series by its position.
const (
	Palette Tone = iota
	Good
	Warning
	Bad
	Neutral
)

// class returns the tone's CSS class, "" for Palette.
func (t Tone) class() string {
	switch t {
	case Good:
		return "chart-good"
	case Warning:
		return "chart-warning"
	case Bad:
		return "chart-bad"
	case Neutral:
		return "chart-neutral"
	}
	return ""
}

// Rule is a horizontal reference line across a plot or bar chart, such as
// a limit. A rule with a Label appears in the legend.
type Rule struct {
	Value float64
	Label string
}

// Axis describes one axis of a plot.
type Axis struct {
	// Label names the quantity and its unit ("checks per minute",
	// "time (s)"). A y label is written above the axis, an x label below.
	// An empty label on a time axis reads "time (UTC)" and the date or
	// dates when the range is shorter than two days.
	Label string
	// Time makes an x axis a time axis: values are Unix seconds (see At)
	// and ticks fall on whole UTC seconds, minutes, hours, days or months.
	Time bool
	// Min and Max fix the axis range when Min < Max: values beyond it are
	// cut off (on the y axis, marked where they are). Otherwise the range
	// fits the data, and a y range always includes zero.
	Min, Max float64
	// Format, if set, formats tick labels, table values and the numbers
	// in descriptions (on a time axis it is given Unix seconds; ticks stay
	// on whole UTC units). Otherwise ticks use 1, 2 or 5 × 10ⁿ steps,
	// whole numbers when all data are whole, with k, M, G, T for large
	// values, and tables use "12,345" or a UTC "2006-01-02 15:04:05".
	Format func(v float64) string
}

// formatter returns the format of the axis's values in tables and
// descriptions: Format, or for time a UTC date and time, or formatValue.
func (a Axis) formatter() func(float64) string {
	switch {
	case a.Format != nil:
		return a.Format
	case a.Time:
		return formatTime
	}
	return formatValue
}

func (a Axis) fixed() bool { return a.Min < a.Max && usable(a.Min) && usable(a.Max) }

// usable reports whether v is a value to draw: finite and within ±1e300,
// so that differences of two values stay finite.
// NaN fails the comparison.
func usable(v float64) bool { return math.Abs(v) <= 1e300 }

// Default sizes, in SVG user units (CSS pixels).
const (
	defaultWidth  = 640
	defaultHeight = 240
	maxSize       = 10000
)

func size(v, def, least int) float64 {
	switch {
	case v <= 0:
		return float64(def)
	case v < least:
		return float64(least)
	case v > maxSize:
		return maxSize
	}
	return float64(v)
}

// chartID returns id made safe for an XML id and an url(#…) reference, or,
// when id is empty, one derived from seed: the chart's text, size and a
// sample of its data, so that different charts on one page get different
// ids.
func chartID(id string, seed ...any) string {
	if id == "" {
		h := fnv.New64a()
		for _, s := range seed {
			fmt.Fprintf(h, "%v\x00", s)
		}
		return "chart-" + strconv.FormatUint(h.Sum64(), 36)
	}
	var b strings.Builder
	for _, r := range id {
		if r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if c := s[0]; c == '-' || c >= '0' && c <= '9' {
		s = "c" + s
	}
	return s
}

// escape returns s safe for XML and HTML text and quoted attributes:
// markup characters become references, tabs and line breaks spaces, and
// characters XML forbids (other control characters, U+FFFE, U+FFFF)
// U+FFFD, as does invalid UTF-8, which range already decodes to U+FFFD.
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '&':
			b.WriteString("&amp;")
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '"':
			b.WriteString("&#34;")
		case r == '\'':
			b.WriteString("&#39;")
		case r == '\t' || r == '\n' || r == '\r':
			b.WriteByte(' ')
		case r < 0x20 || r == 0xFFFE || r == 0xFFFF:
			b.WriteRune(utf8.RuneError)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// clip returns s shortened to at most n runes, ending in "…" when cut.
func clip(s string, n int) string {
	if n < 1 {
		return ""
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for range n - 1 {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i] + "…"
}

// Text metrics, estimated rather than measured: charWidth is a generous
// width of a character of 11-unit sans-serif, to keep labels apart;
// textCharWidth an average one, to shorten running text only where it
// would surely not fit.
const (
	charWidth     = 6.2
	textCharWidth = 5.6
)

func textWidth(s string) float64 { return float64(utf8.RuneCountInString(s)) * charWidth }

// fit returns text shortened, if need be, to fit width.
func fit(text string, width float64) string { return clip(text, int(width/textCharWidth)) }

// svg builds a chart's markup.
type svg struct {
	b []byte
}

func (s *svg) raw(text string) { s.b = append(s.b, text...) }

// text appends t escaped.
func (s *svg) text(t string) { s.b = append(s.b, escape(t)...) }

// num appends v rounded to 0.1.
func (s *svg) num(v float64) { s.b = appendNum(s.b, v) }

// attr appends ` name="value"` with value escaped.
func (s *svg) attr(name, value string) {
	s.b = append(s.b, ' ')
	s.b = append(s.b, name...)
	s.b = append(s.b, `="`...)
	s.b = append(s.b, escape(value)...)
	s.b = append(s.b, '"')
}

// numAttr appends ` name="v"` with v rounded to 0.1.
func (s *svg) numAttr(name string, v float64) {
	s.b = append(s.b, ' ')
	s.b = append(s.b, name...)
	s.b = append(s.b, `="`...)
	s.b = appendNum(s.b, v)
	s.b = append(s.b, '"')
}

// maxCoord bounds coordinates, so that a value far outside the axis range
// gives a long line rather than a number of hundreds of digits.
const maxCoord = 1e6

// appendNum appends v rounded to 0.1 in the shortest form ("12", "12.5").
func appendNum(b []byte, v float64) []byte {
	if math.IsNaN(v) {
		v = 0
	}
	v = max(-maxCoord, min(maxCoord, v))
	v = math.Round(v*10) / 10
	if v == 0 {
		v = 0 // no "-0"
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

func f(v float64) string { return string(appendNum(nil, v)) }

// open writes the root <svg> element, <title> and <desc>; close ends it.
func (s *svg) open(kind, id string, width, height float64, title, desc string, standalone bool) {
	s.raw(`<svg xmlns="http://www.w3.org/2000/svg" class="chart chart-`)
	s.raw(kind)
	if standalone {
		s.raw(" chart-standalone")
	}
	s.raw(`"`)
	s.numAttr("width", width)
	s.numAttr("height", height)
	s.raw(` viewBox="0 0 `)
	s.num(width)
	s.raw(" ")
	s.num(height)
	s.raw(`" role="img"`)
	s.attr("aria-labelledby", id+"-title")
	s.attr("aria-describedby", id+"-desc")
	s.raw(` font-family="sans-serif" font-size="11" fill="currentColor">` + "\n")
	s.raw(`<title`)
	s.attr("id", id+"-title")
	s.raw(">")
	s.text(title)
	s.raw("</title>\n<desc")
	s.attr("id", id+"-desc")
	s.raw(">")
	s.text(desc)
	s.raw("</desc>\n")
	if standalone {
		s.raw("<style>")
		s.raw(CSS)
		s.raw("</style>\n")
		s.raw(`<rect class="chart-bg"`)
		s.numAttr("width", width)
		s.numAttr("height", height)
		s.raw(` fill="#fff"/>` + "\n")
	}
}

func (s *svg) close() { s.raw("</svg>\n") }

// textAt writes a <text> element; anchor is "start", "middle", "end" or
// "" to inherit it.
func (s *svg) textAt(x, y float64, anchor, class, t string) {
	s.openText(x, y, anchor, class)
	s.raw(">")
	s.text(t)
	s.raw("</text>\n")
}

// headingAt writes a bold <text> element.
func (s *svg) headingAt(x, y float64, size, class, t string) {
	s.openText(x, y, "", class)
	if size != "" {
		s.attr("font-size", size)
	}
	s.raw(` font-weight="bold">`)
	s.text(t)
	s.raw("</text>\n")
}

func (s *svg) openText(x, y float64, anchor, class string) {
	s.raw("<text")
	s.numAttr("x", x)
	s.numAttr("y", y)
	if anchor != "" {
		s.attr("text-anchor", anchor)
	}
	if class != "" {
		s.attr("class", class)
	}
}

// seriesAttrs writes the class and fallback colour of series i.
func (s *svg) seriesAttrs(i int, tone Tone, extra string) {
	class := "series series-" + strconv.Itoa(i%len(palette))
	if c := tone.class(); c != "" {
		class += " " + c
	}
	if extra != "" {
		class += " " + extra
	}
	s.attr("class", class)
	s.attr("color", fallbackColour(i, tone))
}

// pathBuilder writes the d attribute of a path compactly.
type pathBuilder struct{ b []byte }

func (p *pathBuilder) cmd(c byte, vs ...float64) {
	p.b = append(p.b, c)
	for i, v := range vs {
		if i > 0 {
			p.b = append(p.b, ' ')
		}
		p.b = appendNum(p.b, v)
	}
}

func (p *pathBuilder) empty() bool { return len(p.b) == 0 }
