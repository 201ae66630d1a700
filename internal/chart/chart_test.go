package chart

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var (
	nan  = math.NaN()
	inf  = math.Inf(1)
	day0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
)

// minutes returns n points a minute apart from day0 with values f(i).
func minutes(n int, f func(i int) float64) []Point {
	pts := make([]Point, n)
	for i := range pts {
		pts[i] = At(day0.Add(time.Duration(i)*time.Minute), f(i))
	}
	return pts
}

// examples are charts of every kind, ordinary and odd.
func examples() map[string]Chart {
	allowed := minutes(60, func(i int) float64 { return float64(100 + i*i%37) })
	rejected := minutes(60, func(i int) float64 { return float64(max(0, i%20-14)) })
	return map[string]Chart{
		"plot time series": Plot{Title: "Checks per minute", X: Axis{Time: true}, Y: Axis{Label: "checks per minute"},
			Series: []Series{{Name: "allowed", Tone: Good, Points: allowed}, {Name: "rejected", Kind: StepArea, Tone: Bad, Points: rejected}},
			Rules:  []Rule{{Value: 130, Label: "limit"}}},
		"plot stacked steps": Plot{Title: "Stacked", X: Axis{Time: true}, Stacked: true,
			Series: []Series{{Name: "allowed", Kind: StepArea, Points: allowed}, {Name: "rejected", Kind: StepArea, Points: rejected}}},
		"plot stacked step areas, other x": Plot{Title: "Stacked", Stacked: true,
			Series: []Series{{Name: "a", Kind: StepArea, Points: []Point{{0, 1}, {1, 2}}}, {Name: "b", Kind: StepArea, Points: []Point{{0.5, 1}, {2, 2}}}}},
		"plot step and step area": Plot{Title: "Burst", X: Axis{Label: "time (s)"},
			Series: []Series{{Name: "admitted", Kind: StepArea, Points: []Point{{0, 1}, {0.1, 2}, {0.2, 3}}},
				{Name: "tokens", Kind: Step, Points: []Point{{0, 3}, {0.1, 2}, {0.2, 1}}}}},
		"plot clipped": Plot{Title: "Clipped", Y: Axis{Max: 5}, X: Axis{Min: 1, Max: 3},
			Series: []Series{{Name: "a", Kind: StepArea, Points: []Point{{0, 9}, {1, 2}, {2, 9}, {3, 1}, {4, 9}}}, {Name: "b", Points: []Point{{1, 7}, {2, 1}}}}},
		"plot no series":         Plot{Title: "Nothing"},
		"plot no points":         Plot{Title: "Nothing", X: Axis{Time: true}, Series: []Series{{Name: "a"}}},
		"plot only NaN and Inf":  Plot{Title: "Nothing", Series: []Series{{Name: "a", Points: []Point{{nan, 1}, {1, nan}, {inf, 2}, {3, -inf}, {1e301, 1}}}}},
		"plot one point":         Plot{Title: "One", Series: []Series{{Name: "a", Points: []Point{{5, 3}}}}},
		"plot one time point":    Plot{Title: "One", X: Axis{Time: true}, Series: []Series{{Name: "a", Kind: StepArea, Points: []Point{At(day0, 3)}}}},
		"plot all zeros":         Plot{Title: "Zeros", Series: []Series{{Name: "a", Points: []Point{{0, 0}, {1, 0}, {2, 0}}}}},
		"plot huge":              Plot{Title: "Huge", Series: []Series{{Name: "a", Points: []Point{{0, 1e12}, {1, 3e12}, {2, 2e12}}}}},
		"plot negative":          Plot{Title: "Negative", Series: []Series{{Name: "a", Kind: StepArea, Points: []Point{{0, -5}, {1, 3}, {2, -2.5}}}}},
		"plot unsorted":          Plot{Title: "Unsorted", Series: []Series{{Name: "a", Points: []Point{{3, 1}, {1, 2}, {2, 3}}}}},
		"plot far times":         Plot{Title: "Far", X: Axis{Time: true}, Series: []Series{{Name: "a", Points: []Point{{-1e15, 1}, {1e15, 2}}}}},
		"plot tiny":              Plot{Title: "Tiny", Width: 1, Height: 1, Series: []Series{{Name: "a", Points: []Point{{0, 1}, {1, 2}}}}},
		"plot inverted range":    Plot{Title: "Inverted", X: Axis{Min: 5, Max: 1}, Y: Axis{Min: 3, Max: 3}, Series: []Series{{Points: []Point{{0, 1}, {1, 2}}}}},
		"plot rule only":         Plot{Title: "Rule", Rules: []Rule{{Value: 10, Label: "limit"}, {Value: nan}}},
		"plot unknown kind":      Plot{Title: "Kind", Series: []Series{{Kind: Kind(99), Points: []Point{{0, 1}, {1, 2}}}}},
		"bars per key":           Bars{Title: "Usage per key", Categories: []string{"alpha", "beta", "gamma"}, Y: Axis{Label: "calls"}, Series: []BarSeries{{Name: "March", Values: []float64{10, 20, 30}}, {Name: "April", Values: []float64{15, -5, 25}}}, Rules: []Rule{{Value: 25, Label: "quota"}}},
		"bars millions":          Bars{Title: "Monthly", Categories: []string{"Jan", "Feb", "Mar"}, Series: []BarSeries{{Name: "checks", Values: []float64{1e6, 2e6, 3e6}}, {Name: "overage", Tone: Bad, Values: []float64{0, 5e5, -1e5}}}},
		"bars no categories":     Bars{Title: "Bare", Series: []BarSeries{{Values: []float64{1, 2, 3}}}},
		"bars empty":             Bars{Title: "Empty"},
		"bars NaN and missing":   Bars{Title: "Gaps", Categories: []string{"a", "b", "c"}, Series: []BarSeries{{Name: "x", Values: []float64{nan, inf}}}},
		"bars clipped":           Bars{Title: "Clipped", Y: Axis{Max: 10}, Categories: []string{"a", "b"}, Series: []BarSeries{{Values: []float64{5, 50}}}},
		"bars many categories":   Bars{Title: "Many", Categories: slices.Repeat([]string{"a rather long category name"}, 300), Series: []BarSeries{{Values: slices.Repeat([]float64{1, 2, 3}, 100)}}},
		"bars all zeros":         Bars{Title: "Zeros", Categories: []string{"a"}, Series: []BarSeries{{Values: []float64{0}}}},
		"sparkline":              Sparkline{Title: "Checks per hour", Values: []float64{3, 5, 2, 8, 6}, Fill: true},
		"sparkline empty":        Sparkline{Title: "Nothing"},
		"sparkline one":          Sparkline{Title: "One", Values: []float64{4}},
		"sparkline NaN":          Sparkline{Title: "NaN", Values: []float64{nan, 1, inf, 2, nan}},
		"sparkline zeros":        Sparkline{Title: "Zeros", Values: []float64{0, 0, 0}, Fill: true},
		"sparkline negative":     Sparkline{Title: "Negative", Values: []float64{-3, 2, -1}, Fill: true},
		"progress":               Progress{Title: "Calls this month", Used: 7200, Included: 10000, Projected: 12500, Unit: "calls"},
		"progress over":          Progress{Title: "Over", Used: 12000, Included: 10000, Projected: 15000, Unit: "calls"},
		"progress nothing":       Progress{Title: "Nothing"},
		"progress pay as you go": Progress{Title: "PAYG", Used: 300, Projected: 900},
		"progress odd":           Progress{Title: "Odd", Used: -5, Included: nan, Projected: inf},
		"progress huge":          Progress{Title: "Huge", Used: 1e12, Included: 5e11, Projected: 2e12},
		"panels": Panels{Title: "A trace through two limiters", Note: "per 250 ms", Width: 480, Plots: []Plot{
			{Title: "gcra", Y: Axis{Max: 5}, Stacked: true, Series: []Series{{Name: "admitted", Kind: StepArea, Points: []Point{{0, 1}, {1, 3}}}, {Name: "rejected", Kind: StepArea, Points: []Point{{0, 0}, {1, 4}}}}, Rules: []Rule{{Value: 2, Label: "limit"}}},
			{Title: "fixed_window", Y: Axis{Max: 5}, Series: []Series{{Name: "admitted", Kind: StepArea, Points: []Point{{0, 2}, {1, 2}}}}},
		}},
		"panels empty":   Panels{},
		"panels no plot": Panels{Title: "Empty", Plots: []Plot{{}}},
	}
}

