package chart

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestNiceStep(t *testing.T) {
	tests := []struct {
		raw     float64
		integer bool
		want    float64
	}{
		{1, false, 1},
		{1.2, false, 2},
		{2, false, 2},
		{2.1, false, 5},
		{7, false, 10},
		{0.3 / 3, false, 0.1},
		{0.013, false, 0.02},
		{0.013, true, 1},
		{0.6, true, 1},
		{3e11, false, 5e11},
		{0, false, 1},
		{-4, false, 1},
		{math.NaN(), false, 1},
		{math.Inf(1), false, 1},
		{1e-320, false, 1e-320}, // below what powers of ten resolve: raw
	}
	for _, tt := range tests {
		if got := niceStep(tt.raw, tt.integer); got != tt.want && !(tt.raw < 1e-300 && got > 0) {
			t.Errorf("niceStep(%g, %v) = %g, want %g", tt.raw, tt.integer, got, tt.want)
		}
	}
}

func TestNiceTicks(t *testing.T) {
	tests := []struct {
		name           string
		lo, hi         float64
		count          int
		integer        bool
		extend         bool
		want           []float64
		wantLo, wantHi float64
	}{
		{"counts", 0, 87, 5, true, true, []float64{0, 20, 40, 60, 80, 100}, 0, 100},
		{"small counts stay whole", 0, 3, 5, true, true, []float64{0, 1, 2, 3}, 0, 3},
		{"all zeros", 0, 0, 5, true, true, []float64{0, 1}, 0, 1},
		{"fractions", 0, 0.3, 3, false, true, []float64{0, 0.1, 0.2, 0.3}, 0, 0.3},
		{"negative", -37, 12, 5, true, true, []float64{-40, -30, -20, -10, 0, 10, 20}, -40, 20},
		{"huge", 0, 1e12, 5, true, true, []float64{0, 2e11, 4e11, 6e11, 8e11, 1e12}, 0, 1e12},
		{"inside a fixed range", 0, 15, 3, true, false, []float64{0, 5, 10, 15}, 0, 15},
		{"fixed range, ends not on steps", 0.5, 60, 10, false, false, []float64{10, 20, 30, 40, 50, 60}, 0.5, 60},
		{"x of a trace", 0, 60, 9, false, false, []float64{0, 10, 20, 30, 40, 50, 60}, 0, 60},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, lo, hi := niceTicks(tt.lo, tt.hi, tt.count, tt.integer, tt.extend)
			if !slices.EqualFunc(got, tt.want, close) || !close(lo, tt.wantLo) || !close(hi, tt.wantHi) {
				t.Errorf("got %v in [%g, %g], want %v in [%g, %g]", got, lo, hi, tt.want, tt.wantLo, tt.wantHi)
			}
			for _, v := range got {
				if tt.integer && v != math.Trunc(v) {
					t.Errorf("tick %g of integer data is not whole", v)
				}
				if math.Signbit(v) && v == 0 {
					t.Errorf("tick -0")
				}
			}
		})
	}
}

// TestNiceTicksBeyondPrecision: where floats cannot tell the steps apart,
// ticks still increase, stay in range and are few.
func TestNiceTicksBeyondPrecision(t *testing.T) {
	for _, r := range [][2]float64{{1e17, 1e17 + 40}, {1e15, 1e15 + 0.5}, {-1e300, 1e300}, {5e-324, 1e-323}} {
		for _, extend := range []bool{false, true} {
			got, _, lo, hi := niceTicks(r[0], r[1], 6, false, extend)
			if len(got) == 0 || len(got) > maxTicks+1 || !slices.IsSorted(got) {
				t.Errorf("%v (extend %v): ticks %v", r, extend, got)
			}
			if got[0] < lo || got[len(got)-1] > hi {
				t.Errorf("%v (extend %v): ticks %v outside [%g, %g]", r, extend, got, lo, hi)
			}
		}
	}
}

func close(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }

