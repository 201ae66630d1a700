package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestCommandsRefuseFarTimes: a time flag RFC 3339 allows whose instant
// in UTC lies past year 9999 or before year 0, and a month ending past
// 9999-11, is refused naming the flag, and nothing is changed or audited
// (such a time cannot be written in the audit log's JSON).
func TestCommandsRefuseFarTimes(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	db := openPool(t, dbURL)
	mustRun(t, dbURL, "plans", "create", "--name", "basic", "--display-name", "Basic", "--base-fee-minor", "0")
	mustRun(t, dbURL, "tenants", "create", "--name", "acme", "--plan", "basic")
	var made events.IssuedEndpoint
	testenv.Must(t, json.Unmarshal([]byte(mustRun(t, dbURL, "webhooks", "create", "--tenant", "acme",
		"--url", "https://hooks.example.com/acme", "--json")), &made))
	const pastYear9999, beforeYear0 = "9999-12-31T23:59:59-01:00", "0000-01-01T00:00:00+01:00"
	for _, c := range []struct {
		args          []string
		flag, problem string
	}{
		{[]string{"credits", "grant", "--tenant", "acme", "--amount", "5", "--expires", pastYear9999}, "expires", tollgate.TimeRangeProblem},
		{[]string{"tenants", "plan", "--tenant", "acme", "--plan", "basic", "--effective-at", beforeYear0}, "effective-at", tollgate.TimeRangeProblem},
		{[]string{"webhooks", "replay", "--endpoint", made.Endpoint.ID, "--from", "2026-01-01T00:00:00Z", "--to", pastYear9999}, "--to", tollgate.TimeRangeProblem},
		{[]string{"webhooks", "replay", "--endpoint", made.Endpoint.ID, "--from", beforeYear0, "--to", "2026-01-01T00:00:00Z"}, "--from", tollgate.TimeRangeProblem},
		{[]string{"report", "--month", "9999-12"}, "--month", "9999-11"},
		{[]string{"close", "--month", "9999-12"}, "--month", "9999-11"},
	} {
		out, err := admin(t, dbURL, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.flag) || !strings.Contains(err.Error(), c.problem) {
			t.Errorf("admin %s: %q, %v; want it refused naming %s (%s)", strings.Join(c.args, " "), out, err, c.flag, c.problem)
		}
	}
	var changes int
	testenv.Must(t, db.QueryRow(context.Background(), `SELECT count(*) FROM audit_log
		WHERE action IN ('credits.grant', 'tenant.plan_change', 'webhook_endpoint.replay', 'month.close')`).Scan(&changes))
	if changes != 0 {
		t.Errorf("%d changes audited, want none", changes)
	}
}