// checkSVG fails t unless out is one well-formed <svg> element that is an
// accessible image and safe under a strict Content-Security-Policy.
func checkSVG(t testing.TB, out []byte, standalone bool) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nin:\n%s", append(args, out)...)
	}
	dec := xml.NewDecoder(bytes.NewReader(out))
	dec.Strict = true
	var (
		depth, roots      int
		labelled, desc    string
		elements          = map[string]string{} // id → element name
		numeric           = regexp.MustCompile(`NaN|Inf|e[+-]`)
		numericAttributes = map[string]bool{"x": true, "y": true, "width": true, "height": true, "d": true, "viewBox": true}
	)
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fail("not well-formed: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			name := tok.Name.Local
			if depth == 0 {
				roots++
				if name != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg" {
					fail("root is %v, want an svg element", tok.Name)
				}
				attrs := map[string]string{}
				for _, a := range tok.Attr {
					attrs[a.Name.Local] = a.Value
				}
				if attrs["role"] != "img" {
					fail("root role %q, want img", attrs["role"])
				}
				labelled, desc = attrs["aria-labelledby"], attrs["aria-describedby"]
			}
			depth++
			switch name {
			case "script", "foreignObject", "image", "a":
				fail("element %s", name)
			case "style":
				if !standalone {
					fail("a <style> element in an inline chart")
				}
			}
			for _, a := range tok.Attr {
				switch n := a.Name.Local; {
				case n == "style":
					fail("style attribute on %s", name)
				case strings.HasPrefix(n, "on"), n == "href":
					fail("attribute %s on %s", n, name)
				case n == "id":
					if _, dup := elements[a.Value]; dup {
						fail("duplicate id %q", a.Value)
					}
					elements[a.Value] = name
				case numericAttributes[n] && numeric.MatchString(a.Value):
					fail("%s=%q on %s", n, a.Value, name)
				}
			}
		case xml.EndElement:
			depth--
		}
	}
	if roots != 1 {
		fail("%d root elements, want 1", roots)
	}
	if elements[labelled] != "title" || elements[desc] != "desc" {
		fail("aria-labelledby %q and aria-describedby %q name %q and %q, want a title and a desc", labelled, desc, elements[labelled], elements[desc])
	}
}

