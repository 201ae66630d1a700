package chart

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// linear maps the domain [d0, d1] onto the range [r0, r1].
type linear struct{ d0, d1, r0, r1 float64 }

func (s linear) at(v float64) float64 {
	if s.d1 == s.d0 {
		return (s.r0 + s.r1) / 2
	}
	return s.r0 + (v-s.d0)/(s.d1-s.d0)*(s.r1-s.r0)
}

// tick is one labelled position on an axis.
type tick struct {
	value float64
	label string
}

// niceStep returns the smallest step of 1, 2 or 5 × 10ⁿ that is at least
// raw; at least 1 when integer is set.
func niceStep(raw float64, integer bool) float64 {
	if !(raw > 0) || math.IsInf(raw, 0) {
		return 1
	}
	exp := math.Floor(math.Log10(raw))
	base := math.Pow(10, exp)
	step := 10 * base
	for _, m := range []float64{1, 2, 5} {
		// The tolerance keeps raw = 0.3/3 from rounding up to 0.2.
		if raw <= m*base*(1+1e-9) {
			step = m * base
			break
		}
	}
	if step == 0 || math.IsInf(step, 0) {
		step = raw
	}
	if integer && step < 1 {
		step = 1
	}
	return step
}

// maxTicks bounds the ticks of one axis, whatever the range.
const maxTicks = 50

// niceTicks returns the ticks for the range [lo, hi] with about count
// ticks. If extend is set, lo and hi are widened to whole steps and
// returned; otherwise the ticks are the multiples of the step within them.
func niceTicks(lo, hi float64, count int, integer, extend bool) (ticks []float64, step, newLo, newHi float64) {
	if !(hi > lo) {
		hi = lo + 1
	}
	count = max(count, 1)
	step = niceStep((hi-lo)/float64(count), integer)
	// The tolerance keeps 0.3/0.1 = 2.9999999999999996 a whole step.
	first, last := math.Ceil(lo/step-1e-9), math.Floor(hi/step+1e-9)
	if extend {
		first, last = math.Floor(lo/step), math.Ceil(hi/step)
		// Rounding of tiny steps can leave a range without ticks.
		if !(first*step <= lo) {
			first--
		}
		if !(last*step >= hi) {
			last++
		}
		newLo, newHi = first*step+0, last*step+0
	} else {
		newLo, newHi = lo, hi
	}
	if n := last - first; !(n >= 0 && n <= maxTicks) {
		// A step the range cannot resolve (1e15 + 0.1 …): the ends only.
		return []float64{newLo, newHi}, newHi - newLo, newLo, newHi
	}
	for i := range int(last-first) + 1 {
		v := (first+float64(i))*step + 0 // +0: no -0 from ceil(-0.1)
		// Rounding may put the ends a hair outside the range.
		if v < newLo || v > newHi {
			if tol := step * 1e-6; v < newLo-tol || v > newHi+tol {
				continue
			}
			v = max(newLo, min(newHi, v))
		}
		if len(ticks) == 0 || v > ticks[len(ticks)-1] {
			ticks = append(ticks, v)
		}
	}
	if len(ticks) == 0 {
		return []float64{newLo, newHi}, newHi - newLo, newLo, newHi
	}
	return ticks, step, newLo, newHi
}

// tickFormatter returns a formatter for ticks step apart on an axis whose
// largest absolute value is top: whole numbers grouped by thousands below
// 10 000, above that k, M, G or T with as many decimals as the step needs.
func tickFormatter(step, top float64) func(float64) string {
	scale, suffix := 1.0, ""
	switch top = math.Abs(top); {
	case top >= 1e12:
		scale, suffix = 1e12, "T"
	case top >= 1e9:
		scale, suffix = 1e9, "G"
	case top >= 1e6:
		scale, suffix = 1e6, "M"
	case top >= 1e4:
		scale, suffix = 1e3, "k"
	}
	decimals := 0
	if s := step / scale; s > 0 && s < 1 {
		decimals = min(int(math.Ceil(-math.Log10(s)-1e-9)), 12)
	}
	return func(v float64) string {
		if v == 0 {
			return "0"
		}
		v /= scale
		if decimals == 0 {
			if math.Abs(v) < 1e15 {
				return groupInt(int64(math.Round(v))) + suffix
			}
			return strconv.FormatFloat(v, 'g', 6, 64) + suffix
		}
		s := strconv.FormatFloat(v, 'f', decimals, 64)
		if strings.Trim(s, "-0.") == "" {
			s = strings.TrimPrefix(s, "-")
		}
		return s + suffix
	}
}

// groupInt formats n with commas between groups of three digits.
func groupInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// formatValue formats a data value for a label or a table: whole numbers
// grouped by thousands ("12,345"), others with six significant digits.
func formatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return groupInt(int64(v))
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// Time axes. Values are Unix seconds.

