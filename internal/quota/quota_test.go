package quota

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
)

func TestThresholdPoints(t *testing.T) {
	ts := []Threshold{{Percent: 80}, {Percent: 100}, {Units: 500}, {Remaining: 100}, {Percent: 150}, {Remaining: 5000}}
	// 80% of 1001 is 800.8: crossed at 801. 5000 left of 1001 is never.
	if got, want := fmt.Sprint(Points(ts, 1001)), "[500 801 901 1001 1502]"; got != want {
		t.Errorf("points %s, want %s", got, want)
	}
	if got := Points(ts, 0); fmt.Sprint(got) != "[500]" {
		t.Errorf("points without included units %v, want [500]", got)
	}
}

func TestResolveSpendCap(t *testing.T) {
	upTo := int64(50)
	p := plans.Plan{IncludedUnits: 100, QuotaMode: plans.QuotaOverage,
		Tiers: []plans.PriceTier{{UpTo: &upTo, UnitMinor: 3}, {UnitMinor: 7}}}
	monthStart := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	now := monthStart.Add(24 * time.Hour)
	i64 := func(v int64) *int64 { return &v }
	cases := []struct {
		name   string
		ps     PlanSettings
		ts     TenantSettings
		since  time.Time
		capped bool
		units  int64
	}{
		{"no cap", PlanSettings{}, TenantSettings{}, monthStart, false, 0},
		// 400 pays 50 × 3 + 35 × 7 = 395.
		{"plan default", PlanSettings{SpendCapDefaultMinor: i64(400)}, TenantSettings{}, monthStart, true, 185},
		{"tenant's own", PlanSettings{SpendCapDefaultMinor: i64(400)}, TenantSettings{SpendCapMinor: i64(149)}, monthStart, true, 149},
		{"above the maximum", PlanSettings{SpendCapMaxMinor: i64(150)}, TenantSettings{SpendCapMinor: i64(400)}, monthStart, true, 150},
		{"the maximum alone", PlanSettings{SpendCapMaxMinor: i64(0)}, TenantSettings{}, monthStart, true, 100},
		// On the plan for the second half of November: 50 included.
		{"prorated", PlanSettings{SpendCapDefaultMinor: i64(0)}, TenantSettings{}, monthStart.Add(15 * 24 * time.Hour), true, 50},
	}
	for _, c := range cases {
		l := Resolve(p, c.ps, c.ts, c.since, now)
		if l.Capped != c.capped || l.CapUnits != c.units {
			t.Errorf("%s: capped %v units %d, want %v %d", c.name, l.Capped, l.CapUnits, c.capped, c.units)
		}
		if !l.Capped {
			continue
		}
		// The statement's price of the cap's overage is within the cap.
		_, price, err := plans.PriceOverage(p, l.CapUnits-includedSince(p.IncludedUnits, c.since, now))
		if err != nil || price > l.CapMinor {
			t.Errorf("%s: overage priced %d (%v), above the cap %d", c.name, price, err, l.CapMinor)
		}
		if _, next, _ := plans.PriceOverage(p, l.CapUnits-includedSince(p.IncludedUnits, c.since, now)+1); next <= l.CapMinor {
			t.Errorf("%s: one more unit costs %d, still within the cap %d", c.name, next, l.CapMinor)
		}
	}
	if l := Resolve(plans.Plan{IncludedUnits: 10, QuotaMode: plans.QuotaHard}, PlanSettings{SpendCapDefaultMinor: i64(1)}, TenantSettings{}, monthStart, now); l.Capped {
		t.Error("a hard quota plan got a spend cap")
	}
}

func TestValidateThresholds(t *testing.T) {
	f := map[string]string{}
	validateThresholds("thresholds", []Threshold{{Percent: 80}, {Percent: 80, Units: 1}, {}, {Percent: 1001}}, f)
	if len(f) != 3 || f["thresholds[1]"] == "" || f["thresholds[2]"] == "" || f["thresholds[3].percent"] == "" {
		t.Errorf("fields %v", f)
	}
}

// TestASpendCapPastExactUnitsCapsNothing: a cap worth more units than the
// check path counts exactly (limiter.MaxUnits, 2^53) is no cap, rather
// than a tally Redis's doubles would count wrongly.
func TestASpendCapPastExactUnitsCapsNothing(t *testing.T) {
	p := plans.Plan{IncludedUnits: 100, QuotaMode: plans.QuotaOverage, OverageUnitMinor: 1}
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for capMinor, capped := range map[int64]bool{limiter.MaxUnits - 100: true, limiter.MaxUnits: false, 1 << 61: false} {
		if l := Resolve(p, PlanSettings{SpendCapDefaultMinor: &capMinor}, TenantSettings{}, start, start.Add(time.Hour)); l.Capped != capped {
			t.Errorf("a cap of %d minor at 1 a unit: capped %v, want %v", capMinor, l.Capped, capped)
		}
	}
}
