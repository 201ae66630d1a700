package ui_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/auth"
)

// TestConsolePlanEditErrorsBesideHoldFields: a plan's edit form refused
// for a rule's hold options shows each problem beside its own field,
// and keeps the plan's quota section (the plan exists: its thresholds
// and caps are set right there).
func TestConsolePlanEditErrorsBesideHoldFields(t *testing.T) {
	admin, metered := startWithMeteredPlan(t)
	b := signedInAs(t, admin, "ops@example.com", auth.RoleOperator, "")
	edit := fmt.Sprintf("/plans/%d/edit", metered.ID)
	b.open(edit)
	b.press(`input[name="rules[0].hold"]`)
	b.fill(map[string]string{`input[name="rules[0].hold_ttl_s"]`: "100000"})
	// Values the form does not offer, as a forged post would send them.
	eval[bool](b, `(() => { const s = document.querySelector('select[name="rules[0].hold_expiry"]');
		s.add(new Option("never", "never")); s.value = "never";
		const c = document.querySelector('input[name="rules[0].refund_on"]'); c.value = "4xx"; c.checked = true;
		return true; })()`)
	b.submit(`button[value="save"]`, ".alert")
	for field, want := range map[string]string{
		"rules[0].hold_ttl_s":  "between 1 and 86400",
		"rules[0].hold_expiry": "refund or charge",
		"rules[0].refund_on":   "5xx and timeout",
	} {
		if got := b.fieldError(field); !strings.Contains(got, want) {
			t.Errorf("beside %s: %q, want %q", field, got, want)
		}
	}
	if b.count("form[data-quota-form]") != 1 || strings.Contains(b.text("#quota"), "once it is created") {
		t.Errorf("the re-shown edit form's quota section: %q", b.text("#quota"))
	}
	// A hold TTL that is no number is named beside its field too.
	b.fill(map[string]string{`input[name="rules[0].hold_ttl_s"]`: "abc"})
	b.submit(`button[value="save"]`, ".alert")
	if got := b.fieldError("rules[0].hold_ttl_s"); !strings.Contains(got, "whole number") {
		t.Errorf("beside rules[0].hold_ttl_s after abc: %q, want %q", got, "whole number")
	}
	// Adding a rule re-shows the form too, with its quota section.
	b.submit(`button[value="add-rule"]`, `input[name="rules[1].name"]`)
	if b.count("form[data-quota-form]") != 1 {
		t.Errorf("after adding a rule, the quota section: %q", b.text("#quota"))
	}
}
