package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/access"
	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/checkapi"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
	"github.com/tollgate/tollgate/internal/testenv/apispec"
	"github.com/tollgate/tollgate/internal/testenv/stripetest"
	"github.com/tollgate/tollgate/internal/usage"
)

// The OpenAPI document at the repository root must describe both servers
// as they really answer. TestOpenAPI drives a real admin server and a real
// check API through a scenario that calls every documented operation,
// records every exchange, and validates each response (status, headers,
// body) against the document — and each request that succeeded, so that
// the document's request schemas accept what the servers accept.

const specPath = "../../openapi.yaml"

// closeObjects forbids properties the document does not list, in every
// object schema that does not say otherwise: the document lets clients
// expect additions, but the servers must not add anything undocumented.
func closeObjects(s *openapi3.Schema, seen map[*openapi3.Schema]bool) {
	if s == nil || seen[s] {
		return
	}
	seen[s] = true
	if len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
		no := false
		s.AdditionalProperties.Has = &no
	}
	for _, p := range s.Properties {
		closeObjects(p.Value, seen)
	}
	if s.Items != nil {
		closeObjects(s.Items.Value, seen)
	}
	if s.AdditionalProperties.Schema != nil {
		closeObjects(s.AdditionalProperties.Schema.Value, seen)
	}
	for _, list := range [][]*openapi3.SchemaRef{s.AllOf, s.AnyOf, s.OneOf} {
		for _, x := range list {
			closeObjects(x.Value, seen)
		}
	}
}

// exchange is one request and its response, both bodies kept.
type exchange struct {
	req     *http.Request
	reqBody []byte
	res     *http.Response
	resBody []byte
}

// recorder is a RoundTripper that keeps every exchange.
type recorder struct {
	mu        sync.Mutex
	exchanges []exchange
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		reqBody, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resBody, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(resBody))
	r.mu.Lock()
	r.exchanges = append(r.exchanges, exchange{req: req, reqBody: reqBody, res: res, resBody: resBody})
	r.mu.Unlock()
	return res, nil
}

func TestOpenAPI(t *testing.T) {
	doc := apispec.Load(t, specPath)

	// The document lists exactly the admin server's API routes (the check
	// API's are checked by being called below); the web console's pages
	// are not part of the API.
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	for _, r := range admintest.Routes(t, false) {
		if !documented[r.String()] {
			t.Errorf("route %s is not in %s", r, specPath)
		}
	}

	rec := &recorder{}
	client := &http.Client{Transport: rec}
	scenario(t, client)
	if t.Failed() {
		return
	}

	// Validate every exchange, wherever the document's servers say it goes.
	doc.Servers = nil
	for _, item := range doc.Paths.Map() {
		item.Servers = nil
	}
	seen := map[*openapi3.Schema]bool{}
	for _, s := range doc.Components.Schemas {
		closeObjects(s.Value, seen)
	}
	finder, err := gorillamux.NewRouter(doc)
	testenv.Must(t, err)
	called := map[string]map[int]bool{}
	for _, ex := range rec.exchanges {
		name := fmt.Sprintf("%s %s → %d", ex.req.Method, ex.req.URL.Path, ex.res.StatusCode)
		route, params, err := finder.FindRoute(ex.req)
		if err != nil {
			t.Errorf("%s: not in the document: %v", name, err)
			continue
		}
		if called[route.Operation.OperationID] == nil {
			called[route.Operation.OperationID] = map[int]bool{}
		}
		called[route.Operation.OperationID][ex.res.StatusCode] = true
		validateExchange(t, name, ex, route, params)
	}
	var missing []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if len(called[op.OperationID]) == 0 {
				missing = append(missing, method+" "+path)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the scenario never called:\n%s", strings.Join(missing, "\n"))
	}
	t.Logf("validated %d exchanges over %d operations", len(rec.exchanges), len(called))
}

