// Package clientts_test runs the TypeScript SDK's tests (node --test)
// from `go test`, so that `make test` runs them: the unit tests always,
// and, when the Postgres and Redis of `make test` are there, the
// end-to-end tests against cmd/api and cmd/admin built from this tree and
// seeded with the demo.
package clientts_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestTypeScript installs the development dependencies when node_modules
// is missing (npm ci), compiles the package (tsc) and runs every
// dist/test/*.test.js with node --test; it fails when they fail. Without
// node or npm it skips, except under CI=true, where it fails.
func TestTypeScript(t *testing.T) {
	node, npm := lookTools(t)
	if _, err := os.Stat("node_modules"); errors.Is(err, os.ErrNotExist) {
		run(t, exec.Command(npm, "ci", "--no-audit", "--no-fund"))
	}
	run(t, exec.Command(node, filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", "."))
	tests, err := filepath.Glob(filepath.Join("dist", "test", "*.test.js"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no compiled tests in dist/test (%v)", err)
	}
	cmd := exec.Command(node, append([]string{"--test"}, tests...)...)
	cmd.Env = os.Environ()
	if servers := os.Getenv("TOLLGATE_TEST_DATABASE_URL") != "" && os.Getenv("TOLLGATE_TEST_REDIS_ADDR") != ""; servers {
		cmd.Env = append(cmd.Env, startTollgate(t)...)
	} else {
		t.Log("TOLLGATE_TEST_DATABASE_URL or TOLLGATE_TEST_REDIS_ADDR is unset: the end-to-end tests skip; `make test` sets them")
	}
	out := run(t, cmd)
	t.Logf("node --test:\n%s", summary(out))
	verifyGoSignature(t, node)
}

// verifyGoSignature: verifyWebhook accepts what the admin server's
// deliverer signs (events.Signature, with two secrets as during a
// rotation), and refuses it once the body changes.
func verifyGoSignature(t *testing.T, node string) {
	t.Helper()
	body := []byte(`{"id":"evt_0000000000000000000000000","type":"key.revoked","created_at":"2026-03-01T12:00:00Z","tenant_id":null,"data":{"key_id":"k","note":"é ✓"}}`)
	at := time.Now()
	oldSecret, secret := events.NewSecret(), events.NewSecret()
	sig, err := events.Signature("evt_0000000000000000000000000", at, body, secret, oldSecret)
	testenv.Must(t, err)
	input, err := json.Marshal(map[string]any{"secret": secret, "old": oldSecret, "body": string(body), "headers": map[string]string{
		"webhook-id": "evt_0000000000000000000000000", "webhook-timestamp": fmt.Sprint(at.Unix()), "webhook-signature": sig}})
	testenv.Must(t, err)
	script := `import { verifyWebhook } from "./dist/src/index.js";
const input = JSON.parse(process.argv[1]);
for (const s of [input.secret, input.old]) verifyWebhook(s, input.headers, Buffer.from(input.body, "utf8"));
let refused = false;
try { verifyWebhook(input.secret, input.headers, input.body + " "); } catch { refused = true; }
if (!refused) throw new Error("a changed body verified");
console.log("verified");`
	out := run(t, exec.Command(node, "--input-type=module", "-e", script, string(input)))
	if !strings.Contains(string(out), "verified") {
		t.Errorf("verifyWebhook on the Go sender's signature: %s", out)
	}
}

// lookTools returns the paths of node and npm.
func lookTools(t *testing.T) (node, npm string) {
	t.Helper()
	var missing []string
	node, err := exec.LookPath("node")
	if err != nil {
		missing = append(missing, "node")
	}
	if npm, err = exec.LookPath("npm"); err != nil {
		missing = append(missing, "npm")
	}
	if len(missing) > 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the TypeScript SDK's tests need %s, not found on PATH (CI=true)", strings.Join(missing, " and "))
		}
		t.Skipf("the TypeScript SDK's tests are skipped: %s not found on PATH", strings.Join(missing, " and "))
	}
	return node, npm
}

// run runs cmd in this directory and returns its output; the test fails
// with the output when cmd fails.
func run(t *testing.T, cmd *exec.Cmd) []byte {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return out
}

// summary returns the closing counts of a node --test report.
func summary(out []byte) string {
	var lines []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "# ") && !strings.HasPrefix(line, "# Subtest") {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}

// startTollgate builds cmd/api and cmd/admin, seeds the demo in a fresh
// database (`admin seed demo --json --usage=false`), starts both servers
// on free ports, and returns the environment that tells the end-to-end
// tests where they are and what the seed made.
func startTollgate(t *testing.T) []string {
	t.Helper()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator),
		"github.com/tollgate/tollgate/cmd/api", "github.com/tollgate/tollgate/cmd/admin")
	run(t, build)
	dbURL := testenv.DatabaseURL(t)
	_, prefix := testenv.Redis(t)

	seed := run(t, tollgateCommand(filepath.Join(bin, "admin"), []string{"seed", "demo", "--json", "--usage=false"},
		"TOLLGATE_DATABASE_URL="+dbURL))
	var parsed struct {
		ServiceToken string `json:"service_token"`
	}
	if err := json.Unmarshal(seed, &parsed); err != nil || parsed.ServiceToken == "" {
		t.Fatalf("admin seed demo --json printed %q (%v)", seed, err)
	}
	api := serveUntilListening(t, tollgateCommand(filepath.Join(bin, "api"), nil,
		"TOLLGATE_API_ADDR=127.0.0.1:0", "TOLLGATE_DATABASE_URL="+dbURL, "TOLLGATE_REDIS_ADDR="+testenv.RedisAddr(t),
		"TOLLGATE_KEY_PREFIX="+prefix), "api listening")
	admin := serveUntilListening(t, tollgateCommand(filepath.Join(bin, "admin"), []string{"serve"},
		"TOLLGATE_ADMIN_ADDR=127.0.0.1:0", "TOLLGATE_DATABASE_URL="+dbURL, "TOLLGATE_KEY_PREFIX="+prefix,
		"TOLLGATE_SERVE_WORKER=false"), "admin listening")
	return []string{
		"TOLLGATE_E2E_API_URL=http://" + api,
		"TOLLGATE_E2E_ADMIN_URL=http://" + admin,
		"TOLLGATE_E2E_SEED=" + string(seed),
	}
}

