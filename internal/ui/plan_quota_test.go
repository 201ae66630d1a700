package ui_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
)

// startWithMeteredPlan starts the admin server with plan "metered"
// stored: 1,000 units included a month, then overage at 2 cents a unit
// (the quota reported), and an hourly rule of 100.
func startWithMeteredPlan(t *testing.T) (*admintest.Server, plans.Plan) {
	t.Helper()
	admin := admintest.StartAdmin(t, testenv.DatabaseURL(t), nil)
	metered, err := plans.NewStore(admin.DB).Create(context.Background(), plans.Plan{Name: "metered", IncludedUnits: 1000,
		Currency: "USD", QuotaMode: plans.QuotaOverage, OverageUnitMinor: 2,
		Rules: []plans.Rule{{Name: "hourly", Limit: 100, PeriodUS: limiter.HourUS}}})
	testenv.Must(t, err)
	return admin, metered
}

// TestConsolePlanQuota: an operator sets a plan's default thresholds and
// its tenants' default and maximum spend caps on the plan's edit page.
// Values that are no number, and values the operation refuses, are shown
// beside their rows and save nothing; saved ones are what the API reads,
// written by the operator as one plan.quota audit entry, shown on the
// plan's page and on its tenants' alerts pages; saving the plan's other
// fields leaves them alone.
func TestConsolePlanQuota(t *testing.T) {
	admin, metered := startWithMeteredPlan(t)
	ctx := context.Background()
	acme, err := tenants.NewStore(admin.DB).Create(ctx, "acme", metered.ID)
	testenv.Must(t, err)
	qs := quota.NewStore(admin.DB)
	settings := func() string {
		t.Helper()
		ps, err := qs.PlanSettings(ctx, metered.ID)
		testenv.Must(t, err)
		str := func(v *int64) string {
			if v == nil {
				return "none"
			}
			return strconv.FormatInt(*v, 10)
		}
		return fmt.Sprintf("%v default %s max %s", ps.Thresholds, str(ps.SpendCapDefaultMinor), str(ps.SpendCapMaxMinor))
	}
	audits := func() []string {
		t.Helper()
		rows, err := admin.DB.Query(ctx, `SELECT actor || ' ' || action || ' ' || target_id FROM audit_log
			WHERE action LIKE 'plan.%' ORDER BY id`)
		testenv.Must(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			testenv.Must(t, rows.Scan(&s))
			out = append(out, s)
		}
		return out
	}
	const stored = "[] default none max none"
	if got := settings(); got != stored {
		t.Fatalf("a new plan's settings: %s", got)
	}
	b := signedInAs(t, admin, "ops@example.com", auth.RoleOperator, "")
	edit := fmt.Sprintf("/plans/%d/edit", metered.ID)

	// A new plan has no settings yet: the form says where they are set.
	b.open("/plans/new")
	if b.count("form[data-quota-form]") != 0 || !strings.Contains(b.text("#quota"), "edit page") {
		t.Errorf("the new plan page's quota card: %q", b.text("#quota"))
	}

	// A value that is no number is caught before the operation; the rows
	// keep what was typed.
	b.open(edit)
	b.fill(map[string]string{`input[name="thresholds[0].value"]`: "80", `input[name="thresholds[2].value"]`: "lots",
		`input[name="spend_cap_default_minor"]`: "5000", `input[name="spend_cap_max_minor"]`: "3000"})
	b.submit(`form[data-quota-form] button[type="submit"]`, "#quota .alert")
	if got := b.fieldError("thresholds[1].value"); got != "must be a whole number" {
		t.Errorf(`a threshold of "lots" (the second row typed): error %q`, got)
	}
	if got := eval[string](b, `document.querySelector('input[name="thresholds[0].value"]').value + "," +
		document.querySelector('input[name="thresholds[1].value"]').value + "," +
		document.querySelector('input[name="spend_cap_default_minor"]').value`); got != "80,lots,5000" {
		t.Errorf("the refused form shows %q, want what was typed", got)
	}

	// The operation's own refusals, beside their fields: a default above
	// the maximum, a percentage out of range.
	b.fill(map[string]string{`input[name="thresholds[1].value"]`: "5000"})
	b.submit(`form[data-quota-form] button[type="submit"]`, "#quota .alert")
	if got := b.fieldError("spend_cap_default_minor"); !strings.Contains(got, "at most spend_cap_max_minor") {
		t.Errorf("a default cap above the maximum: error %q", got)
	}
	if got := b.fieldError("thresholds[1].value"); got != "must be 1–1000" {
		t.Errorf("a threshold of 5000 %%: error %q", got)
	}
	if got := settings(); got != stored || len(audits()) != 0 {
		t.Fatalf("refused forms stored %s, audited %v", got, audits())
	}
	b.screenshot("plan-quota-errors")

	// Saved: 80 %, 100 left, 900 units; a default cap of $30 of at most $50.
	b.fill(map[string]string{`input[name="thresholds[1].value"]`: "100", `select[name="thresholds[1].kind"]`: "remaining",
		`input[name="thresholds[2].value"]`: "900", `select[name="thresholds[2].kind"]`: "units",
		`input[name="spend_cap_default_minor"]`: "3000", `input[name="spend_cap_max_minor"]`: "5,000"})
	b.submit(`form[data-quota-form] button[type="submit"]`, ".flash")
	if b.location() != fmt.Sprintf("/plans/%d", metered.ID) {
		t.Fatalf("after saving: at %s\n%s", b.location(), b.pageText())
	}
	const saved = "[{80 0 0} {0 0 100} {0 900 0}] default 3000 max 5000"
	if got := settings(); got != saved {
		t.Fatalf("stored %s, want %s", got, saved)
	}
	if got, want := fmt.Sprint(audits()), fmt.Sprintf("[ops@example.com plan.quota %d]", metered.ID); got != want {
		t.Errorf("audit log %s, want %s", got, want)
	}
	if got := b.text("#quota"); !strings.Contains(got, "80 % of the included units") || !strings.Contains(got, "800 units") ||
		!strings.Contains(got, "900 units") || !strings.Contains(got, "100 included units left") {
		t.Errorf("the plan page's thresholds: %q", got)
	}
	if d, m := b.text("[data-cap-default]"), b.text("[data-cap-max]"); d != "$30.00" || m != "$50.00" {
		t.Errorf("the plan page's caps: default %q, max %q", d, m)
	}
	b.screenshot("plan-quota")

	// The edit page shows them as saved; the plan's own form leaves them
	// alone.
	b.open(edit)
	if got := eval[string](b, `[0, 1, 2, 3].map(i => document.querySelector('input[name="thresholds[' + i + '].value"]').value + ":" +
		document.querySelector('select[name="thresholds[' + i + '].kind"]').value).join(" ") + " " +
		document.querySelector('input[name="spend_cap_max_minor"]').value`); got != "80:percent 100:remaining 900:units :percent 5000" {
		t.Errorf("the edit page's quota form: %q", got)
	}
	b.fill(map[string]string{`input[name="display_name"]`: "Metered"})
	b.submit(`button[value="save"]`, ".flash")
	if got := settings(); got != saved {
		t.Errorf("saving the plan's other fields changed its quota settings to %s", got)
	}
	if got := audits(); len(got) != 2 || !strings.Contains(got[1], "plan.update") {
		t.Errorf("audit log after saving the plan: %v", got)
	}

	// Its tenants get them: the cap in force on acme's alerts page.
	b.open("/tenants/" + acme.ID + "/alerts")
	if got := b.text("[data-cap]"); got != "$30.00" {
		t.Errorf("acme's cap in force: %q, want the plan's default $30.00", got)
	}
	if got := b.text("#thresholds tbody"); !strings.Contains(got, "900 units") {
		t.Errorf("acme's thresholds: %q", got)
	}

	// Emptied: no thresholds, no caps.
	b.open(edit)
	b.fill(map[string]string{`input[name="thresholds[0].value"]`: "", `input[name="thresholds[1].value"]`: "",
		`input[name="thresholds[2].value"]`: "", `input[name="spend_cap_default_minor"]`: "", `input[name="spend_cap_max_minor"]`: ""})
	b.submit(`form[data-quota-form] button[type="submit"]`, ".flash")
	if got := settings(); got != stored {
		t.Errorf("after emptying the form: %s, want %s", got, stored)
	}
}
