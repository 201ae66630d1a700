package ui

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
)

// TestRuleSummaryBurst: a rule's one-line summary names a burst for the
// algorithms that have one (usesBurst), as the rule's form does, and no
// other: not a concurrency rule's.
func TestRuleSummaryBurst(t *testing.T) {
	c := New(Config{})
	for _, a := range limiter.Algorithms {
		var buf bytes.Buffer
		r := plans.Rule{Name: "r", Algorithm: a, Limit: 10, Burst: 7, PeriodUS: limiter.SecondUS, Scope: "key", Resource: "*"}
		if err := c.pages["plan_list"].ExecuteTemplate(&buf, "rule-summary", r); err != nil {
			t.Fatal(err)
		}
		if got, want := strings.Contains(buf.String(), "burst 7"), usesBurst(string(a)); got != want {
			t.Errorf("%s: summary %q names a burst: %v, want %v", a, buf.String(), got, want)
		}
	}
}

var emptyRow = regexp.MustCompile(`<td colspan="(\d+)" class="empty">`)

// TestStatementEmptyRowSpansTheTable: the row of a month on no plan
// spans every column of the plans' table: 9, or 11 with credits.
func TestStatementEmptyRowSpansTheTable(t *testing.T) {
	c := New(Config{})
	for _, tc := range []struct {
		credits *credits.Month
		want    string
	}{{nil, "9"}, {&credits.Month{}, "11"}} {
		var buf bytes.Buffer
		p := statementPage{Tenant: tenants.Tenant{ID: "t", Name: "acme"}, Statement: billing.Statement{Month: "2026-10", Credits: tc.credits}}
		if err := c.pages["statement"].ExecuteTemplate(&buf, "content", view{Data: p}); err != nil {
			t.Fatal(err)
		}
		m := emptyRow.FindStringSubmatch(buf.String())
		if m == nil {
			t.Fatalf("credits %v: no empty row", tc.credits != nil)
		}
		if m[1] != tc.want {
			t.Errorf("credits %v: the empty row spans %s columns, want %s", tc.credits != nil, m[1], tc.want)
		}
		head := buf.String()[strings.Index(buf.String(), "<thead><tr><th>Plan"):]
		head = head[:strings.Index(head, "</thead>")]
		if n := strconv.Itoa(len(regexp.MustCompile(`<th[ >]`).FindAllString(head, -1))); n != tc.want {
			t.Errorf("credits %v: the table has %s columns, want %s", tc.credits != nil, n, tc.want)
		}
	}
}
