package billing

import (
	"time"

	"github.com/tollgate/tollgate/internal/plans"
)

// Projection is where a tenant's month is heading at the pace of its
// usage so far: what the tenant portal shows against included units.
type Projection struct {
	// UsedUnits are the allowed units so far; IncludedUnits the month's
	// (prorated across plan changes, as on the statement).
	UsedUnits     int64
	IncludedUnits int64
	// ProjectedUnits is UsedUnits scaled from the elapsed part of the
	// month to the whole month (half-up); UsedUnits once it has ended.
	ProjectedUnits int64
	// ProjectedOverageUnits are the overage units the statement would
	// bill at the month's end at this pace, and ProjectedOverageMinor
	// what they cost (minor units of Currency), priced as the statement
	// prices them: per span on that span's plan, less the units drawn
	// from prepaid credits, plus those admitted past the balance. For a
	// month that has ended they are the statement's own figures.
	ProjectedOverageUnits int64
	ProjectedOverageMinor int64
	Currency              string
	// Elapsed is the part of the month gone, 0 to 1.
	Elapsed float64
}

// Project returns the projection of st, a statement built by
// BuildStatement or read from the Store, at now. plansByID holds the
// plans of st's spans (it is only read for a month that has not ended),
// priced as BuildStatement prices them: with their prices in st's month
// when they carry their price history (plans.Store.ListPriced), otherwise
// their current prices, which are those of the month now is in.
// A month that has ended projects what its statement bills; for the
// month now is in, each span's units (used, drawn from credits, and
// admitted past the balance) grow at the month's pace so far over the
// part of the span still to come, and are priced by BuildStatement's
// rules. A span whose plan is missing from plansByID, or whose overage
// cannot be priced, adds no money.
func Project(st Statement, plansByID map[int64]plans.Plan, now time.Time) Projection {
	out := Projection{Currency: st.Currency}
	var credit, creditOverage int64
	for _, span := range st.Plans {
		out.UsedUnits += span.UsedUnits
		out.IncludedUnits += span.IncludedUnits
		credit += span.CreditUnits
		creditOverage += span.CreditOverageUnits
	}
	start, end := st.PeriodStart, st.PeriodEnd
	monthUS, elapsedUS := end.Sub(start).Microseconds(), now.Sub(start).Microseconds()
	if elapsedUS >= monthUS {
		out.ProjectedUnits, out.Elapsed = out.UsedUnits, 1
		for _, span := range st.Plans {
			out.ProjectedOverageUnits += span.OverageUnits
		}
		out.ProjectedOverageMinor = st.OverageMinor
		return out
	}
	out.ProjectedUnits = out.UsedUnits
	if elapsedUS > 0 {
		out.Elapsed = float64(elapsedUS) / float64(monthUS)
	}
	for _, span := range st.Plans {
		// The rest of the month, at the pace of its elapsed part, falls
		// in each span by the part of it still to come.
		if aheadUS := span.To.Sub(maxTime(span.From, now)).Microseconds(); elapsedUS > 0 && aheadUS > 0 {
			extra := prorate(out.UsedUnits, aheadUS, elapsedUS)
			span.UsedUnits += extra
			span.CreditUnits += prorate(credit, aheadUS, elapsedUS)
			span.CreditOverageUnits += prorate(creditOverage, aheadUS, elapsedUS)
			out.ProjectedUnits += extra
		}
		p, ok := planIn(plansByID, span.PlanID, start)
		if !ok || chargeOverage(&span, p) != nil {
			continue
		}
		out.ProjectedOverageUnits += span.OverageUnits
		out.ProjectedOverageMinor += span.OverageMinor
	}
	return out
}
