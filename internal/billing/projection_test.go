package billing

import (
	"testing"

	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
)

// TestProjectPricesAsTheStatement: a projection bills what the statement
// would: units drawn from credits are not overage, units admitted past
// the balance are, each span is priced on its own plan, and a month that
// has ended shows its statement's figures.
func TestProjectPricesAsTheStatement(t *testing.T) {
	dear := plans.Plan{ID: 4, Name: "dear", Currency: "USD", IncludedUnits: 1000, OverageUnitMinor: 10}
	cheap := plans.Plan{ID: 5, Name: "cheap", Currency: "USD", IncludedUnits: 1000, OverageUnitMinor: 1}
	prepaid := plans.Plan{ID: 6, Name: "prepaid", Currency: "USD", OverageUnitMinor: 10}
	all := map[int64]plans.Plan{dear.ID: dear, cheap.ID: cheap, prepaid.ID: prepaid}
	on := func(planID int64, at string) tenants.PlanChange {
		return tenants.PlanChange{ID: planID, PlanID: planID, EffectiveAt: mustTime(t, at)}
	}
	fifth := mustTime(t, "2026-10-05T10:00:00Z")
	for _, c := range []struct {
		name    string
		history []tenants.PlanChange
		hours   []HourUnits
		credits []credits.Hour
		now     string
		// The projection's overage units and minor units, and its
		// projected units.
		units, minor, projected int64
	}{
		{name: "all drawn from credits, month ended", history: []tenants.PlanChange{on(6, "2026-09-01T00:00:00Z")},
			hours: []HourUnits{{fifth, 1000}}, credits: []credits.Hour{{Start: fifth, Drawn: 1000}},
			now: "2026-11-03T00:00:00Z", units: 0, minor: 0, projected: 1000},
		// 15.5 of 31 days gone: every count doubles.
		{name: "all drawn from credits, half the month gone", history: []tenants.PlanChange{on(6, "2026-09-01T00:00:00Z")},
			hours: []HourUnits{{fifth, 1000}}, credits: []credits.Hour{{Start: fifth, Drawn: 1000}},
			now: "2026-10-16T12:00:00Z", units: 0, minor: 0, projected: 2000},
		{name: "past the balance, half the month gone", history: []tenants.PlanChange{on(6, "2026-09-01T00:00:00Z")},
			hours: []HourUnits{{fifth, 1000}}, credits: []credits.Hour{{Start: fifth, Drawn: 900, Overage: 100}},
			now: "2026-10-16T12:00:00Z", units: 200, minor: 2000, projected: 2000},
		// 1,500 used on dear before a change to cheap: 500 over at 10.
		{name: "a plan changed after the month", history: []tenants.PlanChange{on(4, "2026-09-01T00:00:00Z"), on(5, "2026-11-02T00:00:00Z")},
			hours: []HourUnits{{fifth, 1500}}, now: "2026-11-03T00:00:00Z", units: 500, minor: 5000, projected: 1500},
		// Dear to the 16th 12:00, included 500: 1,500 used, 1,000 over at
		// 10; cheap from then, included 500, and the pace adds 1,500: 1,000
		// over at 1.
		{name: "a plan changed now", history: []tenants.PlanChange{on(4, "2026-09-01T00:00:00Z"), on(5, "2026-10-16T12:00:00Z")},
			hours: []HourUnits{{fifth, 1500}}, now: "2026-10-16T12:00:00Z", units: 2000, minor: 11_000, projected: 3000},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := BuildStatement(StatementInput{Tenant: tenants.Tenant{ID: tA, Name: "acme"}, Month: october(t),
				History: c.history, Plans: all, Hours: c.hours, Credits: c.credits})
			if err != nil {
				t.Fatal(err)
			}
			pr := Project(st, all, mustTime(t, c.now))
			if pr.ProjectedOverageUnits != c.units || pr.ProjectedOverageMinor != c.minor || pr.ProjectedUnits != c.projected {
				t.Errorf("projected %d units, %d over for %d; want %d units, %d over for %d",
					pr.ProjectedUnits, pr.ProjectedOverageUnits, pr.ProjectedOverageMinor, c.projected, c.units, c.minor)
			}
			if mustTime(t, c.now).After(st.PeriodEnd) && pr.ProjectedOverageMinor != st.OverageMinor {
				t.Errorf("a month ended projects %d, its statement bills %d", pr.ProjectedOverageMinor, st.OverageMinor)
			}
		})
	}
}