// TestOpenAPIDocumentsForbidden: an API route whose access check (see
// internal/adminapi/routes.go and access.go) refuses a tenant user within
// its own tenant — the operator routes, a tenant's operator-only ones,
// and its key managers' to a tenant_viewer — answers 403, so it documents
// 403; a GET of a tenant's that lets every user of the tenant through
// never answers 403, so it does not document one.
func TestOpenAPIDocumentsForbidden(t *testing.T) {
	doc := apispec.Load(t, specPath)
	router := adminapi.NewHandler(adminapi.Config{Log: slog.New(slog.DiscardHandler)})
	type route struct {
		method, pattern string
		middlewares     []func(http.Handler) http.Handler
	}
	var routes []route
	var shared []func(http.Handler) http.Handler
	testenv.Must(t, chi.Walk(router.(chi.Routes), func(method, pattern string, _ http.Handler, mws ...func(http.Handler) http.Handler) error {
		if !strings.HasPrefix(pattern, "/api/") {
			return nil
		}
		routes = append(routes, route{method, pattern, mws})
		if method+" "+pattern == "POST /api/v1/login" { // public: only what every API route has
			shared = mws
		}
		return nil
	}))
	if len(shared) == 0 {
		t.Fatal("no POST /api/v1/login among the routes")
	}

	// refuses runs the route's own access check (its middlewares after the
	// shared ones) for a user of role in the path's tenant, and reports
	// whether it answered 403.
	const tenantID = "00000000-0000-0000-0000-0000000000aa"
	pointer := func(mw func(http.Handler) http.Handler) uintptr { return reflect.ValueOf(mw).Pointer() }
	refuses := func(r route, role auth.Role) bool {
		t.Helper()
		for i, mw := range shared {
			if len(r.middlewares) <= i || pointer(r.middlewares[i]) != pointer(mw) {
				t.Fatalf("%s %s: its middlewares do not start with the API's", r.method, r.pattern)
			}
		}
		rctx := chi.NewRouteContext()
		rctx.URLParams.Add("tenantID", tenantID)
		req := httptest.NewRequest(r.method, r.pattern, nil)
		ctx := context.WithValue(req.Context(), chi.RouteCtxKey, rctx)
		req = req.WithContext(access.WithSession(ctx, auth.Session{User: auth.User{Role: role, TenantID: tenantID}}))
		reached := false
		w := httptest.NewRecorder()
		chi.Chain(r.middlewares[len(shared):]...).HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }).ServeHTTP(w, req)
		if !reached && w.Code != http.StatusForbidden {
			t.Errorf("%s %s: the access check answers a %s of the tenant %d, want 403 or the handler", r.method, r.pattern, role, w.Code)
		}
		return !reached && w.Code == http.StatusForbidden
	}

	classified := map[string]bool{}
	for _, r := range routes {
		name := r.method + " " + r.pattern
		item := doc.Paths.Find(r.pattern)
		if item == nil || item.GetOperation(r.method) == nil {
			continue // TestOpenAPI names the routes the document lacks
		}
		documented := item.GetOperation(r.method).Responses.Value("403") != nil
		refused := refuses(r, auth.RoleTenantViewer) || refuses(r, auth.RoleTenantAdmin)
		classified[name] = refused
		switch {
		case refused && !documented:
			t.Errorf("%s refuses tenant users with 403, which %s does not document", name, specPath)
		case !refused && documented && r.method == "GET" && strings.Contains(r.pattern, "{tenantID}"):
			t.Errorf("%s lets every user of the tenant through, yet %s documents a 403 it never answers", name, specPath)
		}
	}
	// The check above must see the access checks at all.
	for name, want := range map[string]bool{"GET /api/v1/plans": true, "GET /api/v1/plans/{planID}/quota": true,
		"GET /api/v1/webhooks/endpoints": true, "PUT /api/v1/tenants/{tenantID}/overrides": true,
		"POST /api/v1/tenants/{tenantID}/keys": true, "GET /api/v1/tenants/{tenantID}": false, "GET /api/v1/me": false} {
		if got, ok := classified[name]; !ok || got != want {
			t.Errorf("%s: refuses tenant users = %v (found %v), want %v", name, got, ok, want)
		}
	}
}

func validateExchange(t *testing.T, name string, ex exchange, route *routers.Route, params map[string]string) {
	t.Helper()
	ctx := context.Background()
	req := ex.req.Clone(ctx)
	req.Body = io.NopCloser(bytes.NewReader(ex.reqBody))
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	// Requests the server accepted must be ones the document allows; the
	// refused ones are refused on purpose.
	if ex.res.StatusCode < 300 {
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			t.Errorf("%s: request does not match the document: %v\nbody: %s", name, err, ex.reqBody)
		}
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 ex.res.StatusCode,
		Header:                 ex.res.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	out.SetBodyBytes(ex.resBody)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("%s: response does not match the document: %v\nbody: %s", name, err, ex.resBody)
	}
}

