package ui

import (
	"fmt"
	"html/template"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/limiter"
)

// funcs are the templates' helpers: formatting of numbers, money, times
// and periods, all in UTC.
func (c *Console) funcs() template.FuncMap {
	return template.FuncMap{
		"num":      formatInt,
		"money":    formatMoney,
		"period":   formatPeriod,
		"pct":      formatPct,
		"datetime": formatDateTime,
		"date":     func(t time.Time) string { return t.UTC().Format("2006-01-02") },
		"ago":      func(t time.Time) string { return ago(c.now(), t) },
		"until":    func(t time.Time) string { return until(c.now(), t) },
		"deref":    derefTime,
		"derefInt": derefInt,
		"deref64": func(p *int64) int64 {
			if p == nil {
				return 0
			}
			return *p
		},
		"dict":  dict,
		"query": func(v url.Values) template.URL { return template.URL(v.Encode()) },
		"add":   func(a, b int) int { return a + b },
		"list":  func(v ...string) []string { return v },
		"has":   func(v []string, s string) bool { return slices.Contains(v, s) },
		// usesBurst: whether a rule of the algorithm (a string) has a burst.
		"usesBurst": usesBurst,
		"join":      strings.Join,
		"static":    func(name string) string { return "/static/" + name + "?v=" + c.version },
		"localdt":   func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04") },
	}
}

// formatInt writes n with thin thousands separators: 1,234,567.
func formatInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

var currencySymbol = map[string]string{"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}

// formatMoney writes an amount of minor units: "$49.00", "CHF 1,200.50",
// "UGX 50,000", with as many decimals as ISO 4217 gives the currency
// (tollgate.MinorDigits).
func formatMoney(minor int64, currency string) string {
	digits := tollgate.MinorDigits(currency)
	neg := minor < 0
	if neg {
		minor = -minor
	}
	scale := int64(math.Pow10(digits))
	s := formatInt(minor / scale)
	if digits > 0 {
		s += fmt.Sprintf(".%0*d", digits, minor%scale)
	}
	if sym, ok := currencySymbol[currency]; ok {
		s = sym + s
	} else if currency != "" {
		s = currency + " " + s
	}
	if neg {
		s = "-" + s
	}
	return s
}

// formatPeriod writes a period of µs in its largest whole unit: "1 h",
// "10 s", "250 ms".
func formatPeriod(us int64) string {
	units := []struct {
		us   int64
		name string
	}{{limiter.DayUS, "day"}, {limiter.HourUS, "h"}, {limiter.MinuteUS, "min"}, {limiter.SecondUS, "s"}, {1000, "ms"}, {1, "µs"}}
	for _, u := range units {
		if us >= u.us && us%u.us == 0 {
			n := us / u.us
			if u.name == "day" && n != 1 {
				return fmt.Sprintf("%d days", n)
			}
			return fmt.Sprintf("%d %s", n, u.name)
		}
	}
	return fmt.Sprintf("%d µs", us)
}

func formatPct(f float64) string {
	switch {
	case f == 0:
		return "0%"
	case f < 0.001:
		return "<0.1%"
	}
	return strconv.FormatFloat(f*100, 'f', 1, 64) + "%"
}

func formatDateTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// ago writes how long before now t was: "just now", "5 min ago", "3 days ago".
func ago(now, t time.Time) string {
	d := now.Sub(t)
	if d < 0 {
		return "in " + span(-d)
	}
	if d < time.Minute {
		return "just now"
	}
	return span(d) + " ago"
}

// until writes how long after now t is: "in 3 h", or "… ago" when past.
func until(now, t time.Time) string {
	d := t.Sub(now)
	if d < 0 {
		return span(-d) + " ago"
	}
	return "in " + span(d)
}

func span(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h", int(d/time.Hour))
	default:
		return fmt.Sprintf("%d days", int(d/(24*time.Hour)))
	}
}

// dict builds a map from key, value pairs, for partials that take more
// than one value.
func dict(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, fmt.Errorf("dict: odd number of arguments")
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			return nil, fmt.Errorf("dict: key %v is not a string", kv[i])
		}
		m[k] = kv[i+1]
	}
	return m, nil
}

// derefInt is *n, or 0 for nil.
func derefInt(n *int64) int64 {
	if n == nil {
		return 0
	}
	return *n
}
