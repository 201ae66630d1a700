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
	// month to the whole month (half-up).
	ProjectedUnits int64
	// ProjectedOverageUnits beyond the included ones, and what they would
	// cost on the current plan (minor units of Currency).
	ProjectedOverageUnits int64
	ProjectedOverageMinor int64
	Currency              string
	// Elapsed is the part of the month gone, 0 to 1.
	Elapsed float64
}

// Project returns the projection of st (a statement of the month now is
// in) at now, pricing overage on p, the tenant's current plan. A month
// that has ended projects what it used.
func Project(st Statement, p plans.Plan, now time.Time) Projection {
	out := Projection{Currency: st.Currency}
	if out.Currency == "" {
		out.Currency = p.Currency
	}
	for _, span := range st.Plans {
		out.UsedUnits += span.UsedUnits
		out.IncludedUnits += span.IncludedUnits
	}
	start, end := st.PeriodStart, st.PeriodEnd
	monthUS, elapsedUS := end.Sub(start).Microseconds(), now.Sub(start).Microseconds()
	switch {
	case elapsedUS <= 0:
		out.ProjectedUnits = out.UsedUnits
	case elapsedUS >= monthUS:
		out.ProjectedUnits, out.Elapsed = out.UsedUnits, 1
	default:
		out.ProjectedUnits = prorate(out.UsedUnits, monthUS, elapsedUS)
		out.Elapsed = float64(elapsedUS) / float64(monthUS)
	}
	out.ProjectedOverageUnits = max(0, out.ProjectedUnits-out.IncludedUnits)
	if _, amount, err := priceOverage(p, out.ProjectedOverageUnits); err == nil {
		out.ProjectedOverageMinor = amount
	}
	return out
}