// scenario calls every operation of both servers, answering with each
// status worth documenting.
func scenario(t *testing.T, client *http.Client) {
	dbURL := testenv.DatabaseURL(t)
	admin := startAdmin(t, dbURL, withSettings(stripetest.Start(t).Settings(), map[string]string{"TOLLGATE_ADMIN_LOGIN_LIMIT": "3"}))
	createUser(t, admin.DB, "ops@example.com", auth.RoleOperator, "")
	do := func(method, path, token string, body any, status int) response {
		t.Helper()
		res := callWith(t, client, method, admin.URL+path, token, body)
		if res.StatusCode != status {
			t.Fatalf("%s %s = %d %s, want %d", method, path, res.StatusCode, res.Body, status)
		}
		return res
	}
	raw := func(method, path, token, body string, status int) {
		t.Helper()
		req, _ := http.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if res := sendWith(t, client, req); res.StatusCode != status {
			t.Fatalf("%s %s = %d %s, want %d", method, path, res.StatusCode, res.Body, status)
		}
	}

	do("GET", "/healthz", "", nil, 200)
	do("GET", "/readyz", "", nil, 200)
	do("POST", "/api/v1/login", "", map[string]string{"email": "ops@example.com", "password": "wrong password"}, 401)
	do("POST", "/api/v1/login", "", map[string]string{"email": "", "password": ""}, 422)
	raw("POST", admin.URL+"/api/v1/login", "", `{"email":`, 400)
	var lr adminapi.LoginResponse
	do("POST", "/api/v1/login", "", map[string]string{"email": "ops@example.com", "password": "password-ops@example.com"}, 200).Decode(t, &lr)
	op := lr.Token
	do("GET", "/api/v1/me", op, nil, 200)
	do("GET", "/api/v1/me", "", nil, 401)

	// Plans.
	ruleSet := func(limit int64) []map[string]any {
		return []map[string]any{
			{"name": "hourly", "limit": limit, "period_us": limiter.HourUS},
			{"name": "search", "algorithm": "leaky_bucket", "limit": 10, "period_us": limiter.SecondUS, "burst": 5,
				"resource": "POST /v1/search", "scope": "tenant", "mode": "shadow", "failure_mode": "closed",
				"options": map[string]any{"leaky_mode": "shape"}},
		}
	}
	plan := map[string]any{"name": "pro", "display_name": "Pro", "currency": "EUR", "base_fee_minor": 4900,
		"included_units": 1000, "overage_unit_minor": 2,
		"tiers": []map[string]any{{"up_to": 1000, "unit_minor": 2}, {"up_to": nil, "unit_minor": 1}},
		"rules": ruleSet(2)}
	do("POST", "/api/v1/plans", op, map[string]any{"name": "Bad", "rules": []map[string]any{{"name": "x", "limit": 1}}}, 422)
	raw("POST", admin.URL+"/api/v1/plans", op, `{"name": "x", "nope": 1}`, 400)
	raw("POST", admin.URL+"/api/v1/plans", op, `{"name": "`+strings.Repeat("x", adminapi.MaxBody)+`"}`, 413)
	var pro struct {
		ID int64 `json:"id"`
	}
	do("POST", "/api/v1/plans", op, plan, 201).Decode(t, &pro)
	do("POST", "/api/v1/plans", op, plan, 409)
	do("GET", "/api/v1/plans?limit=1", op, nil, 200)
	do("GET", "/api/v1/plans?limit=1000", op, nil, 422)
	planPath := fmt.Sprintf("/api/v1/plans/%d", pro.ID)
	do("GET", planPath, op, nil, 200)
	do("GET", "/api/v1/plans/999999", op, nil, 404)
	do("PUT", planPath, op, plan, 200)
	do("PUT", "/api/v1/plans/999999", op, plan, 404)
	do("PUT", planPath, op, map[string]any{"name": "pro", "base_fee_minor": -1}, 422)
	do("POST", planPath+"/archive", op, nil, 200)
	do("POST", planPath+"/unarchive", op, nil, 200)
	do("POST", "/api/v1/plans/999999/archive", op, nil, 404)
	do("POST", "/api/v1/plans/999999/unarchive", op, nil, 404)
	var free struct {
		ID int64 `json:"id"`
	}
	// In pro's currency: acme moves from free to pro mid-month, below.
	do("POST", "/api/v1/plans", op, map[string]any{"name": "free", "currency": "EUR"}, 201).Decode(t, &free)
	var spare struct {
		ID int64 `json:"id"`
	}
	do("POST", "/api/v1/plans", op, map[string]any{"name": "spare"}, 201).Decode(t, &spare)
	do("DELETE", fmt.Sprintf("/api/v1/plans/%d", spare.ID), op, nil, 204)
	do("DELETE", "/api/v1/plans/999999", op, nil, 404)

	// Tenants.
	var acme struct {
		ID string `json:"id"`
	}
	do("POST", "/api/v1/tenants", op, map[string]any{"name": "acme", "plan_id": free.ID}, 201).Decode(t, &acme)
	do("POST", "/api/v1/tenants", op, map[string]any{"name": "acme", "plan_id": free.ID}, 409)
	do("POST", "/api/v1/tenants", op, map[string]any{"name": ""}, 422)
	do("DELETE", fmt.Sprintf("/api/v1/plans/%d", free.ID), op, nil, 409)
	viewer := sessionFor(t, admin.DB, createUser(t, admin.DB, "viewer@acme.example", auth.RoleTenantViewer, acme.ID))
	do("GET", "/api/v1/plans", viewer, nil, 403)
	do("GET", "/api/v1/tenants?q=acm&status=active", op, nil, 200)
	do("GET", "/api/v1/tenants?status=odd", op, nil, 422)
	tenant := "/api/v1/tenants/" + acme.ID
	unknown := "/api/v1/tenants/00000000-0000-0000-0000-000000000000"
	do("GET", tenant, viewer, nil, 200)
	do("GET", unknown, op, nil, 404)
	do("POST", tenant+"/plan", op, map[string]any{"plan_id": pro.ID}, 200)
	do("POST", tenant+"/plan", op, map[string]any{"plan_id": pro.ID}, 422)
	do("POST", tenant+"/plan", viewer, map[string]any{"plan_id": free.ID}, 403)
	do("GET", tenant+"/plan-changes?limit=1", viewer, nil, 200)
	do("GET", unknown+"/plan-changes", op, nil, 404)
	do("POST", tenant+"/suspend", op, nil, 200)
	do("POST", tenant+"/resume", op, nil, 200)
	do("POST", unknown+"/resume", op, nil, 404)
	do("PUT", tenant+"/overrides", op, map[string]any{"rules": []map[string]any{{"name": "daily", "algorithm": "fixed_window",
		"limit": 1000, "period_us": limiter.DayUS, "options": map[string]any{"calendar": "day"}}}}, 200)
	do("PUT", tenant+"/overrides", op, map[string]any{"rules": []map[string]any{{"name": "x", "limit": -1}}}, 422)
	do("GET", tenant+"/overrides", viewer, nil, 200)
	do("PUT", fmt.Sprintf("/api/v1/plans/%d/quota", pro.ID), op, map[string]any{"thresholds": []map[string]any{{"percent": 80}, {"remaining": 100}},
		"spend_cap_default_minor": 1000, "spend_cap_max_minor": 5000}, 200)
	do("PUT", fmt.Sprintf("/api/v1/plans/%d/quota", pro.ID), op, map[string]any{"spend_cap_default_minor": -1}, 422)
	do("GET", fmt.Sprintf("/api/v1/plans/%d/quota", pro.ID), op, nil, 200)
	do("GET", fmt.Sprintf("/api/v1/plans/%d/quota", pro.ID), viewer, nil, 403)
	do("PUT", tenant+"/quota", op, map[string]any{"thresholds": []map[string]any{{"units": 5000}}, "spend_cap_minor": 500}, 200)
	do("PUT", tenant+"/quota", op, map[string]any{"spend_cap_minor": 6000}, 422)
	do("GET", tenant+"/quota", viewer, nil, 200)
	do("GET", unknown+"/quota", op, nil, 404)
	do("GET", fmt.Sprintf("/api/v1/plans/%d/credits", pro.ID), op, nil, 200)
	do("GET", "/api/v1/plans/999999/credits", op, nil, 404)
	do("PUT", fmt.Sprintf("/api/v1/plans/%d/credits", pro.ID), op, map[string]any{"mode": "overage", "overdraft": 50, "low_threshold": 100}, 200)
	do("PUT", fmt.Sprintf("/api/v1/plans/%d/credits", pro.ID), op, map[string]any{"mode": "sometimes"}, 422)
	do("GET", fmt.Sprintf("/api/v1/plans/%d/credits", pro.ID), op, nil, 200)
	do("POST", tenant+"/credits/grants", op, map[string]any{"amount": 1000, "expires_at": "2999-01-01T00:00:00Z", "cause": "prepaid pack"}, 201)
	do("POST", tenant+"/credits/grants", op, map[string]any{"amount": 0, "cause": "x"}, 422)
	do("POST", tenant+"/credits/grants", viewer, map[string]any{"amount": 5, "cause": "x"}, 403)
	do("POST", tenant+"/credits/adjustments", op, map[string]any{"units": -10, "cause": "correction"}, 200)
	do("POST", tenant+"/credits/adjustments", op, map[string]any{"units": 0, "cause": "correction"}, 422)
	// With an Idempotency-Key: made, replayed, refused for another body,
	// refused for a key that is not one.
	keyed := func(path, key, body string, status int) {
		t.Helper()
		req, _ := http.NewRequest("POST", admin.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+op)
		req.Header.Set("Idempotency-Key", key)
		if res := sendWith(t, client, req); res.StatusCode != status {
			t.Fatalf("POST %s with key %q = %d %s, want %d", path, key, res.StatusCode, res.Body, status)
		}
	}
	for range 2 {
		keyed(tenant+"/credits/grants", "order-4711", `{"amount": 500, "cause": "prepaid pack"}`, 201)
		keyed(tenant+"/credits/adjustments", "fix-1", `{"units": -5, "cause": "correction"}`, 200)
	}
	keyed(tenant+"/credits/grants", "order-4711", `{"amount": 501, "cause": "prepaid pack"}`, 409)
	keyed(tenant+"/credits/adjustments", "order-4711", `{"units": -5, "cause": "correction"}`, 409)
	keyed(tenant+"/credits/grants", strings.Repeat("k", 201), `{"amount": 500, "cause": "prepaid pack"}`, 422)
	do("GET", tenant+"/credits", viewer, nil, 200)
	do("GET", unknown+"/credits", op, nil, 404)
	do("GET", tenant+"/credits/ledger?limit=1", viewer, nil, 200)
	do("GET", tenant+"/credits/ledger?kind=gift", viewer, nil, 422)

	// Keys.
	var key adminapi.KeySecretResponse
	do("POST", tenant+"/keys", op, map[string]any{"name": "ci", "metadata": map[string]string{"team": "build"},
		"expires_at": time.Now().Add(time.Hour)}, 201).Decode(t, &key)
	do("POST", tenant+"/keys", viewer, map[string]any{"name": "nope"}, 403)
	do("POST", tenant+"/keys", op, map[string]any{"expires_at": time.Now().Add(-time.Hour)}, 422)
	do("GET", tenant+"/keys", viewer, nil, 200)
	keyPath := tenant + "/keys/" + key.Key.ID
	do("GET", keyPath, viewer, nil, 200)
	do("GET", tenant+"/keys/00000000-0000-0000-0000-000000000000", op, nil, 404)
	do("PATCH", keyPath, op, map[string]any{"name": "ci-2", "expires_at": nil, "metadata": map[string]string{}}, 200)
	do("PATCH", keyPath, op, map[string]any{}, 422)
	var rotated adminapi.KeySecretResponse
	do("POST", keyPath+"/rotate", op, nil, 201).Decode(t, &rotated)
	do("POST", keyPath+"/rotate", op, map[string]any{"grace_period_s": -5}, 422)
	do("POST", keyPath+"/revoke", op, nil, 200)
	do("POST", keyPath+"/rotate", op, nil, 409)
	var crowded struct {
		ID string `json:"id"`
	}
	do("POST", "/api/v1/tenants", op, map[string]any{"name": "crowded", "plan_id": free.ID}, 201).Decode(t, &crowded)
	if _, err := admin.DB.Exec(context.Background(), `INSERT INTO api_keys (tenant_id, hash, prefix)
		SELECT $1, sha256(convert_to('crowded' || g, 'UTF8')), 'tg_test' FROM generate_series(1, $2) g`,
		crowded.ID, tenants.MaxLiveKeys); err != nil {
		t.Fatal(err)
	}
	do("POST", "/api/v1/tenants/"+crowded.ID+"/keys", op, map[string]any{"name": "one too many"}, 409)

	// Service tokens.
	var gw, spareToken adminapi.ServiceTokenResponse
	do("POST", "/api/v1/service-tokens", op, map[string]any{"name": "gateway", "ttl_s": 3600}, 201).Decode(t, &gw)
	do("POST", "/api/v1/service-tokens", op, map[string]any{"name": "spare"}, 201).Decode(t, &spareToken)
	do("POST", "/api/v1/service-tokens", op, map[string]any{"name": ""}, 422)
	do("GET", "/api/v1/service-tokens", op, nil, 200)
	do("POST", "/api/v1/service-tokens/"+spareToken.ServiceToken.ID+"/revoke", op, nil, 200)
	do("POST", "/api/v1/service-tokens/00000000-0000-0000-0000-000000000000/revoke", op, nil, 404)

	// Usage and statements, on real usage (seedUsage): globex has been on
	// pro since the start of last month, which is closed and has late
	// usage; this month is open. acme's viewer reads its own tenant only.
	var globex struct {
		ID string `json:"id"`
	}
	do("POST", "/api/v1/tenants", op, map[string]any{"name": "globex", "plan_id": pro.ID}, 201).Decode(t, &globex)
	var web adminapi.KeySecretResponse
	do("POST", "/api/v1/tenants/"+globex.ID+"/keys", op, map[string]any{"name": "web"}, 201).Decode(t, &web)
	last, this := seedUsage(t, admin.DB, globex.ID, web.Key.ID)
	do("POST", "/api/v1/tenants/"+globex.ID+"/plan", op, map[string]any{"plan_id": free.ID,
		"effective_at": last.Start().Add(24 * time.Hour)}, 409) // last month is closed
	globexAdmin := sessionFor(t, admin.DB, createUser(t, admin.DB, "admin@globex.example", auth.RoleTenantAdmin, globex.ID))
	lastMonth := "from=" + last.Start().Format(time.RFC3339) + "&to=" + last.End().Format(time.RFC3339)
	usage := "/api/v1/usage/tenants/" + globex.ID
	do("GET", usage+"/series?granularity=day&"+lastMonth, op, nil, 200)
	do("GET", usage+"/series", globexAdmin, nil, 200)
	do("GET", usage+"/series?granularity=week", op, nil, 422)
	do("GET", usage+"/series", viewer, nil, 404)
	do("GET", usage+"/series", "", nil, 401)
	do("GET", usage+"/top-keys?limit=5&"+lastMonth, op, nil, 200)
	do("GET", usage+"/top-keys?limit=0", op, nil, 422)
	do("GET", usage+"/top-keys", viewer, nil, 404)
	do("GET", usage+"/top-resources?"+lastMonth, globexAdmin, nil, 200)
	do("GET", usage+"/top-resources?from=soon", op, nil, 422)
	do("GET", usage+"/top-resources", viewer, nil, 404)
	do("GET", usage+"/rejections?"+lastMonth, op, nil, 200)
	do("GET", "/api/v1/usage/tenants/"+acme.ID+"/rejections", viewer, nil, 200)
	do("GET", usage+"/rejections?from=2026-10-02T00:00:00Z&to=2026-10-01T00:00:00Z", op, nil, 422)
	do("GET", usage+"/rejections", viewer, nil, 404)
	do("GET", "/api/v1/usage/totals?"+lastMonth, op, nil, 200)
	do("GET", "/api/v1/usage/totals?to=later", op, nil, 422)
	do("GET", "/api/v1/usage/totals", viewer, nil, 403)
	do("GET", "/api/v1/usage/totals", "", nil, 401)
	do("GET", "/api/v1/usage/anonymous/top-ips?limit=2&"+lastMonth, op, nil, 200)
	do("GET", "/api/v1/usage/anonymous/top-ips?limit=5000", op, nil, 422)
	do("GET", "/api/v1/usage/anonymous/top-ips", viewer, nil, 403)

	do("GET", "/api/v1/statements?month="+last.String(), op, nil, 200)
	if res := do("GET", "/api/v1/statements?format=csv&month="+last.String(), op, nil, 200); !strings.Contains(string(res.Body), ",total,,,,,,,,,,,,7400") {
		t.Errorf("CSV statements of %s:\n%s", last, res.Body)
	}
	do("GET", "/api/v1/statements?month=2026-13", op, nil, 422)
	do("GET", "/api/v1/statements?month="+last.String()+"&format=xml", op, nil, 422)
	do("GET", "/api/v1/statements?month="+last.String(), viewer, nil, 403)
	do("GET", "/api/v1/statements?month="+last.String(), "", nil, 401)
	do("GET", "/api/v1/statements/late?month="+last.String(), op, nil, 200)
	do("GET", "/api/v1/statements/late?month="+last.String()+"&tenant="+globex.ID, globexAdmin, nil, 200)
	do("GET", "/api/v1/statements/late?month="+last.String()+"&tenant=nope", op, nil, 422)
	do("GET", "/api/v1/statements/late?month=soon", op, nil, 422)
	do("GET", "/api/v1/statements/late?month="+last.String()+"&tenant="+globex.ID, viewer, nil, 404)
	do("GET", "/api/v1/statements/late?month="+last.String(), viewer, nil, 403)
	statement := "/api/v1/statements/" + globex.ID + "/"
	do("GET", statement+last.String(), op, nil, 200)
	do("GET", statement+this.String(), globexAdmin, nil, 200)
	do("GET", statement+this.String()+"?format=csv", globexAdmin, nil, 200)
	req, _ := http.NewRequest("GET", admin.URL+statement+last.String(), nil)
	req.Header.Set("Accept", "text/csv")
	req.Header.Set("Authorization", "Bearer "+op)
	if res := sendWith(t, client, req); res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/csv") {
		t.Fatalf("GET %s with Accept: text/csv = %d %s %s", req.URL.Path, res.StatusCode, res.Header.Get("Content-Type"), res.Body)
	}
	do("GET", statement+"2026-13", op, nil, 422)
	do("GET", statement+this.String()+"?format=xml", op, nil, 422)
	do("GET", statement+this.String(), viewer, nil, 404)
	do("GET", "/api/v1/statements/00000000-0000-0000-0000-000000000000/"+this.String(), op, nil, 404)
	do("GET", statement+this.String(), "", nil, 401)

	do("POST", "/api/v1/months/"+last.String()+"/close", op, nil, 200) // closed before: nothing changes
	do("POST", "/api/v1/months/"+this.String()+"/close", op, nil, 422)
	do("POST", "/api/v1/months/"+last.String()+"/close", viewer, nil, 403)
	billingScenario(t, client, admin.URL, do, op, viewer, acme.ID, last.String())

	// Users.
	var created adminapi.UserCreateResponse
	do("POST", "/api/v1/users", op, map[string]any{"email": "new@globex.example", "role": "tenant_viewer", "tenant_id": globex.ID}, 201).Decode(t, &created)
	do("POST", "/api/v1/users", op, map[string]any{"email": "ops2@example.com", "role": "operator", "password": "a long enough password"}, 201)
	do("POST", "/api/v1/users", op, map[string]any{"email": "new@globex.example", "role": "tenant_viewer", "tenant_id": globex.ID}, 409)
	do("POST", "/api/v1/users", op, map[string]any{"email": "nope", "role": "king"}, 422)
	do("POST", "/api/v1/users", viewer, map[string]any{"email": "x@example.com", "role": "operator"}, 403)
	do("GET", "/api/v1/users?role=tenant_viewer&q=globex", op, nil, 200)
	do("GET", "/api/v1/users?role=king", op, nil, 422)
	do("GET", "/api/v1/users", viewer, nil, 403)
	do("POST", "/api/v1/users/"+created.User.ID+"/sessions/revoke", op, nil, 200)
	do("POST", "/api/v1/users/"+created.User.ID+"/disable", op, nil, 200)
	do("POST", "/api/v1/users/00000000-0000-0000-0000-000000000000/disable", op, nil, 404)
	do("POST", "/api/v1/users/00000000-0000-0000-0000-000000000000/sessions/revoke", op, nil, 404)
	do("POST", "/api/v1/users/"+lr.User.ID+"/disable", op, nil, 409)

	do("GET", "/api/v1/audit?limit=5&action=key.*&from=2020-01-01T00:00:00Z", op, nil, 200)
	do("GET", "/api/v1/audit?from=soon", op, nil, 422)
	webhookScenario(t, do, op, tenant, "/api/v1")
	webhookScenario(t, do, op, tenant, tenant)
	// The operators' webhook routes refuse tenant users, whatever the
	// endpoint.
	for _, path := range []string{"/api/v1/events", "/api/v1/webhooks/endpoints", "/api/v1/webhooks/endpoints/00000000-0000-0000-0000-000000000000",
		"/api/v1/webhooks/endpoints/00000000-0000-0000-0000-000000000000/deliveries"} {
		do("GET", path, viewer, nil, 403)
	}
	do("POST", "/api/v1/logout", op, nil, 204)
	// The second and third failures of this address on this email spend
	// its budget (TOLLGATE_ADMIN_LOGIN_LIMIT counts failures only): the
	// next attempt is limited, right password or not.
	do("POST", "/api/v1/login", "", map[string]string{"email": "ops@example.com", "password": "wrong again"}, 401)
	do("POST", "/api/v1/login", "", map[string]string{"email": "ops@example.com", "password": "wrong once more"}, 401)
	do("POST", "/api/v1/login", "", map[string]string{"email": "ops@example.com", "password": "password-ops@example.com"}, 429)

	// The check API (and a tenant with a key for forward-auth, in its
	// first snapshot).
	ts := tenants.NewStore(admin.DB)
	gatewayCo, err := ts.Create(context.Background(), "gateway-co", free.ID)
	testenv.Must(t, err)
	fresh, _, err := ts.IssueKey(context.Background(), gatewayCo.ID, "k", nil)
	testenv.Must(t, err)
	tokensPlan, err := plans.NewStore(admin.DB).Put(context.Background(), plans.Plan{Name: "tokens", Currency: "USD",
		Rules: []plans.Rule{{Name: "tokens", Limit: 100, PeriodUS: 3_600_000_000, Options: plans.Options{Hold: true}},
			{Name: "inflight", Algorithm: limiter.Concurrency, Limit: 2, PeriodUS: 60_000_000}}})
	testenv.Must(t, err)
	holder, err := ts.Create(context.Background(), "holder-co", tokensPlan.ID)
	testenv.Must(t, err)
	holderKey, _, err := ts.IssueKey(context.Background(), holder.ID, "k", nil)
	testenv.Must(t, err)
	apiURL := startAPI(t, dbURL)
	check := func(token string, body any, status int) response {
		t.Helper()
		res := callWith(t, client, "POST", apiURL+"/v1/check", token, body)
		if res.StatusCode != status {
			t.Fatalf("check %v = %d %s, want %d", body, res.StatusCode, res.Body, status)
		}
		return res
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if res := callWith(t, client, "GET", apiURL+path, "", nil); res.StatusCode != 200 {
			t.Fatalf("GET %s = %d", path, res.StatusCode)
		}
	}
	check(gw.Token, map[string]any{"key": rotated.Secret, "resource": "GET /repos"}, 200)
	check(gw.Token, map[string]any{"key": rotated.Secret, "resource": "POST /v1/search", "cost": 1}, 200)
	res := check(gw.Token, map[string]any{"key": rotated.Secret}, 200) // the hourly limit of 2 is spent
	if res.Header.Get("Retry-After") == "" || !strings.Contains(string(res.Body), `"rate_limited"`) {
		t.Fatalf("third check: %s %v", res.Body, res.Header)
	}
	check(gw.Token, map[string]any{"key": key.Secret, "dry_run": true}, 200) // revoked
	check(gw.Token, map[string]any{"ip": "203.0.113.7"}, 200)                // no anonymous plan
	check(gw.Token, map[string]any{"key": "tg_nope"}, 200)                   // invalid key
	check(gw.Token, map[string]any{"cost": -1, "ip": "nope"}, 422)
	check(gw.Token, map[string]any{"surprise": 1}, 400)
	check(spareToken.Token, map[string]any{"ip": "203.0.113.7"}, 401)
	check("", map[string]any{"ip": "203.0.113.7"}, 401)
	check(gw.Token, map[string]any{"ip": "203.0.113.7", "resource": strings.Repeat("x", 17<<10)}, 413)

	// A hold and its settlement (given all back: the state is as before).
	held := check(gw.Token, map[string]any{"key": holderKey, "cost": 1, "hold": true, "hold_ttl_s": 60}, 200)
	var hold struct {
		HoldID string `json:"hold_id"`
	}
	testenv.Must(t, json.Unmarshal(held.Body, &hold))
	settle := func(body any, status int) {
		t.Helper()
		if res := callWith(t, client, "POST", apiURL+"/v1/settle", gw.Token, body); res.StatusCode != status {
			t.Fatalf("settle %v = %d %s, want %d", body, res.StatusCode, res.Body, status)
		}
	}
	settle(map[string]any{"hold_id": hold.HoldID, "cost": 0}, 200)
	settle(map[string]any{"hold_id": hold.HoldID, "cost": 0}, 200) // repeated
	settle(map[string]any{"hold_id": hold.HoldID, "cost": 1}, 409)
	unknownHold := base64.RawURLEncoding.EncodeToString([]byte(`{"g":65,"n":"00","v":"authenticated"}`))
	settle(map[string]any{"hold_id": unknownHold, "cost": 1}, 404)
	settle(map[string]any{"hold_id": "", "cost": -1}, 422)
	settle(map[string]any{"hold_id": hold.HoldID, "cost": 1, "surprise": true}, 400)
	check(gw.Token, map[string]any{"key": fresh, "hold": true, "dry_run": true}, 422)

	// A lease of a concurrency rule: renewed, released, then gone.
	var lease struct {
		LeaseID string `json:"lease_id"`
	}
	testenv.Must(t, json.Unmarshal(check(gw.Token, map[string]any{"key": holderKey, "cost": 1}, 200).Body, &lease))
	leaseOp := func(op string, body any, status int) {
		t.Helper()
		if res := callWith(t, client, "POST", apiURL+"/v1/"+op, gw.Token, body); res.StatusCode != status {
			t.Fatalf("%s %v = %d %s, want %d", op, body, res.StatusCode, res.Body, status)
		}
	}
	leaseOp("renew", map[string]any{"lease_id": lease.LeaseID}, 200)
	leaseOp("release", map[string]any{"lease_id": lease.LeaseID}, 200)
	leaseOp("release", map[string]any{"lease_id": lease.LeaseID}, 200)
	leaseOp("renew", map[string]any{"lease_id": lease.LeaseID}, 404)
	leaseOp("renew", map[string]any{"lease_id": ""}, 422)
	leaseOp("release", map[string]any{"lease_id": "not a lease"}, 422)
	leaseOp("release", map[string]any{"lease_id": lease.LeaseID, "surprise": true}, 400)

	// Forward-auth, as nginx asks it.
	forward := func(token string, headers map[string]string, status int) {
		t.Helper()
		req, _ := http.NewRequest("GET", apiURL+"/v1/forward-auth", nil)
		req.Header.Set("X-Original-Method", "GET")
		req.Header.Set("X-Original-URI", "/repos?page=2")
		req.Header.Set("X-Forwarded-For", "203.0.113.8")
		if token != "" {
			req.Header.Set("X-Tollgate-Service-Token", token)
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		if res := sendWith(t, client, req); res.StatusCode != status {
			t.Fatalf("forward-auth %v = %d %s, want %d", headers, res.StatusCode, res.Body, status)
		}
	}
	forward(gw.Token, map[string]string{"X-API-Key": fresh, "X-Tollgate-Cost": "1"}, 200)
	forward(gw.Token, map[string]string{"Authorization": "Bearer " + rotated.Secret}, 429) // spent above
	forward(gw.Token, map[string]string{"X-API-Key": rotated.Secret, "X-Tollgate-Deny-Status": "403"}, 403)
	forward(gw.Token, map[string]string{"X-API-Key": key.Secret}, 403) // revoked
	forward(gw.Token, nil, 401)                                        // no anonymous plan
	forward("", map[string]string{"X-API-Key": fresh}, 401)
	forward(gw.Token, map[string]string{"X-API-Key": fresh, "X-Tollgate-Cost": "lots"}, 400)

	// A key's own standing, with the key itself.
	me := func(key string, status int) {
		t.Helper()
		if res := callWith(t, client, "GET", apiURL+"/v1/me", key, nil); res.StatusCode != status {
			t.Fatalf("GET /v1/me = %d %s, want %d", res.StatusCode, res.Body, status)
		}
	}
	me(key.Secret, 403) // revoked
	me("tg_nope", 401)
	me("", 401)
	for range checkapi.MeBurst {
		me(fresh, 200)
	}
	me(fresh, 429)
}

