package main

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
)

// documentedRules are the rule shapes openapi.yaml and docs/algorithms.md
// call valid: each must save as a plan rule and as a tenant override.
var documentedRules = []map[string]any{
	{"name": "hourly", "limit": 5000, "period_us": 3_600_000_000},
	{"name": "gcra", "algorithm": "gcra", "limit": 10, "period_us": 1_000_000, "burst": 5},
	{"name": "bucket", "algorithm": "token_bucket", "limit": 10, "period_us": 1_000_000, "burst": 20},
	{"name": "once", "algorithm": "token_bucket", "limit": 0, "period_us": 1_000_000, "burst": 50},
	{"name": "police", "algorithm": "leaky_bucket", "limit": 2, "period_us": 1_000_000, "options": map[string]any{"leaky_mode": "police"}},
	{"name": "shape", "algorithm": "leaky_bucket", "limit": 2, "period_us": 1_000_000, "burst": 4, "options": map[string]any{"leaky_mode": "shape"}},
	{"name": "window", "algorithm": "fixed_window", "limit": 100, "period_us": 60_000_000},
	{"name": "daily", "algorithm": "fixed_window", "limit": 100, "options": map[string]any{"calendar": "day"}},
	{"name": "monthly", "algorithm": "fixed_window", "limit": 100000, "options": map[string]any{"calendar": "month"}},
	{"name": "monthly-period", "algorithm": "fixed_window", "limit": 100000, "period_us": 0, "options": map[string]any{"calendar": "month"}},
	{"name": "anchored", "algorithm": "fixed_window", "limit": 100, "period_us": 3_600_000_000, "options": map[string]any{"anchor": "first_request"}},
	{"name": "log", "algorithm": "sliding_window_log", "limit": 100, "period_us": 60_000_000},
	{"name": "counter", "algorithm": "sliding_window_counter", "limit": 100, "period_us": 60_000_000},
	{"name": "search", "limit": 10, "period_us": 1_000_000, "resource": "POST /v1/search", "scope": "tenant"},
	{"name": "per-ip", "limit": 60, "period_us": 3_600_000_000, "scope": "ip", "mode": "shadow", "failure_mode": "closed"},
	{"name": "prefix", "limit": 60, "period_us": 3_600_000_000, "resource": "GET /repos/*"},
}

// TestEveryDocumentedRuleShapeSaves: each documented-valid rule saves in a
// plan and as an override, and reads back.
func TestEveryDocumentedRuleShapeSaves(t *testing.T) {
	srv, op := operatorSetup(t, nil)
	var tenant struct {
		ID string `json:"id"`
	}
	var plan struct {
		ID int64 `json:"id"`
	}
	res := call(t, "POST", srv.URL+"/api/v1/plans", op, map[string]any{"name": "base", "rules": []any{}})
	want(t, res, http.StatusCreated)
	res.Decode(t, &plan)
	res = call(t, "POST", srv.URL+"/api/v1/tenants", op, map[string]any{"name": "acme", "plan_id": plan.ID})
	want(t, res, http.StatusCreated)
	res.Decode(t, &tenant)
	for i, rule := range documentedRules {
		t.Run(fmt.Sprint(rule["name"]), func(t *testing.T) {
			res := call(t, "POST", srv.URL+"/api/v1/plans", op, map[string]any{"name": fmt.Sprintf("shape-%d", i), "rules": []any{rule}})
			want(t, res, http.StatusCreated)
			var saved struct {
				Rules []map[string]any `json:"rules"`
			}
			res.Decode(t, &saved)
			if len(saved.Rules) != 1 || saved.Rules[0]["name"] != rule["name"] {
				t.Errorf("saved rules = %v", saved.Rules)
			}
			res = call(t, "PUT", srv.URL+"/api/v1/tenants/"+tenant.ID+"/overrides", op, map[string]any{"rules": []any{rule}})
			want(t, res, http.StatusOK)
		})
	}
}

