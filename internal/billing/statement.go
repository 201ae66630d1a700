package billing

import (
	"sort"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
)

// RulesText states how statements are computed; every statement carries
// it.
const RulesText = "Money is integer minor units of the plan's currency. " +
	"The month is [first instant, first instant of the next month) in UTC, measured in microseconds. " +
	"A plan's prices (base_fee, included_units, overage_unit_minor, tiers) are those in effect in the month: " +
	"a change of a plan's prices takes effect from the start of the month it is made in. " +
	"Each span of the month on one plan (from the tenant's plan history) is charged base_fee × span / month " +
	"and granted included_units × span / month, each rounded half-up to a whole minor unit or unit. " +
	"An hour's allowed units count on the plan in effect at the hour's start (on the first plan, " +
	"for hours before the tenant's first plan began). " +
	"Overage = max(0, units used in the span − units included in the span), priced per span on that plan: " +
	"flat at overage_unit_minor per unit, or, when the plan has tiers, graduated: each tier prices the " +
	"overage units up to its up_to at its unit_minor, and units beyond the last tier are priced at the last " +
	"tier's unit_minor. Tier bounds are not prorated. Denied checks are never billed. " +
	"Prepaid credits: units drawn from a tenant's credit balance were paid when the credits were bought and " +
	"are not billed again; units used in the span counts only units of checks that did not draw on the balance " +
	"(allowed units less the units drawn, admitted past the balance and settled past it, by the hour of the draw), " +
	"and the units admitted past the balance in overage mode are added to the span's overage units and priced " +
	"with them. Units a hold was settled for past the allowed overdraft in deny mode are shown as unpaid and never billed."

// Statement is a tenant's month: usage, base fees, overage and total.
type Statement struct {
	TenantID    string    `json:"tenant_id"`
	TenantName  string    `json:"tenant_name"`
	Month       string    `json:"month"`
	PeriodStart time.Time `json:"period_start"`
	PeriodEnd   time.Time `json:"period_end"`
	Currency    string    `json:"currency"`
	// Status is "open" (computed from current usage; may still change) or
	// "closed" (frozen by `admin close`).
	Status   string     `json:"status"`
	ClosedAt *time.Time `json:"closed_at,omitempty"`
	// Usage sums Lines.
	Usage        metering.Counts `json:"usage"`
	Lines        []UsageLine     `json:"usage_by_key_and_resource"`
	Plans        []PlanCharges   `json:"plan_periods"`
	BaseFeeMinor int64           `json:"base_fee_minor"`
	OverageMinor int64           `json:"overage_minor"`
	TotalMinor   int64           `json:"total_minor"`
	Rules        string          `json:"rules"`
	// ExpiredHolds are the holds that expired unsettled this month
	// (Usage.ExpiredHolds of them) and the units they were charged on
	// expiry (part of Usage.AllowedUnits, so billed); settled holds count
	// their settled units as any check does.
	ExpiredHoldUnits int64 `json:"expired_hold_units"`
	// Late sums usage that arrived after the month was closed; it is not
	// part of the total. Filled when a closed statement is read.
	Late *metering.Counts `json:"late_usage,omitempty"`
	// Credits is the month's prepaid credits from the ledger (granted,
	// used, expired, adjusted, the units admitted past the balance as
	// overage and those settled past it unpaid), for a tenant that has
	// had credits; nil otherwise. Credits are paid when bought: units
	// drawn from the balance are not billed; the overage is billed in the
	// plan spans' overage (PlanCharges.CreditOverageUnits), unpaid units
	// never.
	Credits *credits.Month `json:"credits,omitempty"`
	// CreditsBehind, on a closed statement, says that when the month was
	// closed the credits drainer had not yet recorded the tenant's draws
	// up to the month's end (a drainer behind, Redis or a region cut
	// off): what it records later for the month is in LateCredits, not in
	// Credits or the total.
	CreditsBehind bool `json:"credits_behind,omitempty"`
	// LateCredits sums what the credits drainer recorded for the month
	// after it was closed (draws, overage, unpaid and expired units): not
	// part of Credits or the total, as Late is not. Filled when a closed
	// statement is read.
	LateCredits *credits.Late `json:"late_credits,omitempty"`
	// Invoice is the closed statement's invoice at the payment provider,
	// for a tenant with a billing account at the close; nil otherwise.
	// Filled when a closed statement is read.
	Invoice *StatementInvoice `json:"invoice,omitempty"`
}

