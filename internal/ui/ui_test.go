package ui

import (
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
)

// TestSimulate runs rule previews: what the burst gets is the rule's
// capacity, and what follows its rate.
func TestSimulate(t *testing.T) {
	for _, tc := range []struct {
		name               string
		rule               plans.Rule
		atOnce             int64
		minTotal, maxTotal int64
		delays             bool
	}{
		{"gcra", plans.Rule{Name: "r", Limit: 10, PeriodUS: limiter.SecondUS, Burst: 10}, 10, 28, 31, false},
		{"gcra small burst", plans.Rule{Name: "r", Limit: 10, PeriodUS: limiter.SecondUS, Burst: 2}, 2, 20, 23, false},
		{"token bucket", plans.Rule{Name: "r", Algorithm: limiter.TokenBucket, Limit: 10, PeriodUS: limiter.SecondUS, Burst: 20}, 20, 38, 41, false},
		{"fixed window", plans.Rule{Name: "r", Algorithm: limiter.FixedWindow, Limit: 10, PeriodUS: limiter.SecondUS}, 10, 20, 20, false},
		{"shaping leaky bucket", plans.Rule{Name: "r", Algorithm: limiter.LeakyBucket, Limit: 10, PeriodUS: limiter.SecondUS,
			Burst: 5, Options: plans.Options{LeakyMode: "shape"}}, 5, 20, 26, true},
		// Requests that stay in flight for their whole lease: 4 at once,
		// and 4 more once the leases expire, a period later.
		{"concurrency", plans.Rule{Name: "r", Algorithm: limiter.Concurrency, Limit: 4, PeriodUS: 30 * limiter.SecondUS}, 4, 8, 12, false},
		{"calendar month", plans.Rule{Name: "r", Algorithm: limiter.FixedWindow, Limit: 1000,
			Options: plans.Options{Calendar: "month"}}, 1000, 2000, 3000, false}, // 62 days: January, February, and March begun
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := simulate(tc.rule)
			if len(p.Ticks) != previewTicks || p.Burst <= p.AdmittedAtOnce {
				t.Fatalf("preview %+v", p)
			}
			if p.AdmittedAtOnce != tc.atOnce || p.Admitted < tc.minTotal || p.Admitted > tc.maxTotal {
				t.Errorf("admitted %d at once and %d in all, want %d and %d–%d", p.AdmittedAtOnce, p.Admitted, tc.atOnce, tc.minTotal, tc.maxTotal)
			}
			if (p.MaxDelayUS > 0) != tc.delays {
				t.Errorf("longest delay %d µs", p.MaxDelayUS)
			}
		})
	}
}

