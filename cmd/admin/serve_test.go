package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

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

// TestServeMetrics: with TOLLGATE_ADMIN_METRICS_ADDR the admin server
// exports the usage worker's metrics, backlog included, on that address.
func TestServeMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	addr := ln.Addr().String()
	ln.Close()
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
