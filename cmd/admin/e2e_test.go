package main

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
	"github.com/tollgate/tollgate/internal/testenv/testkeys"
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

	// limitReaches waits until checks with key see limit: the change just
	// made has reached the running API.
	limitReaches := func(t *testing.T, what, key string, limit int64) {
		t.Helper()
		eventually(t, time.Now(), what, func() (bool, string) {
			_, d := checks.Check(t, key)
			return d.Limit != nil && *d.Limit == limit, fmt.Sprintf("%+v", d)
		})
	}
	t.Run("plan limit", func(t *testing.T) {
		res := call(t, "PUT", fmt.Sprintf("%s/plans/%d", api, plan.ID), op, map[string]any{"name": "pro",
			"rules": []map[string]any{{"name": "hourly", "limit": 3, "period_us": limiter.HourUS}}})
		want(t, res, http.StatusOK)
		limitReaches(t, "new plan limit", globexKey, 3)
	})
	t.Run("tenant override", func(t *testing.T) {
		res := call(t, "PUT", api+"/tenants/"+acme.ID+"/overrides", op, map[string]any{
			"rules": []map[string]any{{"name": "hourly", "limit": 42, "period_us": limiter.HourUS}}})
		want(t, res, http.StatusOK)
		limitReaches(t, "override limit", acmeKey, 42)
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
		testenv.Eventually(t, time.Now(), 10*time.Second, "1 key with last_used_at", func() (bool, string) {
			call(t, "GET", api+"/tenants/"+acme.ID+"/keys", op, nil).Decode(t, &keys)
			used := 0
			for _, k := range keys.Items {
				if k.LastUsedAt != nil {
					used++
				}
			}
			return used == 1, fmt.Sprintf("%d: %+v", used, keys.Items)
		})
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

// The isolation matrix: every route of the admin server × every role ×
// own/foreign tenant, with the status each must get. A tenant user must
// never read or change another tenant's data (404, exactly as if it did
// not exist) nor operator-only data (403); a viewer changes nothing (403);
// without a session only login, logout and the health checks answer
// (401 otherwise). Denied requests must change nothing (no audit entry);
// allowed changes must leave one; and no answer to a tenant user may
// mention the other tenant.

type role string

const (
	roleOperator    role = "operator"
	roleTenantAdmin role = "tenant_admin"
	roleViewer      role = "tenant_viewer"
	roleAnonymous   role = "anonymous"
)

var roles = []role{roleOperator, roleTenantAdmin, roleViewer, roleAnonymous}

// owner says whose resources a request's path names: the requesting tenant
// user's own tenant, the foreign one, or (foreignKey) the own tenant with
// a key of the foreign tenant.
type owner string

const (
	ownerNone       owner = "-"
	ownerOwn        owner = "own"
	ownerForeign    owner = "foreign"
	ownerForeignKey owner = "own-tenant/foreign-key"
)

// access classes of routes (see access.go and routes.go).
type accessClass string

const (
	accessPublic     accessClass = "public"
	accessSignedIn   accessClass = "signedIn"
	accessOperator   accessClass = "operator"
	accessTenantRead accessClass = "tenantRead"
	accessTenantKeys accessClass = "tenantKeys"
	accessTenantOps  accessClass = "tenantOps"
)

type matrixFixture struct {
	srv          *adminServer
	users        map[role]auth.User
	own, foreign tenants.Tenant
	free, pro    plans.Plan
	probe        auth.User // logs in through the login endpoint
	n            int
	// foreignIDs are IDs of the foreign tenant's resources: no answer to
	// a tenant user of the own tenant may contain one.
	foreignIDs []string
}

func (fx *matrixFixture) unique(prefix string) string {
	fx.n++
	return fmt.Sprintf("%s-%d", prefix, fx.n)
}

// target is where a request's path points.
type target struct {
	tenant    tenants.Tenant
	keyTenant tenants.Tenant
}

type endpoint struct {
	method, pattern string
	access          accessClass
	status          int
	// prepare makes fresh resources for one request and returns the path
	// parameters and the body.
	prepare func(t *testing.T, fx *matrixFixture, tg target) (map[string]string, any)
}

func (e endpoint) owners() []owner {
	switch {
	case strings.Contains(e.pattern, "{keyID}"),
		strings.Contains(e.pattern, "{tenantID}") && strings.Contains(e.pattern, "{endpointID}"):
		return []owner{ownerOwn, ownerForeign, ownerForeignKey}
	case strings.Contains(e.pattern, "{tenantID}"):
		return []owner{ownerOwn, ownerForeign}
	}
	return []owner{ownerNone}
}

// expected is the status role must get from e for resources of o.
func (e endpoint) expected(r role, o owner) int {
	if e.access == accessPublic {
		return e.status
	}
	if r == roleAnonymous {
		return http.StatusUnauthorized
	}
	switch e.access {
	case accessSignedIn:
		return e.status
	case accessOperator:
		if r == roleOperator {
			return e.status
		}
		return http.StatusForbidden
	}
	// Tenant routes.
	if r != roleOperator && o == ownerForeign {
		return http.StatusNotFound
	}
	switch {
	case e.access == accessTenantKeys && r == roleViewer,
		e.access == accessTenantOps && r != roleOperator:
		return http.StatusForbidden
	case o == ownerForeignKey:
		return http.StatusNotFound
	}
	return e.status
}

func noParams(*testing.T, *matrixFixture, target) (map[string]string, any) { return nil, nil }

func tenantParams(t *testing.T, fx *matrixFixture, tg target) (map[string]string, any) {
	return map[string]string{"tenantID": tg.tenant.ID}, nil
}

func freshPlan(t *testing.T, fx *matrixFixture) plans.Plan {
	t.Helper()
	p, err := plans.NewStore(fx.srv.DB).Create(context.Background(), plans.Plan{Name: fx.unique("plan"),
		Rules: []plans.Rule{{Name: "hourly", Limit: 10, PeriodUS: limiter.HourUS}}})
	testenv.Must(t, err)
	return p
}

func planParams(t *testing.T, fx *matrixFixture, _ target) (map[string]string, any) {
	return map[string]string{"planID": fmt.Sprint(freshPlan(t, fx).ID)}, nil
}

// keyParams makes a fresh key in the target's key tenant.
func keyParams(t *testing.T, fx *matrixFixture, tg target) map[string]string {
	t.Helper()
	_, k, err := tenants.NewStore(fx.srv.DB).CreateKey(context.Background(), tg.keyTenant.ID, tenants.KeySpec{Name: "k"})
	testenv.Must(t, err)
	if tg.keyTenant.ID == fx.foreign.ID {
		fx.foreignIDs = append(fx.foreignIDs, k.ID)
	}
	return map[string]string{"tenantID": tg.tenant.ID, "keyID": k.ID}
}

func endpoints() []endpoint {
	list := []endpoint{
		{"GET", "/healthz", accessPublic, 200, noParams},
		{"GET", "/readyz", accessPublic, 200, noParams},
		{"GET", "/metrics", accessPublic, 200, noParams},
		{"POST", "/api/v1/login", accessPublic, 200, func(_ *testing.T, fx *matrixFixture, _ target) (map[string]string, any) {
			return nil, map[string]string{"email": fx.probe.Email, "password": "password-" + fx.probe.Email}
		}},
		{"POST", "/api/v1/logout", accessPublic, 204, noParams},
		{"GET", "/api/v1/me", accessSignedIn, 200, noParams},

		{"GET", "/api/v1/plans", accessOperator, 200, noParams},
		{"POST", "/api/v1/plans", accessOperator, 201, func(_ *testing.T, fx *matrixFixture, _ target) (map[string]string, any) {
			return nil, map[string]any{"name": fx.unique("new"), "rules": []map[string]any{{"name": "hourly", "limit": 5, "period_us": limiter.HourUS}}}
		}},
		{"GET", "/api/v1/plans/{planID}", accessOperator, 200, planParams},
		{"PUT", "/api/v1/plans/{planID}", accessOperator, 200, func(t *testing.T, fx *matrixFixture, _ target) (map[string]string, any) {
			p := freshPlan(t, fx)
			return map[string]string{"planID": fmt.Sprint(p.ID)},
				map[string]any{"name": p.Name, "rules": []map[string]any{{"name": "hourly", "limit": 20, "period_us": limiter.HourUS}}}
		}},
		{"GET", "/api/v1/plans/{planID}/quota", accessOperator, 200, planParams},
		{"PUT", "/api/v1/plans/{planID}/quota", accessOperator, 200, func(t *testing.T, fx *matrixFixture, tg target) (map[string]string, any) {
			params, _ := planParams(t, fx, tg)
			return params, map[string]any{"thresholds": []map[string]any{{"percent": 90}}}
		}},
		{"GET", "/api/v1/plans/{planID}/credits", accessOperator, 200, planParams},
		{"PUT", "/api/v1/plans/{planID}/credits", accessOperator, 200, func(t *testing.T, fx *matrixFixture, tg target) (map[string]string, any) {
			params, _ := planParams(t, fx, tg)
			return params, map[string]any{"mode": "overage", "overdraft": 5}
		}},
		{"GET", "/api/v1/plans/{planID}/billing", accessOperator, 200, planParams},
		{"PUT", "/api/v1/plans/{planID}/billing", accessOperator, 200, func(t *testing.T, fx *matrixFixture, tg target) (map[string]string, any) {
			params, _ := planParams(t, fx, tg)
			return params, map[string]any{"dunning_grace_s": 0, "top_up_unit_minor": 5}
		}},
		{"DELETE", "/api/v1/plans/{planID}", accessOperator, 204, planParams},
		{"POST", "/api/v1/plans/{planID}/archive", accessOperator, 200, planParams},
		{"POST", "/api/v1/plans/{planID}/unarchive", accessOperator, 200, planParams},

		{"GET", "/api/v1/tenants", accessOperator, 200, noParams},
		{"POST", "/api/v1/tenants", accessOperator, 201, func(_ *testing.T, fx *matrixFixture, _ target) (map[string]string, any) {
			return nil, map[string]any{"name": fx.unique("tenant"), "plan_id": fx.free.ID}
		}},
		{"GET", "/api/v1/tenants/{tenantID}", accessTenantRead, 200, tenantParams},
		{"POST", "/api/v1/tenants/{tenantID}/plan", accessTenantOps, 200, func(t *testing.T, fx *matrixFixture, tg target) (map[string]string, any) {
			cur, err := tenants.NewStore(fx.srv.DB).Get(context.Background(), tg.tenant.ID)
			testenv.Must(t, err)
			next := fx.pro.ID
			if cur.PlanID == fx.pro.ID {
				next = fx.free.ID
			}
			return map[string]string{"tenantID": tg.tenant.ID}, map[string]any{"plan_id": next}
		}},
		{"GET", "/api/v1/tenants/{tenantID}/plan-changes", accessTenantRead, 200, tenantParams},
		{"POST", "/api/v1/tenants/{tenantID}/suspend", accessTenantOps, 200, tenantParams},
		{"POST", "/api/v1/tenants/{tenantID}/resume", accessTenantOps, 200, tenantParams},
		{"GET", "/api/v1/tenants/{tenantID}/overrides", accessTenantRead, 200, tenantParams},
		{"PUT", "/api/v1/tenants/{tenantID}/overrides", accessTenantOps, 200, func(t *testing.T, fx *matrixFixture, tg target) (map[string]string, any) {
			return map[string]string{"tenantID": tg.tenant.ID},
				map[string]any{"rules": []map[string]any{{"name": "hourly", "limit": fx.n + 1, "period_us": limiter.HourUS}}}
		}},

		{"GET", "/api/v1/tenants/{tenantID}/quota", accessTenantRead, 200, tenantParams},
		{"PUT", "/api/v1/tenants/{tenantID}/quota", accessTenantKeys, 200, func(_ *testing.T, _ *matrixFixture, tg target) (map[string]string, any) {
			return map[string]string{"tenantID": tg.tenant.ID}, map[string]any{"thresholds": []map[string]any{{"remaining": 10}}}
		}},

		{"GET", "/api/v1/tenants/{tenantID}/credits", accessTenantRead, 200, tenantParams},
		{"GET", "/api/v1/tenants/{tenantID}/credits/ledger", accessTenantRead, 200, tenantParams},
		{"POST", "/api/v1/tenants/{tenantID}/credits/grants", accessTenantOps, 201, func(_ *testing.T, _ *matrixFixture, tg target) (map[string]string, any) {
			return map[string]string{"tenantID": tg.tenant.ID}, map[string]any{"amount": 10, "cause": "matrix"}
		}},
		{"POST", "/api/v1/tenants/{tenantID}/credits/adjustments", accessTenantOps, 200, func(_ *testing.T, _ *matrixFixture, tg target) (map[string]string, any) {
			return map[string]string{"tenantID": tg.tenant.ID}, map[string]any{"units": 3, "cause": "matrix"}
		}},

		{"GET", "/api/v1/tenants/{tenantID}/keys", accessTenantRead, 200, tenantParams},
		{"POST", "/api/v1/tenants/{tenantID}/keys", accessTenantKeys, 201, func(_ *testing.T, _ *matrixFixture, tg target) (map[string]string, any) {
			return map[string]string{"tenantID": tg.tenant.ID}, map[string]any{"name": "new key"}
		}},
		{"GET", "/api/v1/tenants/{tenantID}/keys/{keyID}", accessTenantRead, 200, func(t *testing.T, fx *matrixFixture, tg target) (map[string]string, any) {
			return keyParams(t, fx, tg), nil
		}},
		{"PATCH", "/api/v1/tenants/{tenantID}/keys/{keyID}", accessTenantKeys, 200, func(t *testing.T, fx *matrixFixture, tg target) (map[string]string, any) {
			return keyParams(t, fx, tg), map[string]any{"name": "renamed", "expires_at": time.Now().Add(time.Hour)}
		}},
		{"POST", "/api/v1/tenants/{tenantID}/keys/{keyID}/revoke", accessTenantKeys, 200, func(t *testing.T, fx *matrixFixture, tg target) (map[string]string, any) {
			return keyParams(t, fx, tg), nil
		}},
		{"POST", "/api/v1/tenants/{tenantID}/keys/{keyID}/rotate", accessTenantKeys, 201, func(t *testing.T, fx *matrixFixture, tg target) (map[string]string, any) {
			return keyParams(t, fx, tg), map[string]any{"grace_period_s": 60}
		}},

		{"GET", "/api/v1/service-tokens", accessOperator, 200, noParams},
		{"POST", "/api/v1/service-tokens", accessOperator, 201, func(*testing.T, *matrixFixture, target) (map[string]string, any) {
			return nil, map[string]any{"name": "gateway"}
		}},
		{"POST", "/api/v1/service-tokens/{tokenID}/revoke", accessOperator, 200, func(t *testing.T, fx *matrixFixture, _ target) (map[string]string, any) {
			_, st, err := auth.NewStore(fx.srv.DB).WithSecretKeys(testkeys.SecretKeys(t)).IssueServiceToken(context.Background(), "gw", time.Hour)
			testenv.Must(t, err)
			return map[string]string{"tokenID": st.ID}, nil
		}},

		{"GET", "/api/v1/users", accessOperator, 200, noParams},
		{"POST", "/api/v1/users", accessOperator, 201, func(_ *testing.T, fx *matrixFixture, _ target) (map[string]string, any) {
			return nil, map[string]any{"email": fx.unique("user") + "@example.com", "role": "operator"}
		}},
		{"POST", "/api/v1/users/{userID}/disable", accessOperator, 200, func(t *testing.T, fx *matrixFixture, _ target) (map[string]string, any) {
			u := createUser(t, fx.srv.DB, fx.unique("disable")+"@example.com", auth.RoleOperator, "")
			return map[string]string{"userID": u.ID}, nil
		}},
		{"POST", "/api/v1/users/{userID}/sessions/revoke", accessOperator, 200, func(t *testing.T, fx *matrixFixture, _ target) (map[string]string, any) {
			u := createUser(t, fx.srv.DB, fx.unique("sessions")+"@example.com", auth.RoleOperator, "")
			return map[string]string{"userID": u.ID}, nil
		}},
		{"POST", "/api/v1/months/{month}/close", accessOperator, 200, func(_ *testing.T, fx *matrixFixture, _ target) (map[string]string, any) {
			fx.n++ // a month of its own: closing a closed one changes (and audits) nothing
			return map[string]string{"month": fmt.Sprintf("%04d-%02d", 1900+fx.n/12, 1+fx.n%12)}, nil
		}},

		{"GET", "/api/v1/audit", accessOperator, 200, noParams},

		// Billing; this server has no Stripe settings: a top-up is 409
		// (invoicing off) and the provider's webhook 404.
		{"GET", "/api/v1/tenants/{tenantID}/billing", accessTenantRead, 200, tenantParams},
		{"PUT", "/api/v1/tenants/{tenantID}/billing/account", accessTenantOps, 200, func(_ *testing.T, fx *matrixFixture, tg target) (map[string]string, any) {
			return map[string]string{"tenantID": tg.tenant.ID}, map[string]any{"customer_id": strings.ReplaceAll(fx.unique("cus_matrix"), "-", "")}
		}},
		{"POST", "/api/v1/tenants/{tenantID}/billing/top-ups", accessTenantKeys, 409, func(_ *testing.T, _ *matrixFixture, tg target) (map[string]string, any) {
			return map[string]string{"tenantID": tg.tenant.ID}, map[string]any{"units": 10, "amount_minor": 100,
				"success_url": "https://console.example/ok", "cancel_url": "https://console.example/back"}
		}},
		{"GET", "/api/v1/months/{month}/reconciliation", accessOperator, 200, func(*testing.T, *matrixFixture, target) (map[string]string, any) {
			return map[string]string{"month": "2026-10"}, nil
		}},
		{"POST", "/api/v1/billing/stripe/webhook", accessPublic, 404, func(*testing.T, *matrixFixture, target) (map[string]string, any) {
			return nil, map[string]any{"id": "evt_matrix", "type": "invoice.paid"}
		}},

		{"GET", "/api/v1/usage/tenants/{tenantID}/series", accessTenantRead, 200, tenantParams},
		{"GET", "/api/v1/usage/tenants/{tenantID}/top-keys", accessTenantRead, 200, tenantParams},
		{"GET", "/api/v1/usage/tenants/{tenantID}/top-resources", accessTenantRead, 200, tenantParams},
		{"GET", "/api/v1/usage/tenants/{tenantID}/rejections", accessTenantRead, 200, tenantParams},
		{"GET", "/api/v1/statements/{tenantID}/{month}", accessTenantRead, 200, func(_ *testing.T, _ *matrixFixture, tg target) (map[string]string, any) {
			return map[string]string{"tenantID": tg.tenant.ID, "month": "2026-10"}, nil
		}},
		{"GET", "/api/v1/usage/totals", accessOperator, 200, noParams},
		{"GET", "/api/v1/usage/anonymous/top-ips", accessOperator, 200, noParams},
		// Without ?month= an operator gets 422; tenant users are refused
		// before the input is looked at.
		{"GET", "/api/v1/statements", accessOperator, 422, noParams},
		{"GET", "/api/v1/statements/late", accessOperator, 422, noParams},
	}
	return append(list, webhookEndpoints()...)
}

// webhookEndpoints are the webhook routes: the operators', then each
// tenant's, whose {endpointID} is an endpoint of the target's key tenant
// (another tenant's for own-tenant/foreign-key).
func webhookEndpoints() []endpoint {
	var list []endpoint
	for _, scope := range []struct {
		prefix       string
		read, change accessClass
	}{{"", accessOperator, accessOperator}, {"/tenants/{tenantID}", accessTenantRead, accessTenantKeys}} {
		ep := "/api/v1" + scope.prefix + "/webhooks/endpoints"
		params := func(t *testing.T, fx *matrixFixture, tg target) (map[string]string, any) {
			return webhookParams(t, fx, tg, scope.prefix != ""), nil
		}
		list = append(list,
			endpoint{"GET", "/api/v1" + scope.prefix + "/events", scope.read, 200, tenantParams},
			endpoint{"GET", ep, scope.read, 200, tenantParams},
			endpoint{"POST", ep, scope.change, 201, func(_ *testing.T, _ *matrixFixture, tg target) (map[string]string, any) {
				return map[string]string{"tenantID": tg.tenant.ID}, map[string]any{"url": "http://127.0.0.1:9/hook"}
			}},
			endpoint{"GET", ep + "/{endpointID}", scope.read, 200, params},
			endpoint{"DELETE", ep + "/{endpointID}", scope.change, 204, params},
			endpoint{"POST", ep + "/{endpointID}/rotate", scope.change, 201, params},
			endpoint{"POST", ep + "/{endpointID}/disable", scope.change, 200, params},
			endpoint{"POST", ep + "/{endpointID}/enable", scope.change, 200, params},
			endpoint{"POST", ep + "/{endpointID}/test", scope.change, 202, params},
			endpoint{"POST", ep + "/{endpointID}/replay", scope.change, 202, func(t *testing.T, fx *matrixFixture, tg target) (map[string]string, any) {
				return webhookParams(t, fx, tg, scope.prefix != ""), map[string]any{"from": "2020-01-01T00:00:00Z", "to": "2030-01-01T00:00:00Z"}
			}},
			endpoint{"GET", ep + "/{endpointID}/deliveries", scope.read, 200, params},
		)
	}
	return list
}

// webhookParams makes a fresh endpoint: the target's key tenant's on a
// tenant's path (owned), an operator's otherwise.
func webhookParams(t *testing.T, fx *matrixFixture, tg target, owned bool) map[string]string {
	t.Helper()
	owner := ""
	if owned {
		owner = tg.keyTenant.ID
	}
	e, err := events.NewOps(fx.srv.DB, nil, events.Guard{AllowPrivate: true}).CreateEndpoint(context.Background(), audit.CLI, owner,
		events.EndpointInput{URL: "http://127.0.0.1:9/" + fx.unique("hook")})
	testenv.Must(t, err)
	if owner == fx.foreign.ID {
		fx.foreignIDs = append(fx.foreignIDs, e.Endpoint.ID)
	}
	return map[string]string{"tenantID": tg.tenant.ID, "endpointID": e.Endpoint.ID}
}

func newMatrixFixture(t *testing.T) *matrixFixture {
	t.Helper()
	srv := startAdmin(t, testenv.DatabaseURL(t), nil)
	in := admintest.SeedIsolation(t, srv.DB)
	fx := &matrixFixture{srv: srv, own: in.Own, foreign: in.Foreign, free: in.Free, pro: in.Pro,
		users: map[role]auth.User{roleOperator: in.Operator, roleTenantAdmin: in.Admin, roleViewer: in.Viewer},
		// The foreign tenant has data of its own to leak: a key, an
		// override, a user, history.
		foreignIDs: []string{in.Foreign.ID, in.ForeignKey.ID, in.ForeignAdmin.ID}}
	fx.probe = createUser(t, srv.DB, "probe@own.example.com", auth.RoleTenantViewer, fx.own.ID)
	return fx
}

func auditCount(t *testing.T, fx *matrixFixture) int {
	t.Helper()
	var n int
	testenv.Must(t, fx.srv.DB.QueryRow(context.Background(), `SELECT count(*) FROM audit_log`).Scan(&n))
	return n
}

func TestIsolationMatrix(t *testing.T) {
	fx := newMatrixFixture(t)
	eps := endpoints()

	// The table must cover every API route the server has, and nothing
	// else (the console's routes: TestConsoleRoutesIsolation in
	// internal/ui).
	var served, listed []string
	for _, r := range admintest.Routes(t, false) {
		served = append(served, r.String())
	}
	for _, e := range eps {
		listed = append(listed, e.method+" "+e.pattern)
	}
	sort.Strings(served)
	sort.Strings(listed)
	if strings.Join(served, "\n") != strings.Join(listed, "\n") {
		t.Fatalf("the matrix does not list exactly the server's routes:\nserved:\n%s\n\nlisted:\n%s",
			strings.Join(served, "\n"), strings.Join(listed, "\n"))
	}

	for _, e := range eps {
		for _, o := range e.owners() {
			for _, r := range roles {
				name := fmt.Sprintf("%s %s/%s/%s", e.method, e.pattern, r, o)
				t.Run(name, func(t *testing.T) {
					tg := target{tenant: fx.own, keyTenant: fx.own}
					switch o {
					case ownerForeign:
						tg = target{tenant: fx.foreign, keyTenant: fx.foreign}
					case ownerForeignKey:
						tg.keyTenant = fx.foreign
					}
					params, body := e.prepare(t, fx, tg)
					path := e.pattern
					for k, v := range params {
						path = strings.ReplaceAll(path, "{"+k+"}", v)
					}
					if strings.Contains(path, "{") {
						t.Fatalf("unfilled parameter in %s", path)
					}
					token := ""
					if r != roleAnonymous {
						token = sessionFor(t, fx.srv.DB, fx.users[r])
					}
					before := auditCount(t, fx)
					res := call(t, e.method, fx.srv.URL+path, token, body)
					after := auditCount(t, fx)

					wantStatus := e.expected(r, o)
					if res.StatusCode != wantStatus {
						t.Fatalf("%s %s as %s = %d %s, want %d", e.method, path, r, res.StatusCode, res.Body, wantStatus)
					}
					ok := res.StatusCode < 300
					// Logging out without a session has nothing to end.
					nothingToChange := e.pattern == "/api/v1/logout" && r == roleAnonymous
					switch {
					case !ok && after != before:
						t.Errorf("a refused request left %d audit entries: it changed something", after-before)
					case ok && e.method != "GET" && !nothingToChange && after == before:
						t.Errorf("an accepted change left no audit entry")
					case ok && e.method == "GET" && after != before:
						t.Errorf("a read left %d audit entries", after-before)
					}
					if !ok && !strings.HasPrefix(res.Header.Get("Content-Type"), "application/problem+json") {
						t.Errorf("refusal Content-Type = %q, want application/problem+json", res.Header.Get("Content-Type"))
					}
					if ok && (r == roleTenantAdmin || r == roleViewer) {
						for _, id := range fx.foreignIDs {
							if strings.Contains(string(res.Body), id) {
								t.Errorf("answer to a tenant user mentions foreign resource %s: %s", id, res.Body)
							}
						}
					}
				})
			}
		}
	}
}
