package ui_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
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
}