func TestTickFormatter(t *testing.T) {
	tests := []struct {
		step, top float64
		values    []float64
		want      []string
	}{
		{1, 5, []float64{0, 1, 5}, []string{"0", "1", "5"}},
		{2000, 8000, []float64{0, 2000, -4000}, []string{"0", "2,000", "-4,000"}},
		{5000, 20000, []float64{5000, 20000}, []string{"5k", "20k"}},
		{500000, 2e6, []float64{0, 5e5, 1e6, 1.5e6}, []string{"0", "0.5M", "1.0M", "1.5M"}},
		{2e11, 1e12, []float64{2e11, 1e12}, []string{"0.2T", "1.0T"}},
		{0.05, 0.3, []float64{0, 0.05, 0.3}, []string{"0", "0.05", "0.30"}},
		{0.1, 1, []float64{-0.1 + 0.1, 0.30000000000000004}, []string{"0", "0.3"}},
		{1e16, 1e17, []float64{5e16}, []string{"50,000T"}},
	}
	for _, tt := range tests {
		format := tickFormatter(tt.step, tt.top)
		for i, v := range tt.values {
			if got := format(v); got != tt.want[i] {
				t.Errorf("step %g, top %g: format(%g) = %q, want %q", tt.step, tt.top, v, got, tt.want[i])
			}
		}
	}
}

func TestFormatValue(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{
		{0, "0"},
		{-0.0, "0"},
		{1234567, "1,234,567"},
		{-1000, "-1,000"},
		{2.5, "2.5"},
		{0.30000000000000004, "0.3"},
		{1e12, "1,000,000,000,000"},
		{1e20, "1e+20"},
	}
	for _, tt := range tests {
		if got := formatValue(tt.v); got != tt.want {
			t.Errorf("formatValue(%g) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

func TestTimeTicks(t *testing.T) {
	at := func(s string) float64 {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return float64(tm.Unix())
	}
	labels := func(ticks []tick) []string {
		var out []string
		for _, tk := range ticks {
			out = append(out, tk.label)
		}
		return out
	}
	tests := []struct {
		name     string
		from, to string
		count    int
		want     []string
	}{
		{"an hour in minutes", "2026-03-01T10:07:00Z", "2026-03-01T11:07:00Z", 6,
			[]string{"10:10", "10:20", "10:30", "10:40", "10:50", "11:00"}},
		{"a day, midnight as the date", "2026-03-01T00:00:00Z", "2026-03-02T00:00:00Z", 4,
			[]string{"Mar 1", "06:00", "12:00", "18:00", "Mar 2"}},
		{"a minute in seconds", "2026-03-01T10:00:00Z", "2026-03-01T10:01:00Z", 4,
			[]string{"10:00:00", "10:00:15", "10:00:30", "10:00:45", "10:01:00"}},
		{"a month in weeks, from Mondays", "2026-03-01T00:00:00Z", "2026-03-31T00:00:00Z", 5,
			[]string{"Mar 2", "Mar 9", "Mar 16", "Mar 23", "Mar 30"}},
		{"a year in quarters", "2026-01-15T00:00:00Z", "2027-01-15T00:00:00Z", 5,
			[]string{"Apr 2026", "Jul 2026", "Oct 2026", "Jan 2027"}},
		{"decades in years", "2000-06-01T00:00:00Z", "2030-06-01T00:00:00Z", 4,
			[]string{"2010", "2020", "2030"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := labels(timeTicks(at(tt.from), at(tt.to), tt.count, 1000))
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	if got := timeTicks(5, 5, 4, 100); got != nil {
		t.Errorf("empty range: got %v, want no ticks", got)
	}
}

func TestDownsampleKeepsExtremes(t *testing.T) {
	const n, width = 43200, 600.0
	xs, ys := make([]float64, n), make([]float64, n)
	for i := range n {
		xs[i] = float64(i) / n * width
		ys[i] = 100 + 50*math.Sin(float64(i)/300)
	}
	ys[12345], ys[30000] = -1000, 1000 // one spike up, one down (screen y)
	idx := downsample(xs, ys, width)
	if len(idx) > 2*int(width)+2 {
		t.Errorf("kept %d points, want at most %d", len(idx), 2*int(width)+2)
	}
	if !slices.IsSorted(idx) {
		t.Errorf("indices out of order")
	}
	for _, want := range []int{12345, 30000} {
		if !slices.Contains(idx, want) {
			t.Errorf("spike at %d dropped", want)
		}
	}
	if short := downsample(xs[:100], ys[:100], width); len(short) != 100 {
		t.Errorf("short series: kept %d of 100 points", len(short))
	}
}