// webhookScenario calls every webhook route at base (the operators' or a
// tenant's) once or more.
func webhookScenario(t *testing.T, do func(method, path, token string, body any, status int) response, op, tenant, base string) {
	t.Helper()
	// The key revoked above left an event: replay it.
	var evs struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	do("GET", base+"/events?type=key.revoked", op, nil, 200).Decode(t, &evs)
	do("GET", base+"/events?type=nonsense", op, nil, 422)
	do("GET", tenant+"/events", op, nil, 200)
	ep := base + "/webhooks/endpoints"
	do("POST", ep, op, map[string]any{"url": "ftp://example.com/"}, 422)
	var issued struct {
		Endpoint struct {
			ID string `json:"id"`
		} `json:"endpoint"`
	}
	do("POST", ep, op, map[string]any{"url": "http://127.0.0.1:9/hook", "description": "receiver-less"}, 201).Decode(t, &issued)
	one := ep + "/" + issued.Endpoint.ID
	do("GET", ep+"?limit=1", op, nil, 200)
	do("GET", one, op, nil, 200)
	do("GET", ep+"/00000000-0000-0000-0000-000000000000", op, nil, 404)
	do("POST", one+"/rotate", op, nil, 201)
	do("POST", one+"/test", op, nil, 202)
	if len(evs.Items) > 0 {
		do("POST", one+"/replay", op, map[string]any{"event_id": evs.Items[0].ID}, 202)
	}
	do("POST", one+"/replay", op, map[string]any{"from": "2020-01-01T00:00:00Z", "to": "2030-01-01T00:00:00Z"}, 202)
	do("POST", one+"/replay", op, map[string]any{}, 422)
	do("GET", one+"/deliveries", op, nil, 200)
	do("POST", one+"/disable", op, nil, 200)
	do("POST", one+"/test", op, nil, 409)
	do("POST", one+"/enable", op, nil, 200)
	do("DELETE", one, op, nil, 204)
}

