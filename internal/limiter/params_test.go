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
