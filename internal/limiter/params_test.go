package limiter_test

import (
	"testing"

	. "github.com/tollgate/tollgate/internal/limiter"
)

func TestValidateNamesBadParameters(t *testing.T) {
	cases := []struct {
		name  string
		p     Params
		field string
	}{
		{"unknown algorithm", Params{Algorithm: "magic", Limit: 1, PeriodUS: SecondUS}, "algorithm"},
		{"zero period", Params{Algorithm: GCRA, Limit: 1}, "period"},
		{"zero limit", Params{Algorithm: GCRA, PeriodUS: SecondUS}, "limit"},
		{"shape on gcra", Params{Algorithm: GCRA, Limit: 1, PeriodUS: SecondUS, Shape: true}, "mode"},
		{"calendar on gcra", Params{Algorithm: GCRA, Limit: 1, PeriodUS: SecondUS, Calendar: CalendarMonth}, "calendar"},
		{"huge sliding log", Params{Algorithm: SlidingWindowLog, Limit: MaxSlidingLogLimit + 1, PeriodUS: SecondUS}, "limit"},
		{"counter overflow", Params{Algorithm: SlidingWindowCounter, Limit: 1 << 40, PeriodUS: HourUS}, "limit"},
	}
	for _, c := range cases {
		if f := c.p.Validate(); f[c.field] == "" {
			t.Errorf("%s: problems %v do not name %s", c.name, f, c.field)
		}
	}
	ok := []Params{
		{Algorithm: SlidingWindowLog, Limit: MaxSlidingLogLimit, PeriodUS: HourUS},
		{Algorithm: TokenBucket, Limit: 0, Burst: 50, PeriodUS: HourUS},
		{Algorithm: FixedWindow, Limit: 100_000, Calendar: CalendarMonth},
	}
	for _, p := range ok {
		if f := p.Validate(); len(f) != 0 {
			t.Errorf("%+v: unexpected problems %v", p, f)
		}
	}
}

// TestValidateKeepsLimitsExactInLua: a limit or burst past 2^53, or a
// bucket's tolerance past 2^51 µs, is refused: Redis's scripts hold
// numbers as doubles, which past 2^53 decide and report other than the
// memory store (a fixed window of limit 2^63−1 answered remaining −2^63;
// 2 per 100 years with a burst of 5, a reset 1 µs short).
func TestValidateKeepsLimitsExactInLua(t *testing.T) {
	for _, p := range []Params{
		{Algorithm: FixedWindow, Limit: 1<<63 - 1, PeriodUS: SecondUS},
		{Algorithm: FixedWindow, Limit: MaxUnits + 1, Calendar: CalendarMonth},
		{Algorithm: GCRA, Limit: MaxUnits + 1, PeriodUS: 1 << 62},
		{Algorithm: TokenBucket, Limit: 0, Burst: MaxUnits + 3, PeriodUS: SecondUS},
		// A tolerance of 250 years: now + 2 × it passes 2^53.
		{Algorithm: GCRA, Limit: 2, Burst: 5, PeriodUS: 100 * 365 * DayUS},
	} {
		f := p.Validate()
		if f["limit"] == "" && f["burst"] == "" {
			t.Errorf("%+v: problems %v name neither limit nor burst", p, f)
		}
	}
	for _, p := range []Params{
		{Algorithm: FixedWindow, Limit: MaxUnits, Calendar: CalendarMonth},
		{Algorithm: TokenBucket, Limit: 0, Burst: MaxUnits, PeriodUS: SecondUS},
		{Algorithm: GCRA, Limit: 1, Burst: 1, PeriodUS: 70 * 365 * DayUS},
	} {
		if f := p.Validate(); len(f) != 0 {
			t.Errorf("%+v: unexpected problems %v", p, f)
		}
	}
}
