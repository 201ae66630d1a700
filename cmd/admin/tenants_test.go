package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

func TestTenantsPlanSuspendResume(t *testing.T) {
	dbURL, srv := cliDB(t)
	free := planJSON(t, dbURL, "plans", "create", "--name", "free")
	pro := planJSON(t, dbURL, "plans", "create", "--name", "pro")
	out, err := runAdmin(t, dbURL, "", "tenants", "create", "--name", "acme", "--plan", "free")
	testenv.Must(t, err)
	var acme tenants.Tenant
	testenv.Must(t, json.Unmarshal([]byte(out), &acme))
	tenant := func(args ...string) tenants.Tenant {
		t.Helper()
		var got tenants.Tenant
		testenv.Must(t, json.Unmarshal([]byte(mustRun(t, dbURL, append(args, "--json")...)), &got))
		return got
	}

	out, err = runAdmin(t, dbURL, "", "tenants", "plan", "--tenant", "acme", "--plan", "pro")
	if err != nil || !strings.Contains(out, "tenant acme is on plan pro") {
		t.Errorf("tenants plan: %q, %v", out, err)
	}
	if got := tenant("tenants", "plan", "--tenant", acme.ID, "--plan", "free"); got.PlanID != free.ID {
		t.Errorf("tenants plan --json: %+v, want plan %d", got, free.ID)
	}
	var changes int
	testenv.Must(t, srv.DB.QueryRow(t.Context(), `SELECT count(*) FROM audit_log WHERE action = 'tenant.plan_change'
		AND target_id = $1 AND actor = 'cli'`, acme.ID).Scan(&changes))
	if changes != 2 {
		t.Errorf("%d tenant.plan_change entries, want 2", changes)
	}
	wantRefused(t, dbURL, []string{"tenants", "plan", "--tenant", "acme", "--plan", "nope"}, "--plan", "not found")
	wantRefused(t, dbURL, []string{"tenants", "plan", "--tenant", "nobody", "--plan", "pro"}, "--tenant", "not found")
	wantRefused(t, dbURL, []string{"tenants", "plan", "--tenant", "acme"}, "--plan is required")
	wantRefused(t, dbURL, []string{"tenants", "plan", "--tenant", "acme", "--plan", "pro", "--effective-at", "soon"}, "effective-at")
	wantRefused(t, dbURL, []string{"tenants", "plan", "--tenant", "acme", "--plan", "pro",
		"--effective-at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, "effective_at", "future")
	if got := tenant("tenants", "plan", "--tenant", "acme", "--plan", "pro"); got.PlanID != pro.ID {
		t.Errorf("tenants plan: %+v, want plan %d", got, pro.ID)
	}

	out, err = runAdmin(t, dbURL, "", "tenants", "suspend", "--tenant", "acme")
	if err != nil || !strings.Contains(out, "tenant acme suspended") {
		t.Errorf("tenants suspend: %q, %v", out, err)
	}
	if got := tenant("tenants", "suspend", "--tenant", "acme"); got.Status != tenants.StatusSuspended {
		t.Errorf("tenants suspend --json: %+v", got)
	}
	if rows := strings.Split(strings.TrimSpace(mustRun(t, dbURL, "tenants", "list")), "\n"); len(rows) != 2 || !strings.Contains(rows[1], "suspended") {
		t.Errorf("tenants list after suspend:\n%s", strings.Join(rows, "\n"))
	}
	out, err = runAdmin(t, dbURL, "", "tenants", "resume", "--tenant", acme.ID)
	if err != nil || !strings.Contains(out, "tenant acme resumed") {
		t.Errorf("tenants resume: %q, %v", out, err)
	}
	if got := tenant("tenants", "resume", "--tenant", "acme"); got.Status != tenants.StatusActive {
		t.Errorf("tenants resume --json: %+v", got)
	}
	wantRefused(t, dbURL, []string{"tenants", "suspend", "--tenant", "nobody"}, "--tenant")
	wantRefused(t, dbURL, []string{"tenants", "resume"}, "--tenant is required")
}
