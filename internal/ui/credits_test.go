package ui_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
	"github.com/tollgate/tollgate/internal/usage"
)

// TestConsoleCredits: an operator tops a tenant up from its credits page
// (a form error first, shown beside its field); the balance, the grant
// and its ledger row show at once. The tenant's viewer sees the same
// balance, grants and ledger in its portal, without the form, and a
// forged top-up is refused.
func TestConsoleCredits(t *testing.T) {
	ctx := context.Background()
	admin := admintest.StartAdmin(t, testenv.DatabaseURL(t), nil)
	acme, globex, _, _ := tenantSetup(t, admin)
	_, err := credits.NewOps(admin.DB, nil).SetPlan(ctx, audit.CLI, acme.PlanID, credits.PlanSettingsInput{Mode: credits.ModeDeny, Overdraft: 10})
	testenv.Must(t, err)
	page := "/tenants/" + acme.ID + "/credits"

	op := signedInAs(t, admin, "ops@example.com", auth.RoleOperator, "")
	op.open("/tenants/" + acme.ID)
	op.click(`a[href="`+page+`"]`, "#credits-topup")
	op.fill(map[string]string{`input[name="amount"]`: "-5", `input[name="cause"]`: "spring pack"})
	op.click(`#credits-topup button[type="submit"]`, ".field-error")
	if got := op.text(".field-error"); !strings.Contains(got, "units") {
		t.Errorf("error beside the amount: %q", got)
	}
	op.fill(map[string]string{`input[name="amount"]`: "1,500"})
	op.click(`#credits-topup button[type="submit"]`, ".flash")
	if got := op.number("[data-credits-balance]"); got != 1500 {
		t.Errorf("balance after the top-up: %d, want 1500", got)
	}
	if got := op.text("#credit-ledger tbody"); !strings.Contains(got, "grant") || !strings.Contains(got, "spring pack") {
		t.Errorf("ledger: %q", got)
	}
	op.screenshot("credits")

	viewer := signedInAs(t, admin, "viewer@acme.example", auth.RoleTenantViewer, acme.ID)
	viewer.open(page)
	if got := viewer.number("[data-credits-balance]"); got != 1500 {
		t.Errorf("the viewer sees a balance of %d, want 1500", got)
	}
	if n := viewer.count("#credits-topup"); n != 0 {
		t.Errorf("the viewer has %d top-up forms", n)
	}
	if got := viewer.text("#credit-grants tbody"); !strings.Contains(got, "1,500") {
		t.Errorf("the viewer's grants: %q", got)
	}
	if got := viewer.status("POST", page, "csrf="+viewer.csrf()+"&amount=100&cause=forged"); got != http.StatusForbidden {
		t.Errorf("forged top-up = %d, want 403", got)
	}
	if got := viewer.status("GET", "/tenants/"+globex.ID+"/credits", ""); got != http.StatusNotFound {
		t.Errorf("another tenant's credits page = %d, want 404", got)
	}
	b, err := credits.NewStore(admin.DB).Balance(ctx, acme.ID)
	testenv.Must(t, err)
	if b.Balance != 1500 || len(b.Grants) != 1 {
		t.Errorf("stored: balance %d, %d grants", b.Balance, len(b.Grants))
	}

	// In a deployment of several regions the page shows each region's
	// share; in one region, none.
	if n := op.count("#credit-escrows"); n != 0 {
		t.Errorf("one region: %d tables of regions' shares", n)
	}
	_, err = admin.DB.Exec(ctx, `INSERT INTO credit_regions (tenant_id, region, counted, escrow) VALUES ($1, 'eu', 40, 100)`, acme.ID)
	testenv.Must(t, err)
	viewer.open(page)
	if got := viewer.text("#credit-escrows tbody"); !strings.Contains(got, "eu") || !strings.Contains(got, "60") {
		t.Errorf("the regions' shares: %q, want eu holding 60", got)
	}
}

// TestStatementPageShowsCredits: the statement page of a tenant with
// prepaid credits shows the month's credits (granted, used, expired,
// past the balance, unpaid) and, per plan span, the units on credits and
// past the balance, as the API's statement has them.
func TestStatementPageShowsCredits(t *testing.T) {
	ctx := context.Background()
	admin := admintest.StartAdmin(t, testenv.DatabaseURL(t), nil)
	acme, _, _, _ := tenantSetup(t, admin)
	ops := credits.NewOps(admin.DB, nil)
	_, err := ops.SetPlan(ctx, audit.CLI, acme.PlanID, credits.PlanSettingsInput{Mode: credits.ModeOverage})
	testenv.Must(t, err)
	_, err = ops.Grant(ctx, audit.CLI, acme.ID, credits.GrantInput{Amount: 300, Cause: "pack"})
	testenv.Must(t, err)
	now := time.Now().UTC()
	_, err = admin.DB.Exec(ctx, `INSERT INTO credit_ledger (tenant_id, kind, units, balance, cause, entry, at)
		VALUES ($1, 'consumption', -300, 0, 'check', '1-0', $2)`, acme.ID, now)
	testenv.Must(t, err)
	_, err = admin.DB.Exec(ctx, `INSERT INTO credit_hours (tenant_id, hour, overage, unpaid) VALUES ($1, $2, 42, 7)`,
		acme.ID, now.Truncate(time.Hour))
	testenv.Must(t, err)
	st, err := billing.NewStore(admin.DB, nil).Statement(ctx, acme.ID, usage.MonthOf(now))
	testenv.Must(t, err)

	viewer := signedInAs(t, admin, "viewer@acme.example", auth.RoleTenantViewer, acme.ID)
	viewer.open("/tenants/" + acme.ID + "/statements/" + usage.MonthOf(now).String())
	for sel, want := range map[string]int64{
		"[data-credits-granted]": 300, "[data-credits-used]": 300, "[data-credits-expired]": 0,
		"[data-credits-overage]": 42, "[data-credits-unpaid]": 7,
		"[data-credit-units]": 349, "[data-credit-overage]": 42,
	} {
		if got := viewer.number(sel); got != want {
			t.Errorf("%s shows %d, want %d", sel, got, want)
		}
	}
	if p := st.Plans[0]; p.CreditUnits != 349 || p.CreditOverageUnits != 42 || st.Credits.Overage != 42 || st.Credits.Unpaid != 7 {
		t.Errorf("the API's statement: span %+v, credits %+v", p, st.Credits)
	}
}
