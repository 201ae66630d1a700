package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
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

// TestConsoleTopUpSentTwiceGrantsOnce: the top-up form carries a key of
// its own, so the same form sent twice at once (a double click) grants
// once; sent again with other values it grants nothing and says so,
// with a new key that then grants them.
func TestConsoleTopUpSentTwiceGrantsOnce(t *testing.T) {
	ctx := context.Background()
	admin := admintest.StartAdmin(t, testenv.DatabaseURL(t), nil)
	acme, _, _, _ := tenantSetup(t, admin)
	page := "/tenants/" + acme.ID + "/credits"
	op := signedInAs(t, admin, "ops@example.com", auth.RoleOperator, "")
	op.open(page)
	formKey := func() string {
		t.Helper()
		return eval[string](op, `document.querySelector('#credits-topup input[name="idempotency_key"]').value`)
	}
	key := formKey()
	if key == "" {
		t.Fatal("the top-up form has no idempotency key")
	}
	op.open(page)
	if formKey() == key {
		t.Errorf("the page made the same key twice: %q", key)
	}
	grants := func() int {
		t.Helper()
		var n int
		testenv.Must(t, admin.DB.QueryRow(ctx, `SELECT count(*) FROM credit_grants WHERE tenant_id = $1`, acme.ID).Scan(&n))
		return n
	}

	form := func(amount string) string {
		return url.Values{"csrf": {op.csrf()}, "amount": {amount}, "cause": {"double click"}, "idempotency_key": {key}}.Encode()
	}
	statuses := eval[[]int](op, fmt.Sprintf(`Promise.all([1, 2].map(() => fetch(%q, {method: "POST", body: %q,
		headers: {"Content-Type": "application/x-www-form-urlencoded"}}).then(r => r.status)))`, page, form("700")))
	if len(statuses) != 2 || statuses[0] != http.StatusOK || statuses[1] != http.StatusOK {
		t.Errorf("the form sent twice at once: %v, want both answered with the credits page", statuses)
	}
	if n := grants(); n != 1 {
		t.Errorf("%d grants after the form was sent twice, want 1", n)
	}
	if got := op.status("POST", page, form("800")); got != http.StatusConflict {
		t.Errorf("the form sent again with another amount: %d, want 409", got)
	}
	if n := grants(); n != 1 {
		t.Errorf("%d grants after the form was sent with another amount, want 1", n)
	}

	// In the browser: the form kept from before, changed and sent again,
	// says so and takes a new key, which then grants.
	op.open(page)
	eval[bool](op, fmt.Sprintf(`document.querySelector('#credits-topup input[name="idempotency_key"]').value = %q, true`, key))
	op.fill(map[string]string{`input[name="amount"]`: "900", `input[name="cause"]`: "kept page"})
	op.click(`#credits-topup button[type="submit"]`, ".alert")
	if got := op.text(".alert"); !strings.Contains(got, "already granted") {
		t.Errorf("the kept form's answer: %q", got)
	}
	if fresh := formKey(); fresh == key || fresh == "" {
		t.Errorf("the form's key after the conflict: %q, want a new one", fresh)
	}
	op.click(`#credits-topup button[type="submit"]`, ".flash")
	if n := grants(); n != 2 {
		t.Errorf("%d grants after sending the form with its new key, want 2", n)
	}
	if got := op.number("[data-credits-balance]"); got != 1600 {
		t.Errorf("balance %d, want 700 + 900", got)
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