// TestRuleShapesNeverAnswer5xx sends rule shapes made of valid and
// invalid values, in every combination a seeded generator reaches, to the
// plan and override routes: each is saved (2xx) or refused with a problem
// naming fields (4xx), never a 5xx.
func TestRuleShapesNeverAnswer5xx(t *testing.T) {
	srv, op := operatorSetup(t, nil)
	var plan struct {
		ID int64 `json:"id"`
	}
	res := call(t, "POST", srv.URL+"/api/v1/plans", op, map[string]any{"name": "base", "rules": []any{}})
	want(t, res, http.StatusCreated)
	res.Decode(t, &plan)
	var tenant struct {
		ID string `json:"id"`
	}
	res = call(t, "POST", srv.URL+"/api/v1/tenants", op, map[string]any{"name": "acme", "plan_id": plan.ID})
	want(t, res, http.StatusCreated)
	res.Decode(t, &tenant)

	// Each field's valid values, then invalid ones; absent (nil) is valid
	// for every optional field.
	type choices struct{ valid, invalid []any }
	values := map[string]choices{
		"name":         {[]any{"r", "a.b-c_d"}, []any{"", "x y", "quota", nil}},
		"algorithm":    {[]any{"gcra", "token_bucket", "leaky_bucket", "fixed_window", "sliding_window_log", "sliding_window_counter", nil}, []any{"magic", ""}},
		"limit":        {[]any{1, 10, 10_000}, []any{0, 10_001, -1, int64(1) << 62, 1.5, "ten", nil}},
		"period_us":    {[]any{1_000_000, 3_600_000_000}, []any{0, 1, -5, int64(1) << 62, nil}},
		"burst":        {[]any{1, 100, nil}, []any{0, -1, int64(1) << 62}},
		"resource":     {[]any{"*", "GET /repos", "POST /v1/*", nil}, []any{"nope", "GET /a\x00", ""}},
		"scope":        {[]any{"key", "tenant", "ip", nil}, []any{"planet"}},
		"mode":         {[]any{"enforce", "shadow", nil}, []any{"loud"}},
		"failure_mode": {[]any{"open", "closed", nil}, []any{"maybe"}},
		"options": {[]any{nil, map[string]any{}, map[string]any{"calendar": "day"}, map[string]any{"calendar": "month"},
			map[string]any{"leaky_mode": "shape"}, map[string]any{"anchor": "first_request"}},
			[]any{map[string]any{"calendar": "week"}, map[string]any{"leaky_mode": "x"}, map[string]any{"anchor": "x"},
				map[string]any{"calendar": "day", "anchor": "first_request"}}},
	}
	rng := rand.New(rand.NewPCG(7, 11))
	saved := 0
	for i := range 300 {
		rule := map[string]any{}
		for field, c := range values {
			vs := c.valid
			if rng.IntN(10) == 0 {
				vs = c.invalid
			}
			if v := vs[rng.IntN(len(vs))]; v != nil {
				rule[field] = v
			}
		}
		for _, r := range []struct{ method, url string }{
			{"POST", srv.URL + "/api/v1/plans"},
			{"PUT", srv.URL + "/api/v1/tenants/" + tenant.ID + "/overrides"},
		} {
			body := map[string]any{"rules": []any{rule}}
			if r.method == "POST" {
				body["name"] = fmt.Sprintf("fuzz-%d", i)
			}
			res := call(t, r.method, r.url, op, body)
			switch {
			case res.StatusCode >= 500:
				t.Fatalf("%s %v = %d %s", r.method, rule, res.StatusCode, res.Body)
			case res.StatusCode >= 400:
				if p := problemOf(t, res); p.Status != res.StatusCode {
					t.Errorf("%v: problem %+v", rule, p)
				}
			default:
				saved++
			}
		}
	}
	if saved == 0 {
		t.Error("no generated rule was valid: the generator tests only refusals")
	}
	t.Logf("%d of 600 requests saved a rule", saved)
}