// TestSafeNext keeps only clean local paths: what a browser could read
// as another host (after dropping tabs and newlines, or turning
// backslashes into slashes) is "/".
func TestSafeNext(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/tenants?q=a", "/tenants?q=a"},
		{"/tenants/1/keys#new", "/tenants/1/keys#new"},
		{"/tenants?q=a%20b", "/tenants?q=a%20b"},
		{"", "/"},
		{"tenants", "/"},
		{"//evil.example", "/"},
		{"///evil.example", "/"},
		{"https://evil.example", "/"},
		{"javascript:alert(1)", "/"},
		{"/\\evil.example", "/"},
		{"\\\\evil.example", "/"},
		{"/\t/evil.example", "/"},
		{"/\n/evil.example", "/"},
		{"/\r/evil.example", "/"},
		{"/\x00/evil.example", "/"},
		{"/ /evil.example", "/"},
		{"/\u00a0/evil.example", "/"},
		{"/%09/evil.example", "/"},
		{"/%2F/evil.example", "/"},
		{"/%5Cevil.example", "/"},
		{"/x\r\nSet-Cookie: a", "/"},
		{"/api/v1/me", "/"},
		{"/%61pi/v1/me", "/"},
		{"/%zz", "/"},
	} {
		if got := safeNext(tc.in); got != tc.want {
			t.Errorf("safeNext(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestFormFields puts a plan's field errors on the form's fields: a
// rule's period_us and options beside their fields, a tier on its row,
// which may differ where blank rows were left out.
func TestFormFields(t *testing.T) {
	got := formFields(map[string]string{"rules[2].period_us": "p", "rules[3].options.calendar": "c", "name": "n",
		"tiers[0].up_to": "u"}, []int{1})
	want := map[string]string{"rules[2].period": "p", "rules[3].calendar": "c", "name": "n", "tiers[1].up_to": "u"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestReadRulesRows: the rules a form makes are its rows shown again, in
// order, where rows were removed or left blank, so that rules[k] of a
// field error is row k; a number that is not one is named by that row.
func TestReadRulesRows(t *testing.T) {
	form := url.Values{"rule_count": {"4"},
		"rules[0].name": {"gone"}, "rules[0].limit": {"1"}, "rules[0].remove": {"yes"},
		"rules[2].name": {"hourly"}, "rules[2].limit": {"10"}, "rules[2].period": {"1"}, "rules[2].period_unit": {"h"},
		"rules[3].name": {"daily"}, "rules[3].limit": {"ten"}, "rules[3].period": {"1"}, "rules[3].period_unit": {"day"}}
	fe := formErrors{}
	rows, rules := readRules(form, fe)
	if len(rows) != 2 || len(rules) != 2 || rules[0].Name != "hourly" || rules[1].Name != "daily" ||
		rules[0].PeriodUS != limiter.HourUS {
		t.Fatalf("rows %+v, rules %+v", rows, rules)
	}
	if want := (formErrors{"rules[1].limit": "must be a whole number"}); !reflect.DeepEqual(fe, want) {
		t.Errorf("form errors %v, want %v", fe, want)
	}
}

func TestKeyBadges(t *testing.T) {
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	for _, tc := range []struct {
		key    tenants.Key
		active *usage.KeyActivity
		want   []string
		live   bool
	}{
		{tenants.Key{}, nil, []string{"active"}, true},
		{tenants.Key{}, &usage.KeyActivity{RateLimited: true}, []string{"active", "rate-limited"}, true},
		{tenants.Key{RevokedAt: at(-time.Hour)}, nil, []string{"revoked"}, false},
		{tenants.Key{ExpiresAt: at(-time.Hour)}, nil, []string{"expired"}, false},
		{tenants.Key{ExpiresAt: at(48 * time.Hour)}, nil, []string{"expires soon"}, true},
		{tenants.Key{ExpiresAt: at(30 * 24 * time.Hour)}, nil, []string{"active"}, true},
		{tenants.Key{ExpiresAt: at(time.Hour), RotatedAt: at(-time.Hour)}, nil, []string{"rotation grace"}, true},
	} {
		badges, live := keyBadges(tc.key, tc.active, now)
		var got []string
		for _, b := range badges {
			got = append(got, b.Label)
		}
		if !reflect.DeepEqual(got, tc.want) || live != tc.live {
			t.Errorf("%+v: badges %v live %v, want %v %v", tc.key, got, live, tc.want, tc.live)
		}
	}
}

// TestFormatMoneyISO4217: amounts have the decimals ISO 4217 gives their
// currency, whichever it is: none for the CFA francs, the shilling, the
// guaraní; three for the Iraqi and Libyan dinars; four for CLF.
func TestFormatMoneyISO4217(t *testing.T) {
	for _, tc := range []struct {
		minor    int64
		currency string
		want     string
	}{
		{50_000, "UGX", "UGX 50,000"},
		{5000, "XOF", "XOF 5,000"},
		{5000, "XAF", "XAF 5,000"},
		{1200, "XPF", "XPF 1,200"},
		{5000, "PYG", "PYG 5,000"},
		{5000, "RWF", "RWF 5,000"},
		{300, "VUV", "VUV 300"},
		{4900, "JPY", "¥4,900"},
		{4900, "ISK", "ISK 4,900"},
		{1234, "IQD", "IQD 1.234"},
		{-1005, "LYD", "-LYD 1.005"},
		{12_340, "KWD", "KWD 12.340"},
		{12_345, "CLF", "CLF 1.2345"},
		{4900, "HUF", "HUF 49.00"},
		{4900, "MGA", "MGA 49.00"},
	} {
		if got := formatMoney(tc.minor, tc.currency); got != tc.want {
			t.Errorf("formatMoney(%d, %s) = %q, want %q", tc.minor, tc.currency, got, tc.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for got, want := range map[string]string{
		formatInt(1234567): "1,234,567", formatInt(-1000): "-1,000", formatInt(12): "12",
		formatMoney(4900, "USD"): "$49.00", formatMoney(5, "EUR"): "€0.05", formatMoney(1500, "JPY"): "¥1,500",
		formatMoney(123456, "CHF"): "CHF 1,234.56", formatPeriod(limiter.HourUS): "1 h", formatPeriod(2 * limiter.DayUS): "2 days",
		formatPeriod(250_000): "250 ms", formatPeriod(90 * limiter.SecondUS): "90 s",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}
