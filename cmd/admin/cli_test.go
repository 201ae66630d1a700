package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/buildinfo"
	"github.com/tollgate/tollgate/internal/demo"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// admin runs the CLI against dbURL and returns stdout.
func admin(t *testing.T, dbURL string, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, func(k string) string {
		switch k {
		case "TOLLGATE_DATABASE_URL":
			return dbURL
		case "TOLLGATE_SECRET_KEY":
			return testenv.SecretKey
		}
		return ""
	}, strings.NewReader(""), &stdout, &stderr, nil)
	return stdout.String(), err
}

func TestSeedDemoIsIdempotentAndIssuesFreshSecrets(t *testing.T) {
	url := testenv.DatabaseURL(t)
	var runs []demo.Result
	for range 2 {
		out, err := admin(t, url, "seed", "demo", "--json")
		if err != nil {
			t.Fatal(err)
		}
		var r demo.Result
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("seed --json output %q: %v", out, err)
		}
		for _, tier := range []string{"free", "pro", "enterprise"} {
			if !tenants.WellFormed(r.Keys[tier]) {
				t.Errorf("key for %s = %q, not a well-formed key", tier, r.Keys[tier])
			}
		}
		if strings.Count(r.ServiceToken, ".") != 2 {
			t.Errorf("service token %q is not a JWT", r.ServiceToken)
		}
		runs = append(runs, r)
	}
	if runs[0].Keys["pro"] == runs[1].Keys["pro"] || runs[0].ServiceToken == runs[1].ServiceToken {
		t.Error("second seed reused secrets; want fresh ones")
	}
	// A month of demo usage, once: the second seed adds at most the hour
	// that began in between.
	if runs[0].UsageHours < 3*30*24 || runs[1].UsageHours > 3 {
		t.Errorf("demo usage: %d tenant-hours, then %d more; want a month, then none", runs[0].UsageHours, runs[1].UsageHours)
	}
	pool := openPool(t, url)
	var plans, tenantsN, keys int
	testenv.Must(t, pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM plans),
		(SELECT count(*) FROM tenants), (SELECT count(*) FROM api_keys)`).Scan(&plans, &tenantsN, &keys))
	// The tiers' plans, llm (no demo tenant) and prepaid; 7 keys made with
	// each tier's tenant, 1 a seed; the prepaid tenant 1 a seed.
	if plans != 6 || tenantsN != 4 || keys != 29 {
		t.Errorf("after two seeds: %d plans, %d tenants, %d keys; want 6, 4, 29", plans, tenantsN, keys)
	}
	// Thresholds on the paid plans, and endpoints without a receiver
	// (an operator's, the admin tenant's), their secrets sealed.
	var thresholds, endpoints, sealed int
	testenv.Must(t, pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM quota_plan_settings q JOIN plans p ON p.id = q.plan_id
			WHERE p.name IN ('pro', 'enterprise') AND jsonb_array_length(q.thresholds) > 0),
		(SELECT count(*) FROM webhook_endpoints), (SELECT count(*) FROM webhook_endpoints WHERE secret LIKE 'sealed:%')`).
		Scan(&thresholds, &endpoints, &sealed))
	if thresholds != 2 || endpoints != 2 || sealed != 2 {
		t.Errorf("after two seeds: %d plans with thresholds, %d endpoints (%d sealed); want 2, 2, 2", thresholds, endpoints, sealed)
	}
}

