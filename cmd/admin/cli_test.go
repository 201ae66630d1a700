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
	var runs []seedResult
	for range 2 {
		out, err := admin(t, url, "seed", "demo", "--json")
		if err != nil {
			t.Fatal(err)
		}
		var r seedResult
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
	if plans != 4 || tenantsN != 3 || keys != 27 { // 7 made with each tenant, 1 a seed
		t.Errorf("after two seeds: %d plans, %d tenants, %d keys; want 4, 3, 27", plans, tenantsN, keys)
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

func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range commands() {
		args := append(strings.Fields(c.name), "--help")
		if _, err := admin(t, "postgres://unused", args...); err != nil {
			t.Errorf("admin %s --help: %v", c.name, err)
		}
	}
	if _, err := admin(t, "postgres://unused", "frobnicate"); err == nil {
		t.Error("unknown command succeeded")
	}
}

func TestMigrateVersionAndSchemaGuard(t *testing.T) {
	url := testenv.DatabaseURL(t)
	out, err := admin(t, url, "migrate", "version")
	if err != nil || !strings.Contains(out, "schema version") {
		t.Fatalf("migrate version: %q %v", out, err)
	}
	if _, err := admin(t, url, "migrate", "down"); err != nil {
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
