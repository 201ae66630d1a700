package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// The check API is another main package, so tests cannot call its run():
// they build the binary once per test run and start it as a process.

var apiBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if apiBuild.dir != "" {
		os.RemoveAll(apiBuild.dir)
	}
	os.Exit(code)
}

// apiBinary returns the path of a freshly built cmd/api.
func apiBinary(t *testing.T) string {
	t.Helper()
	apiBuild.once.Do(func() {
		apiBuild.dir, apiBuild.err = os.MkdirTemp("", "tollgate-api-")
		if apiBuild.err != nil {
			return
		}
		apiBuild.path = filepath.Join(apiBuild.dir, "api")
		out, err := exec.Command("go", "build", "-o", apiBuild.path, "github.com/tollgate/tollgate/cmd/api").CombinedOutput()
		if err != nil {
			apiBuild.err = fmt.Errorf("go build cmd/api: %v\n%s", err, out)
		}
	})
	if apiBuild.err != nil {
		t.Fatal(apiBuild.err)
	}
	return apiBuild.path
}

// freePort returns a loopback address no one listens on right now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// startAPI runs cmd/api against dbURL and the test Redis (under a key
// prefix of the test's own) until the test ends, and returns its base URL
// once it is ready.
func startAPI(t *testing.T, dbURL string) string {
	t.Helper()
	return startAPIWith(t, dbURL, nil)
}

