package plans

import (
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/testenv"
)

func TestMatchResource(t *testing.T) {
	cases := []struct {
		pattern, resource string
		want              bool
	}{
		{"*", "GET /anything", true},
		{"*", "*", true},
		{"POST /v1/search", "POST /v1/search", true},
		{"POST /v1/search", "GET /v1/search", false},
		{"POST /v1/search", "POST /v1/search/x", false},
		{"* /v1/search", "GET /v1/search", true},
		{"GET /repos/*", "GET /repos/a/b", true},
		{"GET /repos/*", "GET /repo", false},
		{"GET /repos/*", "*", false},
	}
	for _, c := range cases {
		if got := MatchResource(c.pattern, c.resource); got != c.want {
			t.Errorf("MatchResource(%q, %q) = %v, want %v", c.pattern, c.resource, got, c.want)
		}
	}
}

func TestPlanValidateNamesFields(t *testing.T) {
	upTo := int64(10)
	p := Plan{
		Name: "Bad Name", Currency: "usd", BaseFeeMinor: -1,
		Tiers: []PriceTier{{UnitMinor: 1}, {UpTo: &upTo, UnitMinor: -2}},
		Rules: []Rule{
			{Name: "hourly", Algorithm: "magic", Limit: 10, PeriodUS: limiter.HourUS},
			{Name: "hourly", Algorithm: limiter.GCRA, Limit: 10, PeriodUS: 0, Resource: "search"},
			{Name: "q", Algorithm: limiter.FixedWindow, Limit: 10, PeriodUS: limiter.DayUS, Scope: "planet",
				Options: Options{Calendar: "week"}},
		},
	}
	err := p.Validate()
	if tollgate.ErrorCode(err) != tollgate.EINVALID {
		t.Fatalf("Validate = %v, want an invalid error", err)
	}
	for _, field := range []string{"name", "currency", "base_fee_minor", "tiers[0].up_to", "tiers[1].unit_minor",
		"rules[0].algorithm", "rules[1].name", "rules[1].period_us", "rules[1].resource", "rules[2].scope",
		"rules[2].options.calendar"} {
		if _, ok := testenv.Fields(err)[field]; !ok {
			t.Errorf("no problem reported for %s (got %v)", field, testenv.Fields(err))
		}
	}
}

func TestDemoPlansAreValid(t *testing.T) {
	for _, p := range DemoPlans() {
		if err := p.WithDefaults().Validate(); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
}

// TestValidateChangesNothing: validating a plan from a request leaves it
// as it was; WithDefaults returns the filled copy.
func TestValidateChangesNothing(t *testing.T) {
	p := Plan{Name: "p", Rules: []Rule{{Name: "daily", Algorithm: limiter.FixedWindow, Limit: 5, Options: Options{Calendar: "day"}}}}
	_ = p.Validate()
	if p.Currency != "" || p.QuotaMode != "" || p.Rules[0].Burst != 0 || p.Rules[0].PeriodUS != 0 {
		t.Errorf("Validate changed the plan: %+v", p)
	}
	d := p.WithDefaults()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if d.Currency != "USD" || d.QuotaMode != QuotaNone || d.Rules[0].Burst != 5 || d.Rules[0].PeriodUS != limiter.DayUS || p.Rules[0].Burst != 0 {
		t.Errorf("WithDefaults: %+v (original %+v)", d, p)
	}
}

// TestValidateConcurrencyAndRefundOn: a concurrency rule takes a lease
// TTL of at most an hour as its period; refund_on lists distinct known
// outcomes.
func TestValidateConcurrencyAndRefundOn(t *testing.T) {
	rule := func(r Rule) map[string]string {
		f := map[string]string{}
		r.WithDefaults().Validate("", f)
		return f
	}
	if f := rule(Rule{Name: "inflight", Algorithm: limiter.Concurrency, Limit: 4, PeriodUS: 30 * limiter.SecondUS}); len(f) != 0 {
		t.Errorf("a valid concurrency rule: %v", f)
	}
	if f := rule(Rule{Name: "inflight", Algorithm: limiter.Concurrency, Limit: 4, PeriodUS: 2 * limiter.HourUS}); f["period_us"] == "" {
		t.Errorf("a lease TTL of 2 h: %v, want period_us named", f)
	}
	if f := rule(Rule{Name: "inflight", Algorithm: limiter.Concurrency, PeriodUS: limiter.SecondUS}); f["limit"] == "" {
		t.Errorf("no limit: %v, want limit named", f)
	}
	for _, refund := range [][]string{{"4xx"}, {"5xx", "5xx"}} {
		if f := rule(Rule{Name: "t", Limit: 1, PeriodUS: limiter.SecondUS, Options: Options{RefundOn: refund}}); f["options.refund_on"] == "" {
			t.Errorf("refund_on %v: %v, want options.refund_on named", refund, f)
		}
	}
	if f := rule(Rule{Name: "t", Limit: 1, PeriodUS: limiter.SecondUS, Options: Options{RefundOn: []string{"timeout", "5xx"}}}); len(f) != 0 {
		t.Errorf("refund_on timeout, 5xx: %v", f)
	}
}
