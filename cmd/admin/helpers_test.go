package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/testenv"
)

// testJWTSecret signs sessions in tests (32 bytes).
const testJWTSecret = "test-secret-0123456789abcdef0123"

// runAdmin runs the admin CLI through run() and returns its stdout.
func runAdmin(t *testing.T, dbURL, stdin string, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := map[string]string{"TOLLGATE_DATABASE_URL": dbURL, "TOLLGATE_SECRET_KEY": testenv.SecretKey}
	err := run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(stdin), &stdout, &stderr, nil)
	if err != nil {
		t.Logf("admin %s: stderr: %s", strings.Join(args, " "), stderr.String())
	}
	return stdout.String(), err
}

// adminServer is an `admin serve` started through run() on a fresh
// database.
type adminServer struct {
	URL   string
	DBURL string
	DB    *pgxpool.Pool
	// Logs is what the server logged (at TOLLGATE_LOG_LEVEL, warn unless
	// the settings say otherwise).
	Logs *testenv.LogBuffer
}

// startAdmin starts `admin serve` on 127.0.0.1:0 against dbURL with the
// given extra settings, and stops it when the test ends.
func startAdmin(t *testing.T, dbURL string, settings map[string]string) *adminServer {
	t.Helper()
	env := map[string]string{
		"TOLLGATE_DATABASE_URL":      dbURL,
		"TOLLGATE_SECRET_KEY":        testenv.SecretKey,
		"TOLLGATE_ADMIN_ADDR":        "127.0.0.1:0",
		"TOLLGATE_ADMIN_JWT_SECRET":  testJWTSecret,
		"TOLLGATE_ADMIN_LOGIN_LIMIT": "1000",
		"TOLLGATE_LOG_LEVEL":         "warn",
		"TOLLGATE_SERVE_WORKER":      "false",
	}
	for k, v := range settings {
		env[k] = v
	}
	logs := &testenv.LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("admin server log:\n%s", logs.String())
		}
	})
	addr, stop := testenv.Start(t, "admin serve", func(ctx context.Context, ready chan<- string) error {
		return run(ctx, []string{"serve"}, func(k string) string { return env[k] }, strings.NewReader(""), io.Discard, logs, ready)
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("admin serve: %v", err)
		}
	})
	db, err := postgres.Open(context.Background(), dbURL)
	testenv.Must(t, err)
	t.Cleanup(db.Close)
	return &adminServer{URL: "http://" + addr, DBURL: dbURL, DB: db, Logs: logs}
}

// createUser stores a user with a known password.
func createUser(t *testing.T, db *pgxpool.Pool, email string, role auth.Role, tenantID string) auth.User {
	t.Helper()
	u, err := auth.NewStore(db).CreateUser(context.Background(), auth.NewUser{
		Email: email, Password: "password-" + email, Role: role, TenantID: tenantID})
	testenv.Must(t, err)
	return u
}

// sessionFor starts a session for u directly in the store, as a login
// would, and returns its bearer token.
func sessionFor(t *testing.T, db *pgxpool.Pool, u auth.User) string {
	t.Helper()
	token, _, err := auth.NewStore(db).StartSession(context.Background(), u, []byte(testJWTSecret), time.Hour, time.Now())
	testenv.Must(t, err)
	return token
}

// response is an HTTP answer read whole.
type response struct {
	*http.Response
	Body []byte
}

// decode unmarshals the body into v.
func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("%s %s: decoding %q: %v", r.Request.Method, r.Request.URL.Path, r.Body, err)
	}
}

// call sends a request with an optional JSON body and bearer token.
func call(t *testing.T, method, url, token string, body any) response {
	t.Helper()
	return callWith(t, http.DefaultClient, method, url, token, body)
}

// callWith is call through client.
func callWith(t *testing.T, client *http.Client, method, url, token string, body any) response {
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
	return sendWith(t, client, req)
}

func send(t *testing.T, req *http.Request) response {
	t.Helper()
	return sendWith(t, http.DefaultClient, req)
}

func sendWith(t *testing.T, client *http.Client, req *http.Request) response {
	t.Helper()
	res, err := client.Do(req)
	testenv.Must(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	testenv.Must(t, err)
	return response{Response: res, Body: b}
}

// want fails the test unless res has status.
func want(t *testing.T, res response, status int) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("%s %s = %d %s, want %d", res.Request.Method, res.Request.URL.Path, res.StatusCode, res.Body, status)
	}
}
