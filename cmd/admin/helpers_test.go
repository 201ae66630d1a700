package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
)

// testJWTSecret signs sessions in tests (32 bytes).
const testJWTSecret = admintest.JWTSecret

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
	env := admintest.Settings(dbURL, map[string]string{"TOLLGATE_ADMIN_ADDR": "127.0.0.1:0"}, settings)
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

// The helpers shared with the console's tests (internal/ui).
var (
	createUser = admintest.CreateUser
	sessionFor = admintest.SessionFor
	call       = admintest.Call
	callWith   = admintest.CallWith
	sendWith   = admintest.SendWith
	want       = admintest.Want
)

// response is an HTTP answer read whole.
type response = admintest.Response

func send(t *testing.T, req *http.Request) response {
	t.Helper()
	return sendWith(t, http.DefaultClient, req)
}
