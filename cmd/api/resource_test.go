package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// dodges are other spellings of a request to /v1/search: each must count
// as the canonical one.
var dodges = []struct{ method, path string }{
	{"", "/v1/%73earch"},
	{"", "/v1//search"},
	{"", "/v1/./search"},
	{"", "/v1/x/../search"},
	{"", "/v1/search/"},
	{"", "/v1/search?x=1"},
}

// TestResourceSpellingsCannotDodge: through every doorway (POST
// /v1/check, forward-auth as nginx and as Envoy ext_authz name the
// request, Envoy's rate-limit service), a GET or POST rule on /v1/search
// that allows one request an hour also limits the same request spelled
// otherwise, and a HEAD counts as a GET.
func TestResourceSpellingsCannotDodge(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	rule := func(name, resource string) plans.Rule {
		return plans.Rule{Name: name, Algorithm: limiter.GCRA, Limit: 1, PeriodUS: limiter.HourUS, Burst: 1, Resource: resource}
	}
	strict, err := plans.NewStore(f.db).Put(ctx, plans.Plan{Name: "strict", Rules: []plans.Rule{
		rule("reads", "GET /v1/search"), rule("writes", "POST /v1/search")}})
	testenv.Must(t, err)
	ts := tenants.NewStore(f.db)
	tn, err := ts.Create(ctx, "strict-co", strict.ID)
	testenv.Must(t, err)
	addrs := f.startAPIAddrs(t, map[string]string{"TOLLGATE_ENVOY_GRPC_ADDR": "127.0.0.1:0"})
	base := addrs[0]
	envoy := dialEnvoy(t, addrs[1], f.token)

	// Each doorway answers whether the request was allowed and the name
	// of the rule that governed it ("" when none did).
	type doorway func(t *testing.T, key, method, path string) (allowed bool, policy string)
	fromHeader := func(status int, h http.Header) (bool, string) {
		return status == http.StatusOK, h.Get("RateLimit-Policy")
	}
	doorways := map[string]doorway{
		"/v1/check": func(t *testing.T, key, method, path string) (bool, string) {
			r := post(t, base, f.token, checkBody(key, "", method+" "+path))
			return r.body["allowed"] == true, r.header.Get("RateLimit-Policy")
		},
		"forward-auth, nginx": func(t *testing.T, key, method, path string) (bool, string) {
			r := forwardAuth(t, base, "GET", "", gateway(f.token, "203.0.113.9",
				map[string]string{"X-API-Key": key, "X-Original-Method": method, "X-Original-URI": path}))
			return fromHeader(r.status, r.header)
		},
		"forward-auth, envoy": func(t *testing.T, key, method, path string) (bool, string) {
			r := forwardAuth(t, base, method, path, gateway(f.token, "203.0.113.9", map[string]string{"X-API-Key": key}))
			return fromHeader(r.status, r.header)
		},
		"envoy rate-limit service, method and path": func(t *testing.T, key, method, path string) (bool, string) {
			resp := envoy.must(t, rlRequest(descriptor("api_key", key, "method", method, "path", path)))
			return resp.OverallCode == rlsv3.RateLimitResponse_OK, headerMap(resp.ResponseHeadersToAdd)["ratelimit-policy"]
		},
		"envoy rate-limit service, resource entry": func(t *testing.T, key, method, path string) (bool, string) {
			resp := envoy.must(t, rlRequest(descriptor("api_key", key, "generic_key", method+" "+path)))
			return resp.OverallCode == rlsv3.RateLimitResponse_OK, headerMap(resp.ResponseHeadersToAdd)["ratelimit-policy"]
		},
	}
	for name, ask := range doorways {
		t.Run(name, func(t *testing.T) {
			for _, c := range []struct{ method, rule string }{{"GET", "reads"}, {"POST", "writes"}} {
				key, _, err := ts.IssueKey(ctx, tn.ID, name+" "+c.method, nil)
				testenv.Must(t, err)
				wantPolicy := `"` + c.rule + `";q=1;w=3600`
				// The new key reaches the api by notification: until then
				// it is unknown (refused, no rule, nothing counted).
				testenv.Eventually(t, time.Now(), 10*time.Second, c.method+" /v1/search allowed under "+wantPolicy, func() (bool, string) {
					ok, policy := ask(t, key, c.method, "/v1/search")
					return ok && policy == wantPolicy, fmt.Sprintf("allowed %v policy %q", ok, policy)
				})
				spellings := dodges
				if c.method == "GET" {
					spellings = append(spellings, struct{ method, path string }{"HEAD", "/v1/search"},
						struct{ method, path string }{"HEAD", "/v1/%73earch?x=1"})
				}
				for _, d := range spellings {
					method := c.method
					if d.method != "" {
						method = d.method
					}
					if ok, policy := ask(t, key, method, d.path); ok || policy != wantPolicy {
						t.Errorf("%s %s: allowed %v policy %q, want denied by %s", method, d.path, ok, policy, c.rule)
					}
				}
			}
		})
	}
}
