package plans

import "github.com/tollgate/tollgate/internal/limiter"

// QuotaMode says what a plan's included units mean on the check path.
type QuotaMode string

// Quota modes.
const (
	// QuotaNone: included units only matter for billing.
	QuotaNone QuotaMode = "none"
	// QuotaHard: checks beyond the included units in a calendar month are
	// denied (reason rate_limited, policy monthly-quota).
	QuotaHard QuotaMode = "hard"
	// QuotaOverage: checks beyond the included units are allowed and billed
	// as overage; the quota rule runs in shadow mode, so decisions still
	// show the remaining quota and would_deny once past it.
	QuotaOverage QuotaMode = "overage"
)

// QuotaRuleName names the rule QuotaRule returns; plans may not use it.
const QuotaRuleName = "monthly-quota"

// QuotaRule returns the rule that enforces (hard) or watches (overage) the
// plan's monthly quota: a fixed window aligned to UTC calendar months, with
// IncludedUnits as its limit, counted per tenant (per IP for anonymous
// callers) over every resource. A failed limiter store lets checks through
// (failure mode open), like the demo plans' rules. ok is false when the
// plan has no quota.
//
// The window's state belongs to the tenant, not to the plan (the snapshot
// names it the same on every plan): a tenant moved to another plan
// mid-month keeps the month's count, and only the limit changes; the
// statement, which prorates included units, is what bills.
func (p Plan) QuotaRule() (r Rule, ok bool) {
	var mode Mode
	switch p.QuotaMode {
	case QuotaHard:
		mode = ModeEnforce
	case QuotaOverage:
		mode = ModeShadow
	default:
		return Rule{}, false
	}
	return Rule{
		Name:        QuotaRuleName,
		Algorithm:   limiter.FixedWindow,
		Limit:       p.IncludedUnits,
		PeriodUS:    31 * limiter.DayUS,
		Burst:       p.IncludedUnits,
		Resource:    "*",
		Scope:       ScopeTenant,
		Mode:        mode,
		FailureMode: FailOpen,
		Options:     Options{Calendar: string(limiter.CalendarMonth)},
	}, true
}

// SpendCapRuleName names the rule SpendCapRule returns; plans may not use
// it.
const SpendCapRuleName = "spend-cap"

// SpendCapRule returns the rule that holds a tenant to its spend cap: a
// fixed window aligned to UTC calendar months admitting at most units
// (the included units and the overage units the cap pays for), counted per
// tenant over every resource, failing closed (a cap is a promise about
// money). Like the quota rule, its state belongs to the tenant.
func SpendCapRule(units int64) Rule {
	return Rule{
		Name:        SpendCapRuleName,
		Algorithm:   limiter.FixedWindow,
		Limit:       units,
		PeriodUS:    31 * limiter.DayUS,
		Burst:       max(units, 1),
		Resource:    "*",
		Scope:       ScopeTenant,
		Mode:        ModeEnforce,
		FailureMode: FailClosed,
		Options:     Options{Calendar: string(limiter.CalendarMonth)},
	}
}
