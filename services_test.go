package tollgate_test

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testenv"
)

// TestEnvPointsAtTheLastRun checks that `make env` (scripts/services.sh
// env) prints the ports the last `make run` kept in .local/ports, that
// the variables still win over them, and that the defaults hold without
// them.
func TestEnvPointsAtTheLastRun(t *testing.T) {
	script, err := filepath.Abs("scripts/services.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	env := func(vars ...string) string {
		t.Helper()
		cmd := exec.Command("bash", script, "env")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TOLLGATE_DEV_PG_PORT=", "TOLLGATE_DEV_REDIS_PORT=")
		cmd.Env = append(cmd.Env, vars...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("services.sh env: %v\n%s", err, out)
		}
		return string(out)
	}
	has := func(out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("services.sh env printed %q, want %q in it", out, w)
			}
		}
	}
	has(env(), "@127.0.0.1:15432/", "TOLLGATE_REDIS_ADDR='127.0.0.1:16379'")
	if err := os.MkdirAll(filepath.Join(dir, ".local"), 0o755); err != nil {
		t.Fatal(err)
	}
	ports := "TOLLGATE_DEV_PG_PORT=25432\nTOLLGATE_DEV_REDIS_PORT=26379\n"
	if err := os.WriteFile(filepath.Join(dir, ".local", "ports"), []byte(ports), 0o644); err != nil {
		t.Fatal(err)
	}
	has(env(), "@127.0.0.1:25432/", "TOLLGATE_REDIS_ADDR='127.0.0.1:26379'")
	has(env("TOLLGATE_DEV_PG_PORT=35432"), "@127.0.0.1:35432/", "TOLLGATE_REDIS_ADDR='127.0.0.1:26379'")
}

// TestEnvPointsPostgresToolsAtTheRun: after `eval "$(make -s env)"`,
// libpq's tools reach the Postgres TOLLGATE_DATABASE_URL names, as the
// README's backup and restore commands need (createdb, pg_restore with a
// database name), and the CLI may make endpoints on the demo's webhook
// receiver, as make run's servers may.
func TestEnvPointsPostgresToolsAtTheRun(t *testing.T) {
	script, err := filepath.Abs("scripts/services.sh")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	db := "tollgate_env_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cmd := exec.Command("bash", "-c", `set -e
eval "$(bash "$0" env)"
createdb "$1"
psql -XtA -d "$1" -c 'SELECT current_user, current_database(), inet_server_port()'
psql -XtA "$TOLLGATE_DATABASE_URL" -c 'SELECT current_user, current_database(), inet_server_port()'
dropdb "$1"
printf '%s
' "$TOLLGATE_WEBHOOK_ALLOW_ADDRS"`, script, db)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "TOLLGATE_DEV_PG_PORT="+u.Port(), "TOLLGATE_DEV_REDIS_PORT=", "TOLLGATE_WEBHOOK_ALLOW_ADDRS=",
		"PGHOST=", "PGPORT=", "PGUSER=", "PGDATABASE=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make env, then createdb, psql, dropdb: %v\n%s", err, out)
	}
	want := "tollgate|" + db + "|" + u.Port() + "\ntollgate|tollgate|" + u.Port() + "\n127.0.0.1:8082\n"
	if string(out) != want {
		t.Errorf("after make env the tools printed\n%s\nwant\n%s", out, want)
	}
}