// startAPIWith is startAPI with more settings ("NAME=value").
func startAPIWith(t *testing.T, dbURL string, settings []string) string {
	t.Helper()
	bin := apiBinary(t)
	_, prefix := testenv.Redis(t)
	addr := freePort(t)
	cmd := exec.Command(bin)
	cmd.Env = []string{
		"TOLLGATE_DATABASE_URL=" + dbURL,
		"TOLLGATE_REDIS_ADDR=" + testenv.RedisAddr(t),
		"TOLLGATE_KEY_PREFIX=" + prefix,
		"TOLLGATE_API_ADDR=" + addr,
		"TOLLGATE_LOG_LEVEL=warn",
		"TOLLGATE_LAST_USED_FLUSH=100ms",
	}
	cmd.Env = append(cmd.Env, settings...)
	logs := &testenv.LogBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	testenv.Must(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("api log:\n%s", logs.String())
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(base + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return base
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("api exited before it was ready: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("api not ready within 30s\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkClient asks the check API about one key.
type checkClient struct {
	url, token string
}

func (c checkClient) check(t *testing.T, key string) (int, enforce.Decision) {
	t.Helper()
	res := call(t, "POST", c.url+"/v1/check", c.token, map[string]any{"key": key, "resource": "GET /repos", "dry_run": true})
	var d enforce.Decision
	if res.StatusCode == http.StatusOK {
		res.decode(t, &d)
	}
	return res.StatusCode, d
}

// propagationLimit is how soon an admin change must reach a running API.
const propagationLimit = time.Second

// eventually polls until ok holds, and fails the test if that takes longer
// than propagationLimit from since.
func eventually(t *testing.T, since time.Time, what string, ok func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, since, propagationLimit, what, ok)
	t.Logf("%s after %v", what, time.Since(since).Round(time.Millisecond))
}

// TestChangesReachRunningAPI makes changes through the admin API while a
// real check API runs, and sees each in its decisions within a second:
// a plan's limit, a tenant override, a suspension, a key revocation and
// a service token revocation.
func TestChangesReachRunningAPI(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	admin := startAdmin(t, dbURL, nil)
	op := sessionFor(t, admin.DB, createUser(t, admin.DB, "ops@example.com", auth.RoleOperator, ""))
	api := admin.URL + "/api/v1"

	var plan plans.Plan
	res := call(t, "POST", api+"/plans", op, map[string]any{"name": "pro",
		"rules": []map[string]any{{"name": "hourly", "limit": 1000, "period_us": limiter.HourUS}}})
	want(t, res, http.StatusCreated)
	res.decode(t, &plan)
	newTenant := func(name string) (tenants.Tenant, string) {
		var tn tenants.Tenant
		res := call(t, "POST", api+"/tenants", op, map[string]any{"name": name, "plan_id": plan.ID})
		want(t, res, http.StatusCreated)
		res.decode(t, &tn)
		var k adminapi.KeySecretResponse
		res = call(t, "POST", api+"/tenants/"+tn.ID+"/keys", op, map[string]any{"name": "k"})
		want(t, res, http.StatusCreated)
		res.decode(t, &k)
		return tn, k.Secret
	}
	acme, acmeKey := newTenant("acme")
	globex, globexKey := newTenant("globex")
	var k adminapi.KeySecretResponse
	res = call(t, "POST", api+"/tenants/"+acme.ID+"/keys", op, map[string]any{"name": "to revoke"})
	want(t, res, http.StatusCreated)
	res.decode(t, &k)
	var st adminapi.ServiceTokenResponse
	res = call(t, "POST", api+"/service-tokens", op, map[string]any{"name": "gateway"})
	want(t, res, http.StatusCreated)
	res.decode(t, &st)

	checks := checkClient{url: startAPI(t, dbURL), token: st.Token}
	for _, key := range []string{acmeKey, globexKey, k.Secret} {
		if status, d := checks.check(t, key); status != http.StatusOK || !d.Allowed || *d.Limit != 1000 {
			t.Fatalf("before any change: %d %+v", status, d)
		}
	}

	t.Run("plan limit", func(t *testing.T) {
		res := call(t, "PUT", fmt.Sprintf("%s/plans/%d", api, plan.ID), op, map[string]any{"name": "pro",
			"rules": []map[string]any{{"name": "hourly", "limit": 3, "period_us": limiter.HourUS}}})
		want(t, res, http.StatusOK)
		changed := time.Now()
		eventually(t, changed, "new plan limit", func() (bool, string) {
			_, d := checks.check(t, globexKey)
			return d.Limit != nil && *d.Limit == 3, fmt.Sprintf("%+v", d)
		})
	})
	t.Run("tenant override", func(t *testing.T) {
		res := call(t, "PUT", api+"/tenants/"+acme.ID+"/overrides", op, map[string]any{
			"rules": []map[string]any{{"name": "hourly", "limit": 42, "period_us": limiter.HourUS}}})
		want(t, res, http.StatusOK)
		changed := time.Now()
		eventually(t, changed, "override limit", func() (bool, string) {
			_, d := checks.check(t, acmeKey)
			return d.Limit != nil && *d.Limit == 42, fmt.Sprintf("%+v", d)
		})
		if _, d := checks.check(t, globexKey); *d.Limit != 3 {
			t.Errorf("another tenant got the override: limit %d", *d.Limit)
		}
	})
	t.Run("key revoked", func(t *testing.T) {
		want(t, call(t, "POST", api+"/tenants/"+acme.ID+"/keys/"+k.Key.ID+"/revoke", op, nil), http.StatusOK)
		changed := time.Now()
		eventually(t, changed, "key_revoked", func() (bool, string) {
			_, d := checks.check(t, k.Secret)
			return !d.Allowed && d.Reason == tollgate.ReasonKeyRevoked, d.Reason
		})
	})
	t.Run("tenant suspended", func(t *testing.T) {
		want(t, call(t, "POST", api+"/tenants/"+globex.ID+"/suspend", op, nil), http.StatusOK)
		changed := time.Now()
		eventually(t, changed, "tenant_suspended", func() (bool, string) {
			_, d := checks.check(t, globexKey)
			return !d.Allowed && d.Reason == tollgate.ReasonTenantSuspended, d.Reason
		})
	})
	t.Run("last used", func(t *testing.T) {
		// Dry runs are not uses; a real check is, and the API writes it in
		// the background (every 100ms here).
		res := call(t, "POST", checks.url+"/v1/check", checks.token, map[string]any{"key": acmeKey})
		want(t, res, http.StatusOK)
		var keys struct {
			Items []tenants.Key `json:"items"`
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			call(t, "GET", api+"/tenants/"+acme.ID+"/keys", op, nil).decode(t, &keys)
			used := 0
			for _, k := range keys.Items {
				if k.LastUsedAt != nil {
					used++
				}
			}
			if used == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d keys with last_used_at after 10s, want 1: %+v", used, keys.Items)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("service token revoked", func(t *testing.T) {
		want(t, call(t, "POST", api+"/service-tokens/"+st.ServiceToken.ID+"/revoke", op, nil), http.StatusOK)
		changed := time.Now()
		eventually(t, changed, "401 for the revoked service token", func() (bool, string) {
			status, _ := checks.check(t, acmeKey)
			return status == http.StatusUnauthorized, fmt.Sprint(status)
		})
	})
}