// StatementInvoice is where a statement's invoice stands: PushState is
// "pending" until the provider holds it ("push pending"), then "pushed";
// PaymentStatus is unpaid, paid, failed or void.
type StatementInvoice struct {
	PushState         string `json:"push_state"`
	PaymentStatus     string `json:"payment_status"`
	ProviderInvoiceID string `json:"provider_invoice_id,omitempty"`
}

// UsageLine is a month's usage by one key of one resource. KeyID is ""
// for decisions without a key.
type UsageLine = tollgate.UsageLine

// PlanCharges are the charges of one span of the month on one plan.
type PlanCharges = tollgate.PlanPeriod

// OverageLine prices overage units FromUnit..ToUnit (1-based, inclusive)
// at UnitMinor each (plans.PriceOverage).
type OverageLine = plans.OverageLine

// HourUnits are the allowed units of one hour.
type HourUnits struct {
	Start        time.Time
	AllowedUnits int64
}

// StatementInput is everything a statement is computed from.
type StatementInput struct {
	Tenant tenants.Tenant
	Month  usage.Month
	// History is the tenant's plan history (any order, any span).
	History []tenants.PlanChange
	// Plans are the plans by ID, with their price history
	// (plans.Store.ListPriced): each span is priced with its plan's prices
	// in Month (plans.Plan.In).
	Plans map[int64]plans.Plan
	// Hours are the month's allowed units by hour.
	Hours []HourUnits
	// Lines are the month's usage by key and resource.
	Lines []UsageLine
	// Credits are the month's hours in which checks drew on the tenant's
	// prepaid balance.
	Credits []credits.Hour
}

// BuildStatement prices a tenant's month by RulesText. It is a pure
// function of its input. Errors are EINVALID for a history naming an
// unknown plan or plans of different currencies in one month, and for
// amounts beyond int64.
func BuildStatement(in StatementInput) (Statement, error) {
	m := in.Month
	st := Statement{
		TenantID: in.Tenant.ID, TenantName: in.Tenant.Name, Month: m.String(),
		PeriodStart: m.Start(), PeriodEnd: m.End(), Status: "open", Rules: RulesText,
		Lines: append([]UsageLine{}, in.Lines...), Plans: []PlanCharges{},
	}
	sort.Slice(st.Lines, func(i, j int) bool {
		if st.Lines[i].KeyID != st.Lines[j].KeyID {
			return st.Lines[i].KeyID < st.Lines[j].KeyID
		}
		return st.Lines[i].Resource < st.Lines[j].Resource
	})
	for _, l := range st.Lines {
		st.Usage.Add(l.Counts)
		st.ExpiredHoldUnits += l.ExpiredHoldUnits
	}
	spans, err := planSpans(in.History, in.Plans, m)
	if err != nil {
		return Statement{}, err
	}
	if len(spans) == 0 {
		return st, nil
	}
	spanOf := func(start time.Time) *PlanCharges {
		i := sort.Search(len(spans), func(i int) bool { return spans[i].From.After(start) }) - 1
		return &spans[max(i, 0)]
	}
	for _, h := range in.Hours {
		spanOf(h.Start).UsedUnits += h.AllowedUnits
	}
	for _, h := range in.Credits {
		c := spanOf(h.Start)
		c.CreditUnits += h.Units()
		c.CreditOverageUnits += h.Overage
	}
	monthUS := m.End().Sub(m.Start()).Microseconds()
	for i := range spans {
		c := &spans[i]
		p, _ := planIn(in.Plans, c.PlanID, m.Start()) // planSpans checked it is there
		if st.Currency == "" {
			st.Currency = p.Currency
		} else if st.Currency != p.Currency {
			return Statement{}, tollgate.Errorf(tollgate.EINVALID,
				"tenant %s changed between plans of different currencies in %s", in.Tenant.Name, m)
		}
		c.SpanUS, c.MonthUS = c.To.Sub(c.From).Microseconds(), monthUS
		c.PlanBaseFeeMinor, c.PlanIncludedUnits = p.BaseFeeMinor, p.IncludedUnits
		c.BaseFeeMinor = prorate(p.BaseFeeMinor, c.SpanUS, monthUS)
		c.IncludedUnits = prorate(p.IncludedUnits, c.SpanUS, monthUS)
		if err := chargeOverage(c, p); err != nil {
			return Statement{}, err
		}
		if c.TotalMinor, err = addChecked(c.BaseFeeMinor, c.OverageMinor); err != nil {
			return Statement{}, err
		}
		if st.BaseFeeMinor, err = addChecked(st.BaseFeeMinor, c.BaseFeeMinor); err != nil {
			return Statement{}, err
		}
		if st.OverageMinor, err = addChecked(st.OverageMinor, c.OverageMinor); err != nil {
			return Statement{}, err
		}
	}
	st.Plans = spans
	if st.TotalMinor, err = addChecked(st.BaseFeeMinor, st.OverageMinor); err != nil {
		return Statement{}, err
	}
	return st, nil
}