// At returns the point (t, y) for a plot with a time x axis.
func At(t time.Time, y float64) Point {
	return Point{X: float64(t.UnixMicro()) / 1e6, Y: y}
}

// unixTime is the inverse of At's x.
func unixTime(x float64) time.Time {
	return time.UnixMicro(int64(math.Round(x * 1e6))).UTC()
}

const (
	minute = 60
	hour   = 60 * minute
	day    = 24 * hour
	week   = 7 * day
	month  = 30 * day // nominal, to choose a step; ticks use the calendar
)

// timeSteps are the steps of a time axis in seconds; months are steps of
// month × n, placed on the calendar.
var timeSteps = []float64{
	1, 2, 5, 10, 15, 30,
	minute, 2 * minute, 5 * minute, 10 * minute, 15 * minute, 30 * minute,
	hour, 2 * hour, 3 * hour, 6 * hour, 12 * hour,
	day, 2 * day, week,
	month, 2 * month, 3 * month, 6 * month, 12 * month,
}

// timeTicks returns ticks on whole UTC units between lo and hi (Unix
// seconds) at most count of them, or fewer when labels would overlap in
// width units.
func timeTicks(lo, hi float64, count int, width float64) []tick {
	if !(hi > lo) {
		return nil
	}
	count = max(count, 1)
	span := hi - lo
	for _, step := range timeSteps {
		if span/step > float64(count) {
			continue
		}
		ticks := timeTicksStep(lo, hi, step)
		if fits(ticks, width, span, lo) {
			return ticks
		}
	}
	// Spans of many years: whole years, as numbers.
	loYear, hiYear := unixTime(lo).Year(), unixTime(hi).Year()
	vals, _, _, _ := niceTicks(float64(loYear), float64(hiYear), count, true, false)
	var ticks []tick
	for _, y := range vals {
		if y < -9999 || y > 9999 {
			continue
		}
		x := float64(time.Date(int(y), 1, 1, 0, 0, 0, 0, time.UTC).Unix())
		if x >= lo && x <= hi {
			ticks = append(ticks, tick{x, strconv.Itoa(int(y))})
		}
	}
	return ticks
}

// fits reports whether the labels of ticks leave room between each other.
func fits(ticks []tick, width, span, lo float64) bool {
	for i := 1; i < len(ticks); i++ {
		gap := (ticks[i].value - ticks[i-1].value) / span * width
		if gap < (textWidth(ticks[i].label)+textWidth(ticks[i-1].label))/2+8 {
			return false
		}
	}
	return true
}

func timeTicksStep(lo, hi, step float64) []tick {
	var ticks []tick
	if step >= month {
		months := int(math.Round(step / month))
		t := unixTime(lo)
		m := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		if m.Before(t) {
			m = m.AddDate(0, 1, 0)
		}
		for ; len(ticks) <= maxTicks; m = m.AddDate(0, 1, 0) {
			x := float64(m.Unix())
			if x > hi {
				break
			}
			if (m.Year()*12+int(m.Month())-1)%months != 0 {
				continue
			}
			label := m.Format("Jan 2006")
			if months >= 12 {
				label = m.Format("2006")
			}
			ticks = append(ticks, tick{x, label})
		}
		return ticks
	}
	// Weeks start on Monday: the epoch was a Thursday.
	offset := 0.0
	if step == week {
		offset = 4 * day
	}
	first := math.Ceil((lo-offset)/step)*step + offset
	for i := 0; i <= maxTicks; i++ {
		x := first + float64(i)*step
		if x > hi {
			break
		}
		t := unixTime(x)
		var label string
		switch {
		case step < minute:
			label = t.Format("15:04:05")
		case step < day && (t.Hour() != 0 || t.Minute() != 0):
			label = t.Format("15:04")
		default:
			label = t.Format("Jan 2")
		}
		ticks = append(ticks, tick{x, label})
	}
	return ticks
}

// timeAxisLabel is the default label of a time axis from lo to hi: the
// date as well when ticks show only times of day.
func timeAxisLabel(lo, hi float64) string {
	a, b := unixTime(lo), unixTime(hi)
	if hi-lo < 2*day {
		if a.Format(time.DateOnly) == b.Format(time.DateOnly) {
			return "time (UTC), " + a.Format(time.DateOnly)
		}
		return "time (UTC), " + a.Format(time.DateOnly) + " to " + b.Format(time.DateOnly)
	}
	return "time (UTC)"
}

// formatTime formats a time for a table or a description.
func formatTime(x float64) string {
	return unixTime(x).Format("2006-01-02 15:04:05.999")
}
