package main

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/tollgate/tollgate/internal/credits"
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
