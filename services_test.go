package tollgate_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
