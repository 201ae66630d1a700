package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/demo"
	"github.com/tollgate/tollgate/internal/testenv"
)

func TestUsersCreateCLI(t *testing.T) {
	ctx := context.Background()
	dbURL := testenv.DatabaseURL(t)
	out, err := runAdmin(t, dbURL, "a long enough password\n", "users", "create", "--email", "Ops@Example.com",
		"--role", "operator", "--password-stdin")
	testenv.Must(t, err)
	if out != "" {
		t.Errorf("stdout = %q, want nothing when the password came from stdin", out)
	}
	srv := startAdmin(t, dbURL, nil)
	if _, err := auth.NewStore(srv.DB).Authenticate(ctx, "ops@example.com", "a long enough password"); err != nil {
		t.Fatalf("the new operator cannot log in: %v", err)
	}

	_, err = runAdmin(t, dbURL, "", "tenants", "create", "--name", "acme", "--plan", "free")
	if err == nil {
		t.Fatal("tenants create on a missing plan succeeded")
	}
	_, err = runAdmin(t, dbURL, "", "seed", "demo")
	testenv.Must(t, err)
	out, err = runAdmin(t, dbURL, "", "users", "create", "--email", "viewer@example.com", "--role", "tenant_viewer",
		"--tenant", "demo-free", "--json")
	testenv.Must(t, err)
	var made struct {
		User     auth.User `json:"user"`
		Password string    `json:"password"`
	}
	if err := json.Unmarshal([]byte(out), &made); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	if made.User.Role != auth.RoleTenantViewer || made.User.TenantID == "" || len(made.Password) < auth.MinPasswordLen {
		t.Errorf("created %+v", made)
	}
	if _, err := auth.NewStore(srv.DB).Authenticate(ctx, "viewer@example.com", made.Password); err != nil {
		t.Errorf("the generated password does not log in: %v", err)
	}

	for _, args := range [][]string{
		{"users", "create", "--email", "x@example.com", "--role", "tenant_admin"},                    // no tenant
		{"users", "create", "--email", "x@example.com", "--role", "root"},                            // no such role
		{"users", "create", "--email", "ops@example.com", "--role", "operator"},                      // taken
		{"users", "create", "--email", "y@example.com", "--role", "operator", "--password-stdin"},    // no password
		{"users", "create", "--email", "y@example.com", "--role", "tenant_viewer", "--tenant", "no"}, // no tenant
	} {
		if _, err := runAdmin(t, dbURL, "", args...); err == nil {
			t.Errorf("admin %s succeeded", strings.Join(args, " "))
		}
	}
}

func TestSeedDemoPrintsUsers(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	srv := startAdmin(t, dbURL, nil)
	for run := range 2 { // seed is idempotent and hands out fresh passwords
		out, err := runAdmin(t, dbURL, "", "seed", "demo", "--json")
		testenv.Must(t, err)
		var seeded struct {
			ServiceToken string               `json:"service_token"`
			Keys         map[string]string    `json:"keys"`
			Users        map[string]demo.User `json:"users"`
		}
		if err := json.Unmarshal([]byte(out), &seeded); err != nil {
			t.Fatalf("--json output: %v", err)
		}
		if seeded.ServiceToken == "" || len(seeded.Keys) != 3 || len(seeded.Users) != 3 {
			t.Fatalf("run %d: seed output %s", run, out)
		}
		for role, u := range seeded.Users {
			res := call(t, "POST", srv.URL+"/api/v1/login", "", map[string]string{"email": u.Email, "password": u.Password})
			want(t, res, http.StatusOK)
			var lr adminapi.LoginResponse
			res.Decode(t, &lr)
			if string(lr.User.Role) != role {
				t.Errorf("%s logs in as %s", role, lr.User.Role)
			}
			if role == "tenant_admin" {
				// The demo tenant admin manages demo-pro, and only it.
				var me adminapi.MeResponse
				call(t, "GET", srv.URL+"/api/v1/me", lr.Token, nil).Decode(t, &me)
				want(t, call(t, "GET", srv.URL+"/api/v1/tenants/"+me.User.TenantID+"/keys", lr.Token, nil), http.StatusOK)
				want(t, call(t, "GET", srv.URL+"/api/v1/tenants", lr.Token, nil), http.StatusForbidden)
			}
		}
	}
}