func TestChartsAreWellFormed(t *testing.T) {
	for name, c := range examples() {
		t.Run(name, func(t *testing.T) {
			var inline, standalone bytes.Buffer
			if err := c.WriteSVG(&inline); err != nil {
				t.Fatal(err)
			}
			checkSVG(t, inline.Bytes(), false)
			if string(c.SVG()) != inline.String() {
				t.Errorf("SVG and WriteSVG differ")
			}
			if err := Standalone(&standalone, c); err != nil {
				t.Fatal(err)
			}
			checkSVG(t, standalone.Bytes(), true)
			if !strings.Contains(standalone.String(), "<style>"+CSS+"</style>") {
				t.Errorf("standalone chart without the stylesheet")
			}
			// Deterministic: the same input gives the same bytes.
			if again := c.SVG(); string(again) != inline.String() {
				t.Errorf("two renderings differ")
			}
			table := c.Table()
			for i, row := range table.Rows {
				if len(row) != len(table.Header) {
					t.Errorf("table row %d has %d cells, header %d", i, len(row), len(table.Header))
				}
			}
		})
	}
}

func TestWriteSVGReturnsWriterError(t *testing.T) {
	broken := errors.New("broken pipe")
	for name, c := range examples() {
		if err := c.WriteSVG(failingWriter{broken}); !errors.Is(err, broken) {
			t.Errorf("%s: got %v, want %v", name, err, broken)
		}
		if err := Standalone(failingWriter{broken}, c); !errors.Is(err, broken) {
			t.Errorf("%s standalone: got %v, want %v", name, err, broken)
		}
	}
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

const evil = `<script>alert("x")</script> & 'q'`

func TestUserTextIsEscaped(t *testing.T) {
	evilPlot := Plot{Title: evil, Desc: evil, ID: evil, X: Axis{Label: evil}, Y: Axis{Label: evil},
		Series: []Series{{Name: evil, Points: []Point{{0, 1}, {1, 2}}}}, Rules: []Rule{{Value: 1, Label: evil}}}
	noDesc := evilPlot
	noDesc.Desc = ""
	charts := map[string]Chart{
		"plot":         evilPlot,
		"plot summary": noDesc,
		"bars": Bars{Title: evil, ID: evil, XLabel: evil, Y: Axis{Label: evil}, Categories: []string{evil, evil},
			Series: []BarSeries{{Name: evil, Values: []float64{1, 2}}}, Rules: []Rule{{Value: 1, Label: evil}}},
		"sparkline": Sparkline{Title: evil, ID: evil, Values: []float64{1, 2}, Labels: []string{evil}},
		"progress":  Progress{Title: evil, ID: evil, Unit: evil, Used: 1, Included: 2, Projected: 3},
		"panels":    Panels{Title: evil, Note: evil, ID: evil, Plots: []Plot{evilPlot, noDesc}},
	}
	for name, c := range charts {
		t.Run(name, func(t *testing.T) {
			out := string(c.SVG())
			checkSVG(t, []byte(out), false)
			table := string(c.Table().HTML())
			for what, s := range map[string]string{"svg": out, "table": table} {
				if strings.Contains(s, "<script") || strings.Contains(s, `"x"`) {
					t.Errorf("%s: unescaped text in\n%s", what, s)
				}
				if !strings.Contains(s, "&lt;script&gt;") {
					t.Errorf("%s: want the text escaped, got\n%s", what, s)
				}
			}
			if id := regexp.MustCompile(`aria-labelledby="([^"]*)"`).FindStringSubmatch(out); id == nil || !regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`).MatchString(id[1]) {
				t.Errorf("want an id of safe characters, got %q", id)
			}
		})
	}
}

func TestInvalidCharactersAreReplaced(t *testing.T) {
	odd := "a\x00b\x1bc\uFFFEd\xffe\tf\ng"
	out := Plot{Title: odd, Series: []Series{{Name: odd, Points: []Point{{0, 1}}}}}.SVG()
	checkSVG(t, []byte(out), false)
	if want := "a\uFFFDb\uFFFDc\uFFFDd\uFFFDe f g"; !strings.Contains(string(out), want) {
		t.Errorf("want %q in\n%s", want, out)
	}
}

func TestTemplateInsertsChartsAsMarkup(t *testing.T) {
	page := template.Must(template.New("page").Parse(
		`<figure>{{.Chart.SVG}}<details><summary>Data</summary>{{.Chart.Table.HTML}}</details></figure>`))
	c := Sparkline{Title: "Checks <per> hour", Values: []float64{1, 2}}
	var b strings.Builder
	if err := page.Execute(&b, struct{ Chart Sparkline }{c}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.HasPrefix(out, "<figure><svg ") || !strings.Contains(out, `<table class="chart-table"><caption>Checks &lt;per&gt; hour</caption>`) {
		t.Errorf("got\n%s", out)
	}
}

func TestIDs(t *testing.T) {
	// The same title, other data: two keys' charts on one page.
	a := Plot{Title: "Checks", Series: []Series{{Points: []Point{{0, 1}, {1, 2}}}}}.SVG()
	b := Plot{Title: "Checks", Series: []Series{{Points: []Point{{0, 1}, {1, 3}}}}}.SVG()
	idOf := regexp.MustCompile(`aria-labelledby="([^"]+)-title"`)
	ida, idb := idOf.FindStringSubmatch(string(a)), idOf.FindStringSubmatch(string(b))
	if ida == nil || idb == nil || ida[1] == idb[1] {
		t.Errorf("two charts, ids %q and %q: want two different ids", ida, idb)
	}
	for id, want := range map[string]string{"usage": "usage", "9lives": "c9lives", "-x": "c-x", "a b": "a_b"} {
		if got := chartID(id); got != want {
			t.Errorf("chartID(%q) = %q, want %q", id, got, want)
		}
	}
}

func TestIntegerDataGetWholeTicks(t *testing.T) {
	tests := []struct {
		name      string
		values    []float64
		wantWhole bool
	}{
		{"counts 0 to 3", []float64{0, 1, 3, 2}, true},
		{"one count", []float64{1}, true},
		{"all zeros", []float64{0, 0}, true},
		{"fractions", []float64{0, 0.5, 0.25}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pts []Point
			for i, v := range tt.values {
				pts = append(pts, Point{float64(i), v})
			}
			p := Plot{Series: []Series{{Points: pts}}}
			l := p.layout(p.prepare(), 640, 240, plotOpts{})
			whole := true
			for _, tk := range l.yticks {
				if tk.value != math.Trunc(tk.value) || strings.Contains(tk.label, ".") {
					whole = false
				}
			}
			if whole != tt.wantWhole {
				t.Errorf("ticks %v: whole %v, want %v", l.yticks, whole, tt.wantWhole)
			}
			if l.y.d0 > 0 || l.y.d1 <= 0 {
				t.Errorf("y range [%g, %g] does not include zero and above", l.y.d0, l.y.d1)
			}
		})
	}
}

func TestStacking(t *testing.T) {
	p := Plot{Stacked: true, Series: []Series{
		{Kind: StepArea, Points: []Point{{0, 1}, {1, 2}}},
		{Kind: Step, Points: []Point{{0, 10}, {1, 10}}}, // not stacked
		{Kind: StepArea, Points: []Point{{0, 3}, {2, 4}, {1, 5}}},
	}}
	d := p.prepare()
	if d.series[1].base != nil {
		t.Errorf("a step was stacked")
	}
	// Sorted by x: (0,3) on 1, (1,5) on 2, (2,4) on nothing.
	if got, want := d.series[2].base, []float64{1, 2, 0}; !slices.Equal(got, want) {
		t.Errorf("bases %v, want %v", got, want)
	}
	if d.yhi != 10 || d.ylo != 0 {
		t.Errorf("y extent [%g, %g], want [0, 10]", d.ylo, d.yhi)
	}
	// The last step is as long as the one before it.
	if d.series[2].end != 3 || d.xhi != 3 {
		t.Errorf("last step ends at %g, x extent to %g; want 3", d.series[2].end, d.xhi)
	}
}

// TestZeroKindIsStep: a series without a Kind is drawn as steps.
func TestZeroKindIsStep(t *testing.T) {
	pts := []Point{{0, 1}, {1, 3}, {2, 2}}
	zero := Plot{Title: "k", Series: []Series{{Name: "a", Points: pts}}}.SVG()
	step := Plot{Title: "k", Series: []Series{{Name: "a", Kind: Step, Points: pts}}}.SVG()
	if zero != step {
		t.Errorf("zero Kind:\n%s\nStep:\n%s", zero, step)
	}
	if !strings.Contains(string(zero), `d="M`) || !strings.Contains(string(zero), "(step)") {
		t.Errorf("want a step series in\n%s", zero)
	}
}

func TestClippedValuesAreMarked(t *testing.T) {
	p := Plot{Y: Axis{Max: 5}, Series: []Series{{Kind: StepArea, Points: []Point{{0, 2}, {1, 9}, {2, 9}, {3, 1}}}}}
	out := string(p.SVG())
	if !strings.Contains(out, `class="chart-clipped"`) {
		t.Fatalf("no clipped mark in\n%s", out)
	}
	p.Y.Max = 10
	if out := string(p.SVG()); strings.Contains(out, `class="chart-clipped"`) {
		t.Errorf("clipped mark though nothing is cut:\n%s", out)
	}
}

func TestEmptyChartsSayNoData(t *testing.T) {
	for name, c := range map[string]Chart{
		"plot": Plot{Title: "t"}, "bars": Bars{Title: "t"},
	} {
		if out := string(c.SVG()); !strings.Contains(out, ">No data</text>") || !strings.Contains(out, "<desc") {
			t.Errorf("%s: got\n%s", name, out)
		}
	}
}

// TestMonthOfMinutes: a month of per-minute data stays a small SVG.
func TestMonthOfMinutes(t *testing.T) {
	p := monthOfMinutes()
	out := p.SVG()
	checkSVG(t, []byte(out), false)
	if len(out) > 100_000 {
		t.Errorf("SVG of %d bytes, want at most 100 kB", len(out))
	}
	s := Sparkline{Title: "month", Values: make([]float64, 43200)}
	if out := s.SVG(); len(out) > 5_000 {
		t.Errorf("sparkline of %d bytes, want at most 5 kB", len(out))
	}
}

func monthOfMinutes() Plot {
	allowed := minutes(43200, func(i int) float64 {
		return math.Round(1000 + 600*math.Sin(float64(i)/1440*2*math.Pi) + float64(i*7919%211))
	})
	rejected := minutes(43200, func(i int) float64 { return max(0, allowed[i].Y-1500) })
	return Plot{Title: "Checks per minute, March", X: Axis{Time: true}, Y: Axis{Label: "checks per minute"},
		Series: []Series{{Name: "allowed", Kind: Step, Tone: Good, Points: allowed}, {Name: "rejected", Kind: StepArea, Tone: Bad, Points: rejected}},
		Rules:  []Rule{{Value: 1500, Label: "limit"}}}
}

func BenchmarkMonthOfMinutes(b *testing.B) {
	p := monthOfMinutes()
	var size int
	for b.Loop() {
		size = len(p.render(false))
	}
	b.ReportMetric(float64(size), "svg-bytes")
}

func TestTables(t *testing.T) {
	tests := []struct {
		name  string
		chart Chart
		want  Table
	}{
		{"plot: a row per x, blanks where a series has none", Plot{Title: "T", Y: Axis{Label: "u"},
			Series: []Series{{Name: "a", Points: []Point{{2, 1}, {1, 2.5}}}, {Points: []Point{{2, 3}, {3, nan}, {4, 1234}}}}},
			Table{Caption: "T (u)", Header: []string{"x", "a", "series 2"},
				Rows: [][]string{{"1", "2.5", ""}, {"2", "1", "3"}, {"4", "", "1,234"}}}},
		{"plot on time", Plot{Title: "T", X: Axis{Time: true}, Series: []Series{{Name: "a", Points: []Point{At(day0.Add(90*time.Second), 1)}}}},
			Table{Caption: "T", Header: []string{"time (UTC)", "a"}, Rows: [][]string{{"2026-03-01 00:01:30", "1"}}}},
		{"bars with a total", Bars{Title: "B", XLabel: "key", Categories: []string{"k1", "k2"},
			Series: []BarSeries{{Name: "a", Values: []float64{1, 2}}, {Name: "b", Values: []float64{3}}}},
			Table{Caption: "B", Header: []string{"key", "a", "b", "total"}, Rows: [][]string{{"k1", "1", "3", "4"}, {"k2", "2", "", "2"}}}},
		{"sparkline with labels", Sparkline{Title: "S", Values: []float64{1, nan}, Labels: []string{"00:00"}},
			Table{Caption: "S", Header: []string{"", "value"}, Rows: [][]string{{"00:00", "1"}, {"2", ""}}}},
		{"progress", Progress{Title: "P", Used: 7200, Included: 10000, Projected: 12500, Unit: "calls"},
			Table{Caption: "P", Header: []string{"", "calls", "of included"},
				Rows: [][]string{{"included", "10,000", ""}, {"used", "7,200", "72%"}, {"projected", "12,500", "125%"}}}},
		{"panels merge rows", Panels{Title: "F", Plots: []Plot{
			{Title: "p1", Series: []Series{{Name: "a", Points: []Point{{0, 1}, {2, 3}}}}},
			{Title: "p2", Series: []Series{{Name: "a", Points: []Point{{1, 5}, {2, 6}}}}}}},
			Table{Caption: "F", Header: []string{"x", "p1: a", "p2: a"}, Rows: [][]string{{"0", "1", ""}, {"1", "", "5"}, {"2", "3", "6"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.chart.Table()
			if got.Caption != tt.want.Caption || !slices.Equal(got.Header, tt.want.Header) || !slices.EqualFunc(got.Rows, tt.want.Rows, slices.Equal) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestTableHTML(t *testing.T) {
	got := Table{Caption: "C&C", Header: []string{"x", "<y>"}, Rows: [][]string{{"1", "2"}}}.HTML()
	want := `<table class="chart-table"><caption>C&amp;C</caption><thead><tr><th scope="col">x</th><th scope="col">&lt;y&gt;</th></tr></thead>` +
		`<tbody><tr><th scope="row">1</th><td>2</td></tr></tbody></table>`
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestProgressText(t *testing.T) {
	tests := []struct {
		p    Progress
		want string
	}{
		{Progress{Used: 7200, Included: 10000, Projected: 12500, Unit: "calls"}, "7,200 of 10,000 calls (72%), projected 12,500 (2,500 over)"},
		{Progress{Used: 300, Included: 10000, Projected: 900}, "300 of 10,000 (3%), projected 900"},
		{Progress{Used: 300, Unit: "calls"}, "300 calls"},
		{Progress{Used: -1, Included: nan}, "0"},
	}
	for _, tt := range tests {
		if got := tt.p.text(); got != tt.want {
			t.Errorf("%+v: got %q, want %q", tt.p, got, tt.want)
		}
	}
}

func TestCSS(t *testing.T) {
	if strings.ContainsAny(CSS, "<&") {
		t.Errorf("CSS has < or &, which SVG would need escaped")
	}
	// The fallback colours are the stylesheet's light ones.
	for i, c := range palette {
		if want := ".chart .series-" + string(rune('0'+i)) + " { color: " + c + "; }"; !strings.Contains(CSS, want) {
			t.Errorf("CSS lacks %q", want)
		}
	}
	for tone, c := range toneColours {
		if want := "." + tone.class() + " { color: " + c + "; }"; !strings.Contains(CSS, want) {
			t.Errorf("CSS lacks %q", want)
		}
	}
	if !strings.Contains(CSS, "@media (prefers-color-scheme: dark)") {
		t.Errorf("CSS has no dark palette")
	}
}

// TestGolden compares a few charts with files in testdata; run with
// -update after a deliberate change and review the diff.
func TestGolden(t *testing.T) {
	for _, name := range []string{"plot time series", "plot stacked steps", "bars per key", "sparkline", "progress over", "panels"} {
		t.Run(name, func(t *testing.T) {
			got := examples()[name].SVG()
			path := filepath.Join("testdata", strings.ReplaceAll(name, " ", "-")+".svg")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("%s differs from %s; if the change is meant, run go test ./internal/chart -run TestGolden -update", name, path)
			}
		})
	}
}