// tollgateCommand returns a command running path with args and the
// environment of the test less its TOLLGATE_* settings, plus the test's
// secret key, JSON logs, and settings.
func tollgateCommand(path string, args []string, settings ...string) *exec.Cmd {
	cmd := exec.Command(path, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOLLGATE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "TOLLGATE_SECRET_KEY="+testenv.SecretKey, "TOLLGATE_LOG_FORMAT=json", "TOLLGATE_LOG_LEVEL=info")
	cmd.Env = append(cmd.Env, settings...)
	return cmd
}

// serveUntilListening starts a server and returns the address of its log
// line whose msg is listening. The server gets SIGTERM when the test ends;
// its log is shown if the test failed or the server did not stop cleanly.
func serveUntilListening(t *testing.T, cmd *exec.Cmd, listening string) string {
	t.Helper()
	name := filepath.Base(cmd.Path)
	reader, writer, err := os.Pipe()
	testenv.Must(t, err)
	cmd.Stdout, cmd.Stderr = writer, writer
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	writer.Close() // the child holds its own copy
	log := &testenv.LogBuffer{}
	addrs := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		lines := bufio.NewScanner(reader)
		for lines.Scan() {
			fmt.Fprintln(log, lines.Text())
			var entry struct{ Msg, Addr string }
			if json.Unmarshal(lines.Bytes(), &entry) == nil && entry.Msg == listening && entry.Addr != "" {
				addrs <- entry.Addr
			}
		}
		_, _ = io.Copy(io.Discard, reader)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		stopped := make(chan error, 1)
		go func() { stopped <- cmd.Wait() }()
		select {
		case err = <-stopped:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			err = fmt.Errorf("no exit within 15s of SIGTERM: %w", <-stopped)
		}
		<-scanned
		reader.Close()
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if err != nil || t.Failed() {
			t.Logf("%s log:\n%s", name, log.String())
		}
	})
	select {
	case addr := <-addrs:
		return addr
	case <-scanned:
		t.Fatalf("%s stopped before listening:\n%s", name, log.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not listen within 30s:\n%s", name, log.String())
	}
	return ""
}