// planIn returns plan id of byID with its prices in effect in the month
// starting at month (plans.Plan.In), and whether byID has it: the one
// lookup of a span's prices, for statements and for projections alike.
func planIn(byID map[int64]plans.Plan, id int64, month time.Time) (plans.Plan, bool) {
	p, ok := byID[id]
	return p.In(month), ok
}

// chargeOverage sets span c's overage units from its units used, drawn
// from credits, admitted past the balance and included, and prices them
// on p, the span's plan (see RulesText): the one place a span's overage
// is computed, for statements and for projections alike.
func chargeOverage(c *PlanCharges, p plans.Plan) error {
	c.OverageUnits = max(0, c.UsedUnits-c.CreditUnits-c.IncludedUnits) + max(0, c.CreditOverageUnits)
	var err error
	c.Overage, c.OverageMinor, err = priceOverage(p, c.OverageUnits)
	return err
}

// planSpans cuts the month into spans on one plan each, in time order.
func planSpans(history []tenants.PlanChange, byID map[int64]plans.Plan, m usage.Month) ([]PlanCharges, error) {
	h := append([]tenants.PlanChange{}, history...)
	sort.Slice(h, func(i, j int) bool {
		if !h[i].EffectiveAt.Equal(h[j].EffectiveAt) {
			return h[i].EffectiveAt.Before(h[j].EffectiveAt)
		}
		return h[i].ID < h[j].ID
	})
	var spans []PlanCharges
	for i, c := range h {
		from, to := c.EffectiveAt.UTC(), m.End()
		if i+1 < len(h) {
			to = h[i+1].EffectiveAt.UTC()
		}
		from, to = maxTime(from, m.Start()), minTime(to, m.End())
		if !from.Before(to) {
			continue
		}
		p, ok := byID[c.PlanID]
		if !ok {
			return nil, tollgate.Errorf(tollgate.EINVALID, "plan %d in the plan history does not exist", c.PlanID)
		}
		if n := len(spans); n > 0 && spans[n-1].PlanID == p.ID && spans[n-1].To.Equal(from) {
			spans[n-1].To = to // a change to the same plan changes nothing
			continue
		}
		spans = append(spans, PlanCharges{Plan: p.Name, PlanID: p.ID, From: from, To: to, Overage: []OverageLine{}})
	}
	return spans, nil
}

// prorate returns amount × num / den rounded half-up (plans.Prorate).
var prorate = plans.Prorate

// priceOverage prices units of overage on plan p (see RulesText): the
// one pricing of overage, which spend caps use too.
var priceOverage = plans.PriceOverage

// addChecked returns a + b, or an EINVALID error on overflow.
var addChecked = plans.AddChecked

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