func TestKeysAndTokensCommands(t *testing.T) {
	url := testenv.DatabaseURL(t)
	if _, err := admin(t, url, "seed", "demo"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin(t, url, "tenants", "create", "--name", "acme", "--plan", "pro"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin(t, url, "tenants", "create", "--name", "acme", "--plan", "pro"); err == nil {
		t.Error("creating a tenant twice succeeded; want a conflict")
	}
	if _, err := admin(t, url, "tenants", "create", "--name", "x", "--plan", "platinum"); err == nil || !strings.Contains(err.Error(), "--plan") {
		t.Errorf("unknown plan: %v, want an error naming --plan", err)
	}
	out, err := admin(t, url, "keys", "issue", "--tenant", "acme", "--count", "3")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(out)
	if len(lines) != 3 {
		t.Fatalf("--count 3 printed %d secrets", len(lines))
	}
	for _, l := range lines {
		if !tenants.WellFormed(l) {
			t.Errorf("%q is not a well-formed key", l)
		}
	}
	// Only the SHA-256 and a short display prefix are stored.
	pool := openPool(t, url)
	var hashed, leaked int
	testenv.Must(t, pool.QueryRow(context.Background(), `SELECT
		count(*) FILTER (WHERE hash = sha256(convert_to($1, 'UTF8'))),
		count(*) FILTER (WHERE position($1 in prefix || name || metadata::text) > 0)
		FROM api_keys`, lines[0]).Scan(&hashed, &leaked))
	if hashed != 1 || leaked != 0 {
		t.Errorf("keys matching the secret's SHA-256: %d (want 1); rows containing the secret: %d (want 0)", hashed, leaked)
	}
	tok, err := admin(t, url, "tokens", "issue", "--name", "edge")
	if err != nil || strings.Count(tok, ".") != 2 {
		t.Errorf("tokens issue: %q, %v", tok, err)
	}
}

// TestEveryCommandHasHelp runs --help (and -h) of every command and of
// every group of commands ("keys", "users sessions"), without a database:
// each answers on stdout with a usage line naming it, and a flags section
// only when there are flags to list.
func TestEveryCommandHasHelp(t *testing.T) {
	help := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, func(string) string { return "postgres://unused" },
			strings.NewReader(""), &stdout, &stderr, nil)
		if err != nil {
			t.Errorf("admin %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return stdout.String()
	}
	groups := map[string][]string{}
	for _, c := range commands() {
		words := strings.Fields(c.name)
		for n := 1; n < len(words); n++ {
			g := strings.Join(words[:n], " ")
			groups[g] = append(groups[g], c.name)
		}
		for _, flag := range []string{"--help", "-h"} {
			out := help(append(words, flag)...)
			if !strings.HasPrefix(out, "usage: admin "+c.name) || !strings.Contains(out, c.summary) {
				t.Errorf("admin %s %s:\n%s\nwant the usage line and the summary", c.name, flag, out)
			}
			if _, flags, ok := strings.Cut(out, "\nflags:\n"); ok && !strings.HasPrefix(flags, "  -") {
				t.Errorf("admin %s %s: an empty flags section:\n%s", c.name, flag, out)
			}
		}
	}
	for g, members := range groups {
		for _, args := range [][]string{append(strings.Fields(g), "--help"), append([]string{"help"}, strings.Fields(g)...)} {
			out := help(args...)
			for _, m := range members {
				if !strings.Contains(out, "  "+m+" ") {
					t.Errorf("admin %s: does not list %q:\n%s", strings.Join(args, " "), m, out)
				}
			}
		}
		if _, err := admin(t, "postgres://unused", strings.Fields(g)...); err == nil || !strings.Contains(err.Error(), "want a subcommand") {
			t.Errorf("admin %s: %v, want an error asking for a subcommand", g, err)
		}
	}
	if len(groups) < 5 {
		t.Errorf("found %d command groups; want keys, tenants, tokens, users, users sessions, …", len(groups))
	}
	all := help("--help")
	for _, c := range commands() {
		if !strings.Contains(all, "  "+c.name+" ") {
			t.Errorf("admin --help does not list %q", c.name)
		}
	}
	if out := help("help", "keys", "issue"); !strings.HasPrefix(out, "usage: admin keys issue [flags]") {
		t.Errorf("admin help keys issue:\n%s", out)
	}
	// Help after an argument still explains rather than runs (the
	// database here is unreachable).
	if out := help("migrate", "up", "--help"); !strings.HasPrefix(out, "usage: admin migrate up | down") {
		t.Errorf("admin migrate up --help:\n%s", out)
	}
	if out := help("--version"); !strings.HasPrefix(out, "admin "+buildinfo.Version+" (revision ") {
		t.Errorf("admin --version = %q", out)
	}
	for _, args := range [][]string{{"frobnicate"}, {"keys", "frobnicate"}, {"keys", "issue", "--frob"}, {}} {
		if _, err := admin(t, "postgres://unused", args...); err == nil {
			t.Errorf("admin %s succeeded", strings.Join(args, " "))
		}
	}
}

// TestListCommands lists tenants, keys, plans and service tokens as
// tables and as JSON, and revokes a key and a token.
func TestListCommands(t *testing.T) {
	url := testenv.DatabaseURL(t)
	if _, err := admin(t, url, "seed", "demo", "--usage=false"); err != nil { // one key per tenant
		t.Fatal(err)
	}
	jsonOf := func(v any, args ...string) {
		t.Helper()
		out, err := admin(t, url, append(args, "--json")...)
		if err != nil {
			t.Fatalf("admin %s --json: %v", strings.Join(args, " "), err)
		}
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("admin %s --json: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	table := func(args ...string) []string {
		t.Helper()
		out, err := admin(t, url, args...)
		if err != nil {
			t.Fatalf("admin %s: %v", strings.Join(args, " "), err)
		}
		return strings.Split(strings.TrimSpace(out), "\n")
	}

	var ts []tenants.Tenant
	jsonOf(&ts, "tenants", "list")
	if len(ts) != 4 || ts[0].Name != "demo-enterprise" || ts[3].Name != "demo-pro" {
		t.Errorf("tenants list --json: %+v", ts)
	}
	if rows := table("tenants", "list"); len(rows) != 5 || !strings.HasPrefix(rows[0], "ID ") ||
		!strings.Contains(rows[4], "demo-pro") || !strings.Contains(rows[4], " pro ") || !strings.Contains(rows[4], "active") {
		t.Errorf("tenants list:\n%s", strings.Join(rows, "\n"))
	}

	var ps []plans.Plan
	jsonOf(&ps, "plans", "list")
	if len(ps) != 6 || ps[0].Name != "anonymous" || len(ps[2].Rules) == 0 {
		t.Errorf("plans list --json: %+v", ps)
	}
	if rows := table("plans", "list"); len(rows) != 7 || !strings.Contains(rows[6], " pro ") || !strings.Contains(rows[6], "hourly,search") ||
		!strings.Contains(rows[4], " llm ") || !strings.Contains(rows[4], "tokens,inflight,hourly") {
		t.Errorf("plans list:\n%s", strings.Join(rows, "\n"))
	}

	var keys []tenants.Key
	jsonOf(&keys, "keys", "list")
	if len(keys) != 4 {
		t.Errorf("keys list --json: %d keys, want 4", len(keys))
	}
	jsonOf(&keys, "keys", "list", "--tenant", "demo-pro")
	if len(keys) != 1 {
		t.Fatalf("keys list --tenant demo-pro --json: %+v", keys)
	}
	out, err := admin(t, url, "keys", "revoke", "--id", keys[0].ID)
	if err != nil || !strings.Contains(out, "key "+keys[0].ID+" ("+keys[0].Prefix+"…) revoked at ") {
		t.Errorf("keys revoke: %q, %v", out, err)
	}
	if rows := table("keys", "list", "--tenant", "demo-pro"); len(rows) != 2 || !strings.Contains(rows[1], "revoked") ||
		!strings.Contains(rows[1], "demo-pro") {
		t.Errorf("keys list after revoke:\n%s", strings.Join(rows, "\n"))
	}
	if _, err := admin(t, url, "keys", "list", "--tenant", "nobody"); err == nil || !strings.Contains(err.Error(), "--tenant") {
		t.Errorf("keys list --tenant nobody: %v, want an error naming --tenant", err)
	}
	jsonOf(&keys, "keys", "list", "--tenant", "demo-free")
	if len(keys) != 1 || keys[0].RevokedAt != nil {
		t.Errorf("demo-free's keys: %+v", keys)
	}

	if _, err := admin(t, url, "tokens", "issue", "--name", "edge"); err != nil {
		t.Fatal(err)
	}
	var toks []auth.ServiceToken
	jsonOf(&toks, "tokens", "list")
	var edge auth.ServiceToken
	for _, st := range toks {
		if st.Name == "edge" {
			edge = st
		}
	}
	if len(toks) != 2 || edge.ID == "" || edge.RevokedAt != nil {
		t.Fatalf("tokens list --json: %+v", toks)
	}
	var revoked auth.ServiceToken
	jsonOf(&revoked, "tokens", "revoke", "--id", edge.ID)
	if revoked.ID != edge.ID || revoked.RevokedAt == nil {
		t.Errorf("tokens revoke --json: %+v", revoked)
	}
	rows := table("tokens", "list")
	if len(rows) != 3 {
		t.Errorf("tokens list:\n%s", strings.Join(rows, "\n"))
	}
	for _, r := range rows[1:] {
		if strings.Contains(r, "edge") != strings.Contains(r, "revoked") || strings.Contains(r, "demo-gateway") != strings.Contains(r, "active") {
			t.Errorf("tokens list: row %q", r)
		}
	}
	if _, err := admin(t, url, "tokens", "revoke"); err == nil || !strings.Contains(err.Error(), "--id") {
		t.Errorf("tokens revoke without --id: %v", err)
	}
	pool := openPool(t, url)
	var audited int
	testenv.Must(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_log
		WHERE action IN ('key.revoke', 'service_token.revoke')`).Scan(&audited))
	if audited != 2 {
		t.Errorf("audit records of the revocations: %d, want 2", audited)
	}

	// An empty list is an empty JSON array, not null.
	empty := testenv.DatabaseURL(t)
	if out, err := admin(t, empty, "tenants", "list", "--json"); err != nil || strings.TrimSpace(out) != "[]" {
		t.Errorf("tenants list --json on an empty database: %q, %v", out, err)
	}
}

func TestMigrateVersionAndSchemaGuard(t *testing.T) {
	url := testenv.DatabaseURL(t)
	out, err := admin(t, url, "migrate", "version")
	if err != nil || !strings.Contains(out, "schema version") {
		t.Fatalf("migrate version: %q %v", out, err)
	}
	// A bare `migrate down` would drop everything: it is refused, and
	// changes nothing.
	if _, err := admin(t, url, "migrate", "down"); err == nil || !strings.Contains(err.Error(), "migrate down all") {
		t.Errorf("migrate down without N: %v, want a refusal naming migrate down all", err)
	}
	if out, err := admin(t, url, "migrate", "version"); err != nil || !strings.Contains(out, fmt.Sprintf("schema version %d ", postgres.SchemaVersion())) {
		t.Errorf("migrate version after a refused down: %q %v, want the schema untouched", out, err)
	}
	if _, err := admin(t, url, "migrate", "down", "all"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin(t, url, "seed", "demo"); err == nil || !strings.Contains(err.Error(), "migrate up") {
		t.Errorf("seed on an unmigrated database: %v, want advice to run migrate up", err)
	}
	if _, err := admin(t, url, "migrate", "up"); err != nil {
		t.Fatal(err)
	}

	// A migration that failed half-way leaves the schema dirty: binaries
	// refuse it and say how to repair; `migrate force` records the
	// version the schema matches once it was finished or undone by hand
	// (here: finished).
	want := postgres.SchemaVersion()
	pool := openPool(t, url)
	_, err = pool.Exec(context.Background(), `UPDATE schema_migrations SET dirty = true`)
	testenv.Must(t, err)
	_, err = admin(t, url, "seed", "demo")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("migrate force %d", want)) || !strings.Contains(err.Error(), fmt.Sprintf("migrate force %d", want-1)) {
		t.Errorf("seed on a dirty schema: %v, want advice to run migrate force %d or %d", err, want, want-1)
	}
	if _, err := admin(t, url, "migrate", "force", "-1"); err == nil {
		t.Error("migrate force -1 succeeded")
	}
	if _, err := admin(t, url, "migrate", "force", fmt.Sprint(want)); err != nil {
		t.Fatal(err)
	}
	if out, err := admin(t, url, "migrate", "version"); err != nil || !strings.Contains(out, fmt.Sprintf("schema version %d (dirty=false)", want)) {
		t.Errorf("after force: %q %v", out, err)
	}
}

func openPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	testenv.Must(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestSecretKeyCommands: secrets generate prints a usable key; serve,
// tokens issue and seed refuse to run without one, naming the setting.
func TestSecretKeyCommands(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"secrets", "generate"}, func(string) string { return "" },
		strings.NewReader(""), &out, io.Discard, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.ParseSecretKeys(strings.TrimSpace(out.String())); err != nil {
		t.Errorf("generated key %q: %v", out.String(), err)
	}
	url := testenv.DatabaseURL(t)
	for _, args := range [][]string{{"serve"}, {"tokens", "issue", "--name", "x"}, {"seed", "demo"}} {
		env := map[string]string{"TOLLGATE_DATABASE_URL": url, "TOLLGATE_ADMIN_ADDR": "127.0.0.1:0"}
		err := run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(""), io.Discard, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), "TOLLGATE_SECRET_KEY") {
			t.Errorf("admin %s without a secret key: %v, want a refusal naming TOLLGATE_SECRET_KEY", strings.Join(args, " "), err)
		}
	}
	if out, err := admin(t, url, "secrets", "reseal"); err != nil || !strings.Contains(out, "resealed") {
		t.Errorf("secrets reseal: %q %v", out, err)
	}
}
