// Package admintest runs Tollgate's programs for the tests of the admin
// CLI (cmd/admin) and of the web console (internal/ui): the admin server
// and the check API built and started as processes on the test's database
// and Redis, users and sessions made in the store, and HTTP answers read
// whole.
package admintest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/testenv"
)

// JWTSecret signs the admin server's sessions in tests (32 bytes).
const JWTSecret = "test-secret-0123456789abcdef0123"

// The programs are other main packages: tests build each once per test
// binary and start it as a process.
var builds struct {
	sync.Mutex
	dir   string
	paths map[string]string
}

// Binary returns the path of a freshly built program, such as
// "cmd/api". Call Cleanup from TestMain to remove the builds.
func Binary(t testing.TB, program string) string {
	t.Helper()
	builds.Lock()
	defer builds.Unlock()
	if p, ok := builds.paths[program]; ok {
		return p
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "tollgate-programs-")
		testenv.Must(t, err)
		builds.dir, builds.paths = dir, map[string]string{}
	}
	path := filepath.Join(builds.dir, filepath.Base(program))
	out, err := exec.Command("go", "build", "-o", path, "github.com/tollgate/tollgate/"+program).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", program, err, out)
	}
	builds.paths[program] = path
	return path
}

// Cleanup removes the programs Binary built.
func Cleanup() {
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
}

// Main runs the tests of a package that starts programs Binary builds,
// removes those programs, and exits with the tests' status: the package's
// TestMain calls it.
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// startProcess runs bin with args and env until the test ends (SIGTERM,
// then SIGKILL after 15 s), and returns once base+"/readyz" answers 200.
// A program that does not exit with status 0 on SIGTERM fails the test.
func startProcess(t testing.TB, name, bin string, args, env []string, base string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var p *testenv.Process
	t.Cleanup(func() { // after StartProcess's own, which stops it
		if p != nil && p.Err() != nil {
			t.Errorf("%s exited with %v", name, p.Err())
		}
	})
	p = testenv.StartProcess(t, name, cmd, syscall.SIGTERM, 15*time.Second, nil)
	testenv.Eventually(t, time.Now(), 30*time.Second, name+" ready", func() (bool, string) {
		if res, err := http.Get(base + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return true, ""
			}
		}
		select {
		case <-p.Exited():
			t.Fatalf("%s exited before it was ready: %v\n%s", name, p.Err(), p.Output())
		default:
		}
		return false, "\n" + p.Output()
	})
}

// StartCheckAPI runs cmd/api against dbURL and the test Redis (under a
// key prefix of the test's own) until the test ends, with more settings
// ("NAME=value", replacing those of the same name), and returns its base
// URL once it is ready.
func StartCheckAPI(t testing.TB, dbURL string, settings []string) string {
	t.Helper()
	_, prefix := testenv.Redis(t)
	addr := testenv.FreeAddr(t)
	env := append([]string{
		"TOLLGATE_DATABASE_URL=" + dbURL,
		"TOLLGATE_REDIS_ADDR=" + testenv.RedisAddr(t),
		"TOLLGATE_KEY_PREFIX=" + prefix,
		"TOLLGATE_API_ADDR=" + addr,
		"TOLLGATE_LOG_LEVEL=warn",
		"TOLLGATE_LAST_USED_FLUSH=100ms",
	}, settings...)
	startProcess(t, "api", Binary(t, "cmd/api"), nil, env, "http://"+addr)
	return "http://" + addr
}

// Server is an admin server a test started.
type Server struct {
	URL   string
	DBURL string
	DB    *pgxpool.Pool
}

// Settings are the admin programs' settings for tests on dbURL, and then
// those of each of more in turn.
func Settings(dbURL string, more ...map[string]string) map[string]string {
	env := map[string]string{
		"TOLLGATE_DATABASE_URL":      dbURL,
		"TOLLGATE_SECRET_KEY":        testenv.SecretKey,
		"TOLLGATE_ADMIN_JWT_SECRET":  JWTSecret,
		"TOLLGATE_ADMIN_LOGIN_LIMIT": "1000",
		"TOLLGATE_LOG_LEVEL":         "warn",
		"TOLLGATE_SERVE_WORKER":      "false",
		// The tests' receivers listen on loopback.
		"TOLLGATE_WEBHOOK_ALLOW_PRIVATE": "true",
	}
	for _, m := range more {
		for k, v := range m {
			env[k] = v
		}
	}
	return env
}

