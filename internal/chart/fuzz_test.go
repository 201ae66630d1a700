package chart

import (
	"bytes"
	"encoding/binary"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"testing"
)

// fuzzValues decodes raw as float64 bits when its length is odd (NaNs,
// infinities, subnormals, 1e308) and as small int16 counts otherwise.
func fuzzValues(raw []byte) []float64 {
	var vs []float64
	if len(raw)%2 == 1 {
		for ; len(raw) >= 8; raw = raw[8:] {
			vs = append(vs, math.Float64frombits(binary.LittleEndian.Uint64(raw)))
		}
		return vs
	}
	for ; len(raw) >= 2; raw = raw[2:] {
		vs = append(vs, float64(int16(binary.LittleEndian.Uint16(raw))))
	}
	return vs
}

func FuzzChartsAreWellFormed(f *testing.F) {
	f.Add("Checks per minute", "calls", []byte{1, 0, 5, 0, 2, 0, 9, 0, 3, 0, 0, 0}, 640, 240, uint8(0))
	f.Add("<script>", "a&b", []byte{0, 0, 0, 0, 0, 0, 0, 0}, 0, 0, uint8(0xff))
	f.Add("\x00\xff", "\uFFFE", []byte{0, 0, 0, 0, 0, 0, 0xf8, 0x7f, 1}, 1, 1, uint8(7))
	f.Add("", "", []byte{}, -5, 1_000_000, uint8(9))
	f.Fuzz(func(t *testing.T, text, label string, raw []byte, width, height int, flags uint8) {
		vs := fuzzValues(raw)
		value := func(i int) float64 {
			if len(vs) == 0 {
				return 0
			}
			return vs[i%len(vs)]
		}
		var pts []Point
		for i := 0; i+1 < len(vs); i += 2 {
			pts = append(pts, Point{vs[i], vs[i+1]})
		}
		kind := Kind(flags % 3) // 2 is not a kind
		axis := Axis{Label: label, Time: flags&8 != 0}
		if flags&16 != 0 {
			axis.Min, axis.Max = value(0), value(1)
		}
		plot := Plot{Title: text, Desc: text[:len(text)/2], Width: width, Height: height, X: axis, Y: Axis{Label: label, Min: value(2), Max: value(3)},
			Stacked: flags&32 != 0,
			Series: []Series{
				{Name: text, Kind: kind, Tone: Tone(flags % 5), Points: pts},
				{Name: label, Kind: StepArea, Points: pts[len(pts)/2:]},
				{Points: pts[:len(pts)/2]},
			},
			Rules: []Rule{{Value: value(4), Label: label}},
		}
		var categories []string
		for i := range len(vs) / 2 {
			categories = append(categories, text[:i%(len(text)+1)])
		}
		charts := []Chart{
			plot,
			Bars{Title: text, Width: width, Height: height, Categories: categories, XLabel: label,
				Y:      Axis{Label: label, Min: value(0), Max: value(1)},
				Series: []BarSeries{{Name: text, Values: vs}, {Name: label, Values: vs[len(vs)/3:]}}, Rules: []Rule{{Value: value(5)}}},
			Sparkline{Title: text, Width: width, Height: height, Values: vs, Labels: categories, Fill: flags&1 != 0},
			Progress{Title: text, Width: width, Height: height, Unit: label, Used: value(0), Included: value(1), Projected: value(2)},
			Panels{Title: text, Note: label, Width: width, Plots: []Plot{plot, {Title: label, Height: height, Series: plot.Series[1:]}}},
		}
		for _, c := range charts {
			checkSVG(t, c.render(false), false)
			checkSVG(t, c.render(true), true)
			table := []byte(c.Table().HTML())
			dec := xml.NewDecoder(bytes.NewReader(table))
			for {
				_, err := dec.Token()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("table: %v\n%s", err, table)
				}
			}
		}
	})
}
