// Package quota holds what a tenant is warned of and held to within a
// calendar month (UTC): thresholds on its count of units (the plan's
// defaults, the tenant's own overrides) and spend caps; and the record of
// thresholds crossed, exactly once per tenant, month and threshold.
//
// The count is the tenant's month-to-date allowed units. The check path
// (internal/enforce) finds crossings from the monthly quota counter it
// already keeps and hands them on with the usage batches; the usage worker
// records them (RecordCrossings) and, from the month rollups, every
// crossing the check path could not hand on (Reconcile). docs/usage.md,
// "Quota events", describes the events.
package quota

import (
	"fmt"
	"slices"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
)

// Threshold is a point in a month's count of units that a tenant is told
// of when its usage crosses it. Exactly one field is set: a percentage of
// the plan's included units (rounded up to a whole unit; above 100 for
// overage plans), an absolute count, or a number of included units left.
type Threshold struct {
	Percent   int64 `json:"percent,omitempty"`
	Units     int64 `json:"units,omitempty"`
	Remaining int64 `json:"remaining,omitempty"`
}

// maxThresholds bounds the thresholds of one plan or tenant.
const maxThresholds = 20

// At returns the month-to-date count at which t is crossed on a plan
// including included units; false when it cannot be (a percentage of, or
// units left from, no included units, or more left than included).
func (t Threshold) At(included int64) (int64, bool) {
	switch {
	case t.Units > 0:
		return t.Units, true
	case t.Percent > 0 && included > 0:
		// ⌈percent × included / 100⌉ without overflowing for large counts.
		return t.Percent*(included/100) + (t.Percent*(included%100)+99)/100, true
	case t.Remaining > 0 && t.Remaining < included:
		return included - t.Remaining, true
	}
	return 0, false
}

// validateThresholds names the problems of ts under prefix ("thresholds").
func validateThresholds(prefix string, ts []Threshold, f map[string]string) {
	if len(ts) > maxThresholds {
		f[prefix] = fmt.Sprintf("must be at most %d", maxThresholds)
		return
	}
	for i, t := range ts {
		k := fmt.Sprintf("%s[%d]", prefix, i)
		set := 0
		for _, v := range []int64{t.Percent, t.Units, t.Remaining} {
			if v != 0 {
				set++
			}
		}
		switch {
		case set != 1:
			f[k] = "must set exactly one of percent, units and remaining"
		case t.Percent < 0 || t.Percent > 1000:
			f[k+".percent"] = "must be 1–1000"
		case t.Units < 0 || t.Units > 1<<50:
			f[k+".units"] = "must be 1–2^50"
		case t.Remaining < 0 || t.Remaining > 1<<50:
			f[k+".remaining"] = "must be 1–2^50"
		}
	}
}

// Points returns the distinct counts at which ts are crossed on a plan
// including included units, ascending.
func Points(ts []Threshold, included int64) []int64 {
	var out []int64
	for _, t := range ts {
		if at, ok := t.At(included); ok {
			out = append(out, at)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// PlanSettings are a plan's quota settings: its tenants' default
// thresholds and spend cap, and the most a tenant may set its cap to.
// Caps are integer minor units of overage money a month, and only bind on
// plans whose quota mode is overage.
type PlanSettings struct {
	PlanID               int64       `json:"plan_id"`
	Thresholds           []Threshold `json:"thresholds"`
	SpendCapDefaultMinor *int64      `json:"spend_cap_default_minor"`
	SpendCapMaxMinor     *int64      `json:"spend_cap_max_minor"`
}

// TenantSettings are a tenant's own quota settings: Thresholds replace the
// plan's when not nil; SpendCapMinor replaces the plan's default cap when
// not nil.
type TenantSettings struct {
	TenantID      string      `json:"tenant_id"`
	Thresholds    []Threshold `json:"thresholds"`
	SpendCapMinor *int64      `json:"spend_cap_minor"`
}

// Limits are what a tenant on a plan is warned of and held to this month.
type Limits struct {
	// Points are the counts at which thresholds are crossed, ascending.
	Points []int64
	// CapMinor is the spend cap in force, and CapUnits the most units the
	// month may count under it (included units + the overage units the
	// cap pays for, priced as statements price them); Capped is false
	// when no cap binds.
	CapMinor, CapUnits int64
	Capped             bool
}

// Resolve returns the limits at now of a tenant with settings ts on plan p
// (in force since since) with settings ps: the tenant's thresholds or else
// the plan's; the tenant's cap or else the plan's default or else its
// maximum, never above the maximum. The cap's units count the included
// units as the month's statement will (prorated when the plan came into
// force after the month began), so that the statement's overage for the
// plan never costs more than the cap.
func Resolve(p plans.Plan, ps PlanSettings, ts TenantSettings, since, now time.Time) Limits {
	thresholds := ps.Thresholds
	if ts.Thresholds != nil {
		thresholds = ts.Thresholds
	}
	l := Limits{Points: Points(thresholds, p.IncludedUnits)}
	capMinor := ts.SpendCapMinor
	if capMinor == nil {
		capMinor = ps.SpendCapDefaultMinor
	}
	if capMinor == nil || (ps.SpendCapMaxMinor != nil && *capMinor > *ps.SpendCapMaxMinor) {
		capMinor = ps.SpendCapMaxMinor
	}
	if capMinor == nil || p.QuotaMode != plans.QuotaOverage {
		return l
	}
	overage, bounded := plans.OverageUnitsWithin(p, *capMinor)
	// A cap past what the check path counts exactly (limiter.MaxUnits, as
	// a rule's limit) caps nothing a month can reach: no cap.
	if !bounded || overage > limiter.MaxUnits-p.IncludedUnits {
		return l
	}
	l.CapMinor, l.CapUnits, l.Capped = *capMinor, includedSince(p.IncludedUnits, since, now)+overage, true
	return l
}

// includedSince returns the included units the statement of now's month
// credits a plan in force since since with.
func includedSince(included int64, since, now time.Time) int64 {
	start := monthOf(now)
	end := start.AddDate(0, 1, 0)
	from := since.UTC()
	if from.Before(start) {
		from = start
	}
	if !from.Before(end) {
		return 0
	}
	return plans.Prorate(included, end.Sub(from).Microseconds(), end.Sub(start).Microseconds())
}