// environ is env as a process's environment.
func environ(env map[string]string) []string {
	var out []string
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// StartAdmin runs `admin serve` (cmd/admin) against dbURL with the given
// extra settings until the test ends, and returns it once it is ready.
func StartAdmin(t testing.TB, dbURL string, settings map[string]string) *Server {
	t.Helper()
	addr := testenv.FreeAddr(t)
	env := environ(Settings(dbURL, settings, map[string]string{"TOLLGATE_ADMIN_ADDR": addr}))
	startProcess(t, "admin serve", Binary(t, "cmd/admin"), []string{"serve"}, env, "http://"+addr)
	db, err := postgres.Open(context.Background(), dbURL)
	testenv.Must(t, err)
	t.Cleanup(db.Close)
	return &Server{URL: "http://" + addr, DBURL: dbURL, DB: db}
}

// RunAdmin runs the admin CLI (cmd/admin) with args against dbURL and
// returns its stdout.
func RunAdmin(t testing.TB, dbURL string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(Binary(t, "cmd/admin"), args...)
	cmd.Env = environ(Settings(dbURL))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		t.Logf("admin %s: stderr: %s", strings.Join(args, " "), stderr.String())
	}
	return stdout.String(), err
}

// CreateUser stores a user whose password is "password-" + email.
func CreateUser(t testing.TB, db *pgxpool.Pool, email string, role auth.Role, tenantID string) auth.User {
	t.Helper()
	u, err := auth.NewStore(db).CreateUser(context.Background(), auth.NewUser{
		Email: email, Password: "password-" + email, Role: role, TenantID: tenantID})
	testenv.Must(t, err)
	return u
}

// SessionFor starts a session for u directly in the store, as a login
// would, and returns its bearer token (signed with JWTSecret).
func SessionFor(t testing.TB, db *pgxpool.Pool, u auth.User) string {
	t.Helper()
	token, _, err := auth.NewStore(db).StartSession(context.Background(), u, []byte(JWTSecret), time.Hour, time.Now())
	testenv.Must(t, err)
	return token
}

// Response is an HTTP answer read whole.
type Response struct {
	*http.Response
	Body []byte
}

// Decode unmarshals the body into v.
func (r Response) Decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("%s %s: decoding %q: %v", r.Request.Method, r.Request.URL.Path, r.Body, err)
	}
}

// Call sends a request with an optional JSON body and bearer token.
func Call(t testing.TB, method, url, token string, body any) Response {
	t.Helper()
	return CallWith(t, http.DefaultClient, method, url, token, body)
}

// CallWith is Call through client.
func CallWith(t testing.TB, client *http.Client, method, url, token string, body any) Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		testenv.Must(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	testenv.Must(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return SendWith(t, client, req)
}

// SendWith sends req through client and reads the answer.
func SendWith(t testing.TB, client *http.Client, req *http.Request) Response {
	t.Helper()
	res, err := client.Do(req)
	testenv.Must(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	testenv.Must(t, err)
	return Response{Response: res, Body: b}
}

// Want fails the test unless res has status.
func Want(t testing.TB, res Response, status int) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("%s %s = %d %s, want %d", res.Request.Method, res.Request.URL.Path, res.StatusCode, res.Body, status)
	}
}

// CheckClient asks the check API at URL about one key, with the service
// token Token.
type CheckClient struct {
	URL, Token string
}

// Check asks about key on "GET /repos" without counting it (dry run).
func (c CheckClient) Check(t testing.TB, key string) (int, enforce.Decision) {
	t.Helper()
	res := Call(t, "POST", c.URL+"/v1/check", c.Token, map[string]any{"key": key, "resource": "GET /repos", "dry_run": true})
	var d enforce.Decision
	if res.StatusCode == http.StatusOK {
		res.Decode(t, &d)
	}
	return res.StatusCode, d
}

// PropagationLimit is how soon an admin change must reach a running check
// API.
const PropagationLimit = time.Second

// Eventually polls until ok holds, and fails the test if that takes
// longer than PropagationLimit from since. ok returns whether it holds
// and, for the failure message, what it saw.
func Eventually(t testing.TB, since time.Time, what string, ok func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, since, PropagationLimit, what, ok)
	t.Logf("%s after %v", what, time.Since(since).Round(time.Millisecond))
}
