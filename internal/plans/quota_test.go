package plans

import (
	"testing"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/testenv"
)

func TestQuotaModeValidation(t *testing.T) {
	for _, c := range []struct {
		name  string
		plan  Plan
		field string // "" = valid
	}{
		{"none by default", Plan{Name: "p"}, ""},
		{"hard", Plan{Name: "p", IncludedUnits: 10, QuotaMode: QuotaHard}, ""},
		{"overage", Plan{Name: "p", IncludedUnits: 10, QuotaMode: QuotaOverage}, ""},
		{"unknown mode", Plan{Name: "p", QuotaMode: "soft"}, "quota_mode"},
		{"hard without units", Plan{Name: "p", QuotaMode: QuotaHard}, "included_units"},
		{"reserved rule name", Plan{Name: "p", Rules: []Rule{{Name: QuotaRuleName, Limit: 1, PeriodUS: 1}}}, "rules[0].name"},
	} {
		err := c.plan.WithDefaults().Validate()
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.field != "" && testenv.Fields(err)[c.field] == "":
			t.Errorf("%s: err %v, want a problem with %s", c.name, err, c.field)
		}
	}
}

func TestQuotaRule(t *testing.T) {
	if _, ok := (Plan{IncludedUnits: 5}).QuotaRule(); ok {
		t.Error("a plan without quota mode has a quota rule")
	}
	r, ok := Plan{IncludedUnits: 5, QuotaMode: QuotaHard}.QuotaRule()
	if !ok || r.Limit != 5 || r.Mode != ModeEnforce || r.Scope != ScopeTenant || r.Options.Calendar != "month" {
		t.Errorf("hard quota rule %+v", r)
	}
	f := map[string]string{}
	r.Validate("", f)
	if len(f) != 0 {
		t.Errorf("the quota rule is invalid: %v", f)
	}
	if r, _ := (Plan{IncludedUnits: 5, QuotaMode: QuotaOverage}).QuotaRule(); r.Mode != ModeShadow {
		t.Errorf("overage quota rule mode %s, want shadow", r.Mode)
	}
}

// TestQuotaPastTwoTo53IsRefused: the monthly quota is a fixed window on
// included_units, which the Redis scripts hold exactly up to 2^53.
func TestQuotaPastTwoTo53IsRefused(t *testing.T) {
	for units, bad := range map[int64]bool{limiter.MaxUnits: false, limiter.MaxUnits + 1: true} {
		err := Plan{Name: "p", IncludedUnits: units, QuotaMode: QuotaHard}.WithDefaults().Validate()
		if got := testenv.Fields(err)["included_units"] != ""; got != bad {
			t.Errorf("included_units %d: %v, want refused %v", units, err, bad)
		}
	}
}
