package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestCreditsListAndLedgerTables: credits list and ledger print tables,
// as the other lists do, and the JSON they printed before with --json.
func TestCreditsListAndLedgerTables(t *testing.T) {
	dbURL, _ := cliDB(t)
	mustRun(t, dbURL, "plans", "create", "--name", "prepaid", "--display-name", "Prepaid", "--base-fee-minor", "0")
	mustRun(t, dbURL, "tenants", "create", "--name", "acme", "--plan", "prepaid")
	var g credits.Grant
	testenv.Must(t, json.Unmarshal([]byte(mustRun(t, dbURL, "credits", "grant", "--tenant", "acme", "--amount", "500", "--cause", "starter pack")), &g))

	list := mustRun(t, dbURL, "credits", "list", "--tenant", "acme")
	for _, want := range []string{`(?m)^balance: 500 units$`, `(?m)^ID +AMOUNT +REMAINING +PRIORITY +EXPIRES +STATUS +CREATED +CAUSE$`,
		`(?m)^` + g.ID + ` +500 +500 +0 +- +live +\S+Z +starter pack$`} {
		if !regexp.MustCompile(want).MatchString(list) {
			t.Errorf("credits list printed\n%s\nwant a line matching %s", list, want)
		}
	}
	var asJSON struct {
		Balance int64           `json:"balance"`
		Grants  []credits.Grant `json:"grants"`
	}
	testenv.Must(t, json.Unmarshal([]byte(mustRun(t, dbURL, "credits", "list", "--tenant", "acme", "--json")), &asJSON))
	if asJSON.Balance != 500 || len(asJSON.Grants) != 1 || asJSON.Grants[0].ID != g.ID {
		t.Errorf("credits list --json = %+v, want the balance 500 and the grant %s", asJSON, g.ID)
	}

	ledger := mustRun(t, dbURL, "credits", "ledger", "--tenant", "acme")
	for _, want := range []string{`(?m)^ID +AT +KIND +UNITS +BALANCE +GRANT +CAUSE$`, `(?m)^\d+ +\S+Z +grant +500 +500 +` + g.ID + ` +starter pack$`} {
		if !regexp.MustCompile(want).MatchString(ledger) {
			t.Errorf("credits ledger printed\n%s\nwant a line matching %s", ledger, want)
		}
	}
	var rows []credits.Entry
	testenv.Must(t, json.Unmarshal([]byte(mustRun(t, dbURL, "credits", "ledger", "--tenant", "acme", "--json")), &rows))
	if len(rows) != 1 || rows[0].Kind != credits.KindGrant || rows[0].Units != 500 {
		t.Errorf("credits ledger --json = %+v, want one grant row of 500", rows)
	}
}

// TestWebhooksListShowsEveryEndpoint: webhooks list prints every
// endpoint, past the first page, with its tenant's name.
func TestWebhooksListShowsEveryEndpoint(t *testing.T) {
	dbURL, srv := cliDB(t)
	ctx := context.Background()
	mustRun(t, dbURL, "plans", "create", "--name", "basic", "--display-name", "Basic", "--base-fee-minor", "0")
	mustRun(t, dbURL, "tenants", "create", "--name", "acme", "--plan", "basic")
	mustRun(t, dbURL, "webhooks", "create", "--tenant", "acme", "--url", "https://hooks.example.com/acme")
	ops := events.NewOps(srv.DB, nil, events.Guard{})
	n := page.MaxLimit + 1
	for i := range n {
		_, err := ops.CreateEndpoint(ctx, audit.CLI, "", events.EndpointInput{URL: fmt.Sprintf("https://hooks.example.com/op/%d", i)})
		testenv.Must(t, err)
	}
	out := mustRun(t, dbURL, "webhooks", "list")
	if lines := strings.Count(out, "\n"); lines != 1+n+1 {
		t.Errorf("webhooks list printed %d lines, want the header and %d endpoints", lines, n+1)
	}
	if !regexp.MustCompile(`(?m)^\S+ +acme +https://hooks.example.com/acme +enabled +\*$`).MatchString(out) {
		t.Errorf("webhooks list printed no row for acme's endpoint by its name:\n%s", out[:min(len(out), 600)])
	}
	var list []events.Endpoint
	testenv.Must(t, json.Unmarshal([]byte(mustRun(t, dbURL, "webhooks", "list", "--json")), &list))
	if len(list) != n+1 {
		t.Errorf("webhooks list --json: %d endpoints, want %d", len(list), n+1)
	}
}

func TestFormatTotalsInMajorUnits(t *testing.T) {
	for _, tt := range []struct {
		totals map[string]int64
		want   string
	}{
		{nil, "0"},
		{map[string]int64{"USD": 38820}, "388.20 USD (38820 minor units)"},
		{map[string]int64{"USD": 5, "JPY": 900, "BHD": 1005}, "1.005 BHD (1005 minor units), 900 JPY (900 minor units), 0.05 USD (5 minor units)"},
		{map[string]int64{"EUR": -150}, "-1.50 EUR (-150 minor units)"},
	} {
		if got := formatTotals(tt.totals); got != tt.want {
			t.Errorf("formatTotals(%v) = %q, want %q", tt.totals, got, tt.want)
		}
	}
}
