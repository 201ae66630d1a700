package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestEveryDoorwayRecordsTheRoute: through every doorway (POST /v1/check,
// forward-auth as nginx and as Envoy ext_authz name the request, Envoy's
// rate-limit service), 30 requests to distinct /items/N paths, some with a
// query string, are counted under the plan's route GET /items/{id}, and a
// path no route matches under (other): usage never holds a raw path.
func TestEveryDoorwayRecordsTheRoute(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	routed, err := plans.NewStore(f.db).Put(ctx, plans.Plan{Name: "routed", Routes: []string{"GET /items/{id}"},
		Rules: []plans.Rule{{Name: "hourly", Algorithm: limiter.GCRA, Limit: 1000, PeriodUS: limiter.HourUS}}})
	testenv.Must(t, err)
	ts := tenants.NewStore(f.db)
	tn, err := ts.Create(ctx, "routed-co", routed.ID)
	testenv.Must(t, err)
	addrs := f.startAPIAddrs(t, map[string]string{"TOLLGATE_ENVOY_GRPC_ADDR": "127.0.0.1:0",
		"TOLLGATE_USAGE_SINK": "postgres", "TOLLGATE_USAGE_FLUSH": "50ms"})
	base := addrs[0]
	envoy := dialEnvoy(t, addrs[1], f.token)

	doorways := map[string]func(key, path string){
		"/v1/check": func(key, path string) {
			post(t, base, f.token, checkBody(key, "", "GET "+path))
		},
		"forward-auth, nginx": func(key, path string) {
			forwardAuth(t, base, "GET", "", gateway(f.token, "203.0.113.9",
				map[string]string{"X-API-Key": key, "X-Original-Method": "GET", "X-Original-URI": path}))
		},
		"forward-auth, envoy": func(key, path string) {
			forwardAuth(t, base, "GET", path, gateway(f.token, "203.0.113.9", map[string]string{"X-API-Key": key}))
		},
		"envoy rate-limit service": func(key, path string) {
			envoy.must(t, rlRequest(descriptor("api_key", key, "method", "GET", "path", path)))
		},
	}
	keyIDs, secrets := map[string]string{}, map[string]string{}
	for name := range doorways {
		secret, k, err := ts.IssueKey(ctx, tn.ID, name, nil)
		testenv.Must(t, err)
		keyIDs[name], secrets[name] = k.ID, secret
	}
	// Every key known to the api before it is used (a dry run records no
	// usage), so no request of the count below can be a fresh key's 401.
	for name, secret := range secrets {
		testenv.WaitFor(t, 10*time.Second, name+": key known", func() bool {
			return post(t, base, f.token, `{"key":"`+secret+`","resource":"GET /items/1","dry_run":true}`).status == http.StatusOK
		})
	}
	for name, ask := range doorways {
		secret := secrets[name]
		for i := range 30 {
			path := fmt.Sprintf("/items/%d", i)
			if i%3 == 0 {
				path += fmt.Sprintf("?page=%d", i)
			}
			ask(secret, path)
		}
		ask(secret, "/users/7")
	}
	for name, keyID := range keyIDs {
		want := "(other)=1 GET /items/{id}=30"
		testenv.Eventually(t, time.Now(), 20*time.Second, name+": usage by route", func() (bool, string) {
			var got string
			err := f.db.QueryRow(ctx, `SELECT coalesce(string_agg(resource || '=' || n, ' ' ORDER BY resource), '')
				FROM (SELECT resource, sum(allowed + denied) n FROM usage_month WHERE key_id = $1 GROUP BY resource) x`,
				keyID).Scan(&got)
			testenv.Must(t, err)
			return got == want, fmt.Sprintf("usage %q, want %q", got, want)
		})
	}
}