// seedUsage gives tenantID (on a plan, with key keyID) real usage through
// the usage store: its plan history is moved to the start of last month;
// last month has 2,500 allowed units (1,500 over pro's 1,000 included),
// denials and anonymous traffic from named addresses, and is closed, then
// receives late usage; this month has a little usage and stays open.
func seedUsage(t *testing.T, db *pgxpool.Pool, tenantID, keyID string) (last, this usage.Month) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	this = usage.MonthOf(now)
	last = usage.MonthOf(this.Start().Add(-time.Hour))
	_, err := db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = $2 WHERE tenant_id = $1`, tenantID, last.Start())
	testenv.Must(t, err)
	closer := billing.NewOps(db, nil)
	apply := func(b metering.Batch) {
		t.Helper()
		b.Version = 1
		_, err := usage.NewStore(db, usage.StoreConfig{}).Apply(ctx, b)
		testenv.Must(t, err)
	}
	minute := last.Start().Add(9*24*time.Hour + 9*time.Hour + 30*time.Minute).Unix()
	apply(metering.Batch{ID: "openapi:1", Rows: []metering.Row{
		{Minute: minute, TenantID: tenantID, KeyID: keyID, Tier: "authenticated", Resource: "GET /repos", Reason: "ok",
			Counts: metering.Counts{Allowed: 1_200, AllowedUnits: 2_400}},
		{Minute: minute, TenantID: tenantID, KeyID: keyID, Tier: "authenticated", Resource: "POST /v1/search", Reason: "ok",
			Counts: metering.Counts{Allowed: 100, AllowedUnits: 100}},
		{Minute: minute + 60, TenantID: tenantID, KeyID: keyID, Tier: "authenticated", Resource: "POST /v1/search",
			Reason: "rate_limited", DeniedBy: "search", Counts: metering.Counts{Denied: 7, DeniedUnits: 7}},
		{Minute: minute + 60, TenantID: tenantID, Tier: "authenticated", Resource: "GET /repos",
			Reason: "tenant_suspended", Counts: metering.Counts{Denied: 2, DeniedUnits: 2}},
		{Minute: minute, Tier: "anonymous", Resource: "GET /repos", Reason: "ok", Counts: metering.Counts{Allowed: 40, AllowedUnits: 40}},
		{Minute: minute, Tier: "anonymous", Resource: "GET /repos", Reason: "key_required", Counts: metering.Counts{Denied: 3, DeniedUnits: 3}},
	}, IPs: []metering.IPRow{
		{Minute: minute, IP: "203.0.113.7", Counts: metering.Counts{Allowed: 30, AllowedUnits: 30}},
		{Minute: minute, IP: "2001:db8::1", Counts: metering.Counts{Allowed: 9, Denied: 3, AllowedUnits: 9, DeniedUnits: 3}},
		{Minute: minute, IP: metering.OtherIP, Counts: metering.Counts{Allowed: 1, AllowedUnits: 1}},
	}})
	apply(metering.Batch{ID: "openapi:2", Rows: []metering.Row{
		{Minute: now.Unix() / 60 * 60, TenantID: tenantID, KeyID: keyID, Tier: "authenticated", Resource: "GET /repos",
			Reason: "ok", Counts: metering.Counts{Allowed: 3, AllowedUnits: 3}},
	}})
	if _, err := closer.CloseMonth(ctx, audit.CLI, last, nil); err != nil {
		t.Fatalf("close %s: %v", last, err)
	}
	apply(metering.Batch{ID: "openapi:late", Rows: []metering.Row{
		{Minute: last.End().Unix() - 60, TenantID: tenantID, KeyID: keyID, Tier: "authenticated", Resource: "GET /repos",
			Reason: "ok", Counts: metering.Counts{Allowed: 5, AllowedUnits: 5}},
	}})
	return last, this
}