// TestAuditNeverHoldsSecrets makes every kind of secret there is — users'
// passwords, API key secrets, service tokens, session tokens — through the
// CLI and the API, then searches the audit log, and the API's view of it,
// for each of them and for the stored hashes.
func TestAuditNeverHoldsSecrets(t *testing.T) {
	ctx := context.Background()
	dbURL := testenv.DatabaseURL(t)
	var secrets []string
	const opPassword = "operator password 42"
	_, err := runAdmin(t, dbURL, opPassword+"\n", "users", "create", "--email", "ops@example.com", "--role", "operator", "--password-stdin")
	testenv.Must(t, err)
	secrets = append(secrets, opPassword)
	out, err := runAdmin(t, dbURL, "", "seed", "demo", "--json")
	testenv.Must(t, err)
	var seeded demo.Result
	testenv.Must(t, json.Unmarshal([]byte(out), &seeded))
	secrets = append(secrets, seeded.ServiceToken)
	for _, k := range seeded.Keys {
		secrets = append(secrets, k)
	}
	for _, u := range seeded.Users {
		secrets = append(secrets, u.Password)
	}
	out, err = runAdmin(t, dbURL, "", "users", "create", "--email", "admin@acme.example", "--role", "tenant_admin", "--tenant", "demo-free", "--json")
	testenv.Must(t, err)
	var made struct {
		Password string `json:"password"`
	}
	testenv.Must(t, json.Unmarshal([]byte(out), &made))
	secrets = append(secrets, made.Password)
	_, err = runAdmin(t, dbURL, "", "tenants", "create", "--name", "cli tenant", "--plan", "free")
	testenv.Must(t, err)
	out, err = runAdmin(t, dbURL, "", "keys", "issue", "--tenant", "demo-pro", "--name", "cli key")
	testenv.Must(t, err)
	secrets = append(secrets, strings.TrimSpace(out))
	out, err = runAdmin(t, dbURL, "", "tokens", "issue", "--name", "cli gateway")
	testenv.Must(t, err)
	secrets = append(secrets, strings.TrimSpace(out))

	srv := startAdmin(t, dbURL, nil)
	login := func(email, password string) string {
		res := call(t, "POST", srv.URL+"/api/v1/login", "", map[string]string{"email": email, "password": password})
		want(t, res, http.StatusOK)
		var lr adminapi.LoginResponse
		res.Decode(t, &lr)
		secrets = append(secrets, lr.Token)
		return lr.Token
	}
	op := login("ops@example.com", opPassword)
	ta := login("admin@acme.example", made.Password)
	var me adminapi.MeResponse
	call(t, "GET", srv.URL+"/api/v1/me", ta, nil).Decode(t, &me)
	keys := srv.URL + "/api/v1/tenants/" + me.User.TenantID + "/keys"
	res := call(t, "POST", keys, ta, map[string]any{"name": "api key", "metadata": map[string]string{"owner": "ci"}})
	want(t, res, http.StatusCreated)
	var k adminapi.KeySecretResponse
	res.Decode(t, &k)
	secrets = append(secrets, k.Secret)
	res = call(t, "POST", keys+"/"+k.Key.ID+"/rotate", ta, nil)
	want(t, res, http.StatusCreated)
	var rotated adminapi.KeySecretResponse
	res.Decode(t, &rotated)
	secrets = append(secrets, rotated.Secret)
	want(t, call(t, "POST", keys+"/"+rotated.Key.ID+"/revoke", ta, nil), http.StatusOK)
	res = call(t, "POST", srv.URL+"/api/v1/service-tokens", op, map[string]any{"name": "edge"})
	want(t, res, http.StatusCreated)
	var st adminapi.ServiceTokenResponse
	res.Decode(t, &st)
	secrets = append(secrets, st.Token)
	want(t, call(t, "POST", srv.URL+"/api/v1/logout", ta, nil), http.StatusNoContent)

	// The stored forms of secrets must not be there either.
	rows, err := srv.DB.Query(ctx, `SELECT password_hash FROM users`)
	testenv.Must(t, err)
	for rows.Next() {
		var h string
		testenv.Must(t, rows.Scan(&h))
		secrets = append(secrets, h, h[strings.LastIndex(h, "$")+1:])
	}
	testenv.Must(t, rows.Err())
	for _, q := range []string{`SELECT hash FROM api_keys`, `SELECT private_key FROM signing_keys`} {
		rows, err := srv.DB.Query(ctx, q)
		testenv.Must(t, err)
		for rows.Next() {
			var b []byte
			testenv.Must(t, rows.Scan(&b))
			secrets = append(secrets, hex.EncodeToString(b), base64.StdEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b))
		}
		testenv.Must(t, rows.Err())
	}

	var dump strings.Builder
	var n int
	rows, err = srv.DB.Query(ctx, `SELECT row_to_json(a)::text FROM audit_log a`)
	testenv.Must(t, err)
	for rows.Next() {
		var line string
		testenv.Must(t, rows.Scan(&line))
		dump.WriteString(line + "\n")
		n++
	}
	testenv.Must(t, rows.Err())
	if n < 10 {
		t.Fatalf("only %d audit entries: the changes above were not all recorded\n%s", n, dump.String())
	}
	res = call(t, "GET", srv.URL+"/api/v1/audit?limit=200", op, nil)
	want(t, res, http.StatusOK)
	for _, s := range secrets {
		if len(s) < 8 {
			t.Fatalf("suspiciously short secret %q", s)
		}
		if strings.Contains(dump.String(), s) {
			t.Errorf("the audit log holds a secret (%s…)", s[:6])
		}
		if strings.Contains(string(res.Body), s) {
			t.Errorf("GET /audit shows a secret (%s…)", s[:6])
		}
	}
	for _, action := range []string{"user.create", "seed.demo", "key.create", "key.rotate", "key.revoke",
		"service_token.create", "user.login", "user.logout", "tenant.create"} {
		if !strings.Contains(dump.String(), `"action":"`+action+`"`) {
			t.Errorf("no %s entry in the audit log", action)
		}
	}
}

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
