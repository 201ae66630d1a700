package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/buildinfo"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/testenv"
)

func TestServerConfig(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

	c, err := loadServerConfig(env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.JWTSecretGenerated || len(c.JWTSecret) != 32 || c.LoginPerMinute != 5 || c.Redis.Configured() {
		t.Errorf("defaults = %+v", c)
	}
	for name, value := range map[string]string{
		"TOLLGATE_ADMIN_JWT_SECRET":  "too short",
		"TOLLGATE_ADMIN_LOGIN_LIMIT": "0",
		"TOLLGATE_ADMIN_SESSION_TTL": "9999h",
		"TOLLGATE_KEY_PREFIX":        "{x}",
		"TOLLGATE_TRUSTED_PROXIES":   "10.0.0.0/99",
	} {
		_, err := loadServerConfig(env(map[string]string{name: value}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: err = %v, want one naming the setting", name, value, err)
		}
	}
	c, err = loadServerConfig(env(map[string]string{"TOLLGATE_ADMIN_JWT_SECRET": testJWTSecret}), io.Discard)
	if err != nil || c.JWTSecretGenerated || string(c.JWTSecret) != testJWTSecret {
		t.Errorf("a given secret: %+v, %v", c, err)
	}
}

// TestAdminMetricsAndHealthcheck: admin serve's /metrics has the build,
// the usage worker's counters and the stream's backlog; `admin
// healthcheck` answers 0 while the server runs.
func TestAdminMetricsAndHealthcheck(t *testing.T) {
	url := testenv.DatabaseURL(t)
	client, prefix := testenv.Redis(t)
	srv := startAdmin(t, url, map[string]string{
		"TOLLGATE_SERVE_WORKER": "true", "TOLLGATE_REDIS_ADDR": testenv.RedisAddr(t),
		"TOLLGATE_USAGE_STREAM": prefix + "usage", "TOLLGATE_USAGE_CONSUMER": "metrics-test",
	})
	ctx := context.Background()
	b := metering.Batch{Version: 1, ID: "metrics:1", Rows: []metering.Row{{
		Minute: time.Now().Unix() / 60 * 60, Tier: "anonymous", Resource: "*", Reason: "ok",
		Counts: metering.Counts{Allowed: 2, AllowedUnits: 2},
	}}}
	testenv.Must(t, metering.NewRedisProducer(client, prefix+"usage").Publish(ctx, b))

	var body string
	// Applied, then acknowledged (and so deleted from the stream).
	testenv.Eventually(t, time.Now(), 30*time.Second, "the batch applied", func() (bool, string) {
		res := call(t, "GET", srv.URL+"/metrics", "", nil)
		want(t, res, http.StatusOK)
		body = string(res.Body)
		return strings.Contains(body, "tollgate_usage_batches_applied_total 1\n") &&
			strings.Contains(body, "tollgate_usage_backlog_batches 0\n"), "/metrics:\n" + body
	})
	for _, m := range []string{
		`tollgate_build_info{go_version="` + runtime.Version() + `",revision="`, `",version="` + buildinfo.Version + `"} 1`,
		"tollgate_usage_worker_errors_total 0\n", "tollgate_usage_backlog_age_seconds 0\n", "go_goroutines ",
	} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}

	addr := strings.TrimPrefix(srv.URL, "http://")
	getenv := func(k string) string { return map[string]string{"TOLLGATE_ADMIN_ADDR": addr}[k] }
	if err := run(ctx, []string{"healthcheck"}, getenv, strings.NewReader(""), io.Discard, io.Discard, nil); err != nil {
		t.Errorf("admin healthcheck of a running server: %v", err)
	}
	getenv = func(k string) string { return map[string]string{"TOLLGATE_ADMIN_ADDR": "127.0.0.1:1"}[k] }
	if err := run(ctx, []string{"healthcheck"}, getenv, strings.NewReader(""), io.Discard, io.Discard, nil); err == nil {
		t.Error("admin healthcheck of a port nobody listens on succeeded")
	}
}

// TestServeMetrics: with TOLLGATE_ADMIN_METRICS_ADDR the admin server
// exports the usage worker's metrics, backlog included, on that address.
func TestServeMetrics(t *testing.T) {
	addr := testenv.FreeAddr(t)
	_, prefix := testenv.Redis(t)
	startAdmin(t, testenv.DatabaseURL(t), map[string]string{
		"TOLLGATE_ADMIN_METRICS_ADDR": addr, "TOLLGATE_SERVE_WORKER": "true",
		"TOLLGATE_REDIS_ADDR": testenv.RedisAddr(t), "TOLLGATE_USAGE_STREAM": prefix + "usage",
	})
	res, err := http.Get("http://" + addr + "/metrics")
	testenv.Must(t, err)
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	for _, want := range []string{"tollgate_usage_backlog_batches 0", "tollgate_usage_backlog_age_seconds 0",
		"tollgate_usage_batches_applied_total", "process_resident_memory_bytes"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestReadyzChecksTheSchema: an admin server whose schema is migrated
// down under it (its background work then fails on every query) answers
// /readyz 503 saying what to run, and 200 again once the schema is back.
func TestReadyzChecksTheSchema(t *testing.T) {
	srv := startAdmin(t, testenv.DatabaseURL(t), nil)
	ready := func() (int, map[string]string) {
		t.Helper()
		res := call(t, "GET", srv.URL+"/readyz", "", nil)
		var body map[string]string
		res.Decode(t, &body)
		return res.StatusCode, body
	}
	// The version migrate down leaves (the migration itself may deadlock
	// with the server's own queries: that is what "under it" risks),
	// asked first after it: the server has no earlier answer to remember.
	setVersion := func(by int) {
		t.Helper()
		_, err := srv.DB.Exec(context.Background(), `UPDATE schema_migrations SET version = version + $1`, by)
		testenv.Must(t, err)
	}
	setVersion(-1)
	status, body := ready()
	if status != http.StatusServiceUnavailable || !strings.Contains(body["postgres"], "but this binary expects") ||
		!strings.Contains(body["postgres"], "admin migrate up") {
		t.Errorf("/readyz one migration behind: %d %v, want 503 saying the schema is behind and to migrate up", status, body)
	}
	setVersion(+1)
	testenv.Eventually(t, time.Now(), 15*time.Second, "/readyz ready again", func() (bool, string) {
		status, body := ready()
		return status == http.StatusOK && body["postgres"] == "ok", fmt.Sprint(status, body)
	})
}
