package main

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tollgate/tollgate"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
)

func TestMain(m *testing.M) { admintest.Main(m) }

// startAPI runs cmd/api against dbURL and the test Redis until the test
// ends, and returns its base URL once it is ready.
func startAPI(t *testing.T, dbURL string) string {
	t.Helper()
	return admintest.StartCheckAPI(t, dbURL, nil)
}

var eventually = admintest.Eventually

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
	res.Decode(t, &plan)
	newTenant := func(name string) (tenants.Tenant, string) {
		var tn tenants.Tenant
		res := call(t, "POST", api+"/tenants", op, map[string]any{"name": name, "plan_id": plan.ID})
		want(t, res, http.StatusCreated)
		res.Decode(t, &tn)
		var k adminapi.KeySecretResponse
		res = call(t, "POST", api+"/tenants/"+tn.ID+"/keys", op, map[string]any{"name": "k"})
		want(t, res, http.StatusCreated)
		res.Decode(t, &k)
		return tn, k.Secret
	}
	acme, acmeKey := newTenant("acme")
	globex, globexKey := newTenant("globex")
	var k adminapi.KeySecretResponse
	res = call(t, "POST", api+"/tenants/"+acme.ID+"/keys", op, map[string]any{"name": "to revoke"})
	want(t, res, http.StatusCreated)
	res.Decode(t, &k)
	var st adminapi.ServiceTokenResponse
	res = call(t, "POST", api+"/service-tokens", op, map[string]any{"name": "gateway"})
	want(t, res, http.StatusCreated)
	res.Decode(t, &st)

	checks := admintest.CheckClient{URL: startAPI(t, dbURL), Token: st.Token}
	for _, key := range []string{acmeKey, globexKey, k.Secret} {
		if status, d := checks.Check(t, key); status != http.StatusOK || !d.Allowed || *d.Limit != 1000 {
			t.Fatalf("before any change: %d %+v", status, d)
		}
	}

	t.Run("plan limit", func(t *testing.T) {
		res := call(t, "PUT", fmt.Sprintf("%s/plans/%d", api, plan.ID), op, map[string]any{"name": "pro",
			"rules": []map[string]any{{"name": "hourly", "limit": 3, "period_us": limiter.HourUS}}})
		want(t, res, http.StatusOK)
		changed := time.Now()
		eventually(t, changed, "new plan limit", func() (bool, string) {
			_, d := checks.Check(t, globexKey)
			return d.Limit != nil && *d.Limit == 3, fmt.Sprintf("%+v", d)
		})
	})
	t.Run("tenant override", func(t *testing.T) {
		res := call(t, "PUT", api+"/tenants/"+acme.ID+"/overrides", op, map[string]any{
			"rules": []map[string]any{{"name": "hourly", "limit": 42, "period_us": limiter.HourUS}}})
		want(t, res, http.StatusOK)
		changed := time.Now()
		eventually(t, changed, "override limit", func() (bool, string) {
			_, d := checks.Check(t, acmeKey)
			return d.Limit != nil && *d.Limit == 42, fmt.Sprintf("%+v", d)
		})
		if _, d := checks.Check(t, globexKey); *d.Limit != 3 {
			t.Errorf("another tenant got the override: limit %d", *d.Limit)
		}
	})
	t.Run("key revoked", func(t *testing.T) {
		want(t, call(t, "POST", api+"/tenants/"+acme.ID+"/keys/"+k.Key.ID+"/revoke", op, nil), http.StatusOK)
		changed := time.Now()
		eventually(t, changed, "key_revoked", func() (bool, string) {
			_, d := checks.Check(t, k.Secret)
			return !d.Allowed && d.Reason == tollgate.ReasonKeyRevoked, d.Reason
		})
	})
	t.Run("tenant suspended", func(t *testing.T) {
		want(t, call(t, "POST", api+"/tenants/"+globex.ID+"/suspend", op, nil), http.StatusOK)
		changed := time.Now()
		eventually(t, changed, "tenant_suspended", func() (bool, string) {
			_, d := checks.Check(t, globexKey)
			return !d.Allowed && d.Reason == tollgate.ReasonTenantSuspended, d.Reason
		})
	})
	t.Run("last used", func(t *testing.T) {
		// Dry runs are not uses; a real check is, and the API writes it in
		// the background (every 100ms here).
		res := call(t, "POST", checks.URL+"/v1/check", checks.Token, map[string]any{"key": acmeKey})
		want(t, res, http.StatusOK)
		var keys struct {
			Items []tenants.Key `json:"items"`
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			call(t, "GET", api+"/tenants/"+acme.ID+"/keys", op, nil).Decode(t, &keys)
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
			status, _ := checks.Check(t, acmeKey)
			return status == http.StatusUnauthorized, fmt.Sprint(status)
		})
	})
}
