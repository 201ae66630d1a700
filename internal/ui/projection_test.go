package ui_test

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
	"github.com/tollgate/tollgate/internal/usage"
)

var overageCard = regexp.MustCompile(`data-overage-minor="(-?\d+)" data-overage-units="(-?\d+)"`)

// TestConsoleOverageMatchesTheStatement: the overage a tenant's usage
// page shows for a month that has ended is its statement's, priced on
// the plan of that month (not the one the tenant moved to since) and
// less the units paid from prepaid credits; the month now in projects
// no overage for units all drawn from credits either.
func TestConsoleOverageMatchesTheStatement(t *testing.T) {
	ctx := context.Background()
	admin := admintest.StartAdmin(t, testenv.DatabaseURL(t), nil)
	now := time.Now().UTC()
	this := usage.MonthOf(now)
	last := usage.MonthOf(this.Start().Add(-time.Hour))
	dear := fixture.Plan(t, admin.DB, plans.Plan{Name: "dear", Currency: "USD", IncludedUnits: 1000, OverageUnitMinor: 10})
	cheap := fixture.Plan(t, admin.DB, plans.Plan{Name: "cheap", Currency: "USD", IncludedUnits: 1000, OverageUnitMinor: 1})
	prepaid := fixture.Plan(t, admin.DB, plans.Plan{Name: "prepaid", Currency: "USD", OverageUnitMinor: 10})
	moved := fixture.Tenant(t, admin.DB, "moved", dear.ID)
	credited := fixture.Tenant(t, admin.DB, "credited", prepaid.ID)
	_, movedKey := fixture.Key(t, admin.DB, moved.ID, "web")
	_, creditedKey := fixture.Key(t, admin.DB, credited.ID, "web")
	_, err := admin.DB.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = $1`, last.Start().AddDate(0, -1, 0))
	testenv.Must(t, err)
	// Last month, moved used 1,500 units on dear (500 over at 10¢); then
	// it moved to cheap (1¢).
	testenv.Must(t, tenants.NewStore(admin.DB).SetPlan(ctx, moved.ID, cheap.ID, now))
	// Credited used 1,000 units last month and 1,000 this month, every
	// one drawn from its prepaid balance.
	lastHour, thisHour := last.Start().Add(36*time.Hour), now.Truncate(time.Hour)
	row := func(at time.Time, tenant, key string, units int64) metering.Row {
		return metering.Row{Minute: at.Unix(), TenantID: tenant, KeyID: key, Tier: "authenticated", Resource: "GET /x",
			Reason: "ok", Counts: metering.Counts{Allowed: units, AllowedUnits: units}}
	}
	_, err = usage.NewStore(admin.DB, usage.StoreConfig{}).Apply(ctx, metering.Batch{Version: 1, ID: "overage:1", Rows: []metering.Row{
		row(lastHour, moved.ID, movedKey.ID, 1500),
		row(lastHour, credited.ID, creditedKey.ID, 1000),
		row(thisHour, credited.ID, creditedKey.ID, 1000),
	}})
	testenv.Must(t, err)
	_, err = admin.DB.Exec(ctx, `INSERT INTO credit_accounts (tenant_id, line, consumed) VALUES ($1, 2000, 2000)`, credited.ID)
	testenv.Must(t, err)
	_, err = admin.DB.Exec(ctx, `INSERT INTO credit_ledger (tenant_id, kind, units, balance, cause, entry, at) VALUES
		($1, 'grant', 2000, 2000, 'pack', NULL, $2),
		($1, 'consumption', -1000, 1000, 'check', '1-0', $3),
		($1, 'consumption', -1000, 0, 'check', '2-0', $4)`, credited.ID, last.Start(), lastHour, thisHour)
	testenv.Must(t, err)

	op := admintest.CreateUser(t, admin.DB, "ops@example.com", auth.RoleOperator, "")
	session := admintest.SessionFor(t, admin.DB, op)
	overage := func(path string) (minor, units int64) {
		t.Helper()
		req, _ := http.NewRequest("GET", admin.URL+path, nil)
		req.AddCookie(&http.Cookie{Name: adminapi.SessionCookie, Value: session})
		res := admintest.SendWith(t, http.DefaultClient, req)
		admintest.Want(t, res, http.StatusOK)
		m := overageCard.FindSubmatch(res.Body)
		if m == nil {
			t.Fatalf("%s shows no overage", path)
		}
		minor, _ = strconv.ParseInt(string(m[1]), 10, 64)
		units, _ = strconv.ParseInt(string(m[2]), 10, 64)
		return minor, units
	}
	statements := billing.NewStore(admin.DB, nil)
	for _, c := range []struct {
		name      string
		tenant    tenants.Tenant
		wantMinor int64
		wantUnits int64
	}{
		{"a plan changed since", moved, 5000, 500},
		{"all from credits", credited, 0, 0},
	} {
		st, err := statements.Statement(ctx, c.tenant.ID, last)
		testenv.Must(t, err)
		var stUnits int64
		for _, p := range st.Plans {
			stUnits += p.OverageUnits
		}
		if st.OverageMinor != c.wantMinor || stUnits != c.wantUnits {
			t.Fatalf("%s: the statement bills %d units for %d, want %d for %d", c.name, stUnits, st.OverageMinor, c.wantUnits, c.wantMinor)
		}
		minor, units := overage("/tenants/" + c.tenant.ID + "/usage?month=" + last.String())
		if minor != st.OverageMinor || units != stUnits {
			t.Errorf("%s: the usage page of %s shows %d units over for %d, the statement %d for %d",
				c.name, last, units, minor, stUnits, st.OverageMinor)
		}
	}
	for _, path := range []string{"/tenants/" + credited.ID, "/tenants/" + credited.ID + "/usage"} {
		if minor, units := overage(path); minor != 0 || units != 0 {
			t.Errorf("%s: units all drawn from credits project %d units over for %d, want none", path, units, minor)
		}
	}
}
