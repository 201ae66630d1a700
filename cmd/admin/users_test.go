package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestUsersSessionsRevokeAndDisableCLI: the CLI ends a user's sessions, or
// disables the user (which ends them too), and audits both.
func TestUsersSessionsRevokeAndDisableCLI(t *testing.T) {
	ctx := context.Background()
	dbURL := testenv.DatabaseURL(t)
	srv := startAdmin(t, dbURL, nil)
	u := createUser(t, srv.DB, "ops@example.com", auth.RoleOperator, "")
	other := sessionFor(t, srv.DB, createUser(t, srv.DB, "other@example.com", auth.RoleOperator, ""))
	me := srv.URL + "/api/v1/me"
	sessions := []string{sessionFor(t, srv.DB, u), sessionFor(t, srv.DB, u)}

	out, err := runAdmin(t, dbURL, "", "users", "sessions", "revoke", "--email", "OPS@example.com")
	testenv.Must(t, err)
	if !strings.Contains(out, "2 sessions") {
		t.Errorf("output %q, want it to say 2 sessions ended", out)
	}
	for _, token := range sessions {
		want(t, call(t, "GET", me, token, nil), http.StatusUnauthorized)
	}
	// The user may log in again.
	res := call(t, "POST", srv.URL+"/api/v1/login", "", map[string]string{"email": u.Email, "password": "password-" + u.Email})
	want(t, res, http.StatusOK)
	var lr adminapi.LoginResponse
	res.Decode(t, &lr)

	out, err = runAdmin(t, dbURL, "", "users", "disable", "--email", "ops@example.com")
	testenv.Must(t, err)
	var disabled auth.User
	if err := json.Unmarshal([]byte(out), &disabled); err != nil || disabled.DisabledAt == nil || disabled.ID != u.ID {
		t.Errorf("users disable printed %q (%v), want the disabled user", out, err)
	}
	want(t, call(t, "GET", me, lr.Token, nil), http.StatusUnauthorized)
	want(t, call(t, "POST", srv.URL+"/api/v1/login", "", map[string]string{"email": u.Email, "password": "password-" + u.Email}),
		http.StatusUnauthorized)
	want(t, call(t, "GET", me, other, nil), http.StatusOK)

	rows, err := srv.DB.Query(ctx, `SELECT action || ' ' || coalesce(after::text, '') FROM audit_log
		WHERE actor = 'cli' AND target_type = 'user' AND target_id = $1 ORDER BY id`, u.ID)
	testenv.Must(t, err)
	var entries []string
	for rows.Next() {
		var e string
		testenv.Must(t, rows.Scan(&e))
		entries = append(entries, e)
	}
	testenv.Must(t, rows.Err())
	// Disabling is one change with one entry, which counts the sessions
	// it ended.
	if len(entries) != 2 || entries[0] != `user.sessions_revoke {"sessions_ended": 2}` ||
		!strings.HasPrefix(entries[1], "user.disable ") || !strings.Contains(entries[1], "disabled_at") ||
		!strings.Contains(entries[1], `"sessions_ended": 1`) {
		t.Errorf("audit entries = %q", entries)
	}

	for _, args := range [][]string{
		{"users", "disable"},
		{"users", "disable", "--email", "nobody@example.com"},
		{"users", "sessions", "revoke"},
		{"users", "sessions", "revoke", "--email", "nobody@example.com"},
	} {
		if _, err := runAdmin(t, dbURL, "", args...); err == nil {
			t.Errorf("admin %s succeeded", strings.Join(args, " "))
		}
	}
}
