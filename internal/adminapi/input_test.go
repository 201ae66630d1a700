package adminapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/apispec"
)

// call sends method to url with token and body (none when ""), and returns
// the answer.
func call(t *testing.T, method, url, token, body string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	testenv.Must(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	testenv.Must(t, err)
	return answer{res.StatusCode, res.Header, string(b)}
}

// login signs email in and returns its session token.
func login(t *testing.T, url, email, password string) string {
	t.Helper()
	_, out := post(t, url+"/api/v1/login", "", `{"email": "`+email+`", "password": "`+password+`"}`)
	token, _ := out["token"].(string)
	if token == "" {
		t.Fatalf("login %s: %v", email, out)
	}
	return token
}

// inputAdmin serves the admin routes with an operator and a tenant_admin
// of a tenant that has a key and a webhook endpoint. It returns the URL,
// both tokens, and the IDs a route's path names: {tenantID}, {keyID},
// {endpointID} and the plan's ID.
func inputAdmin(t *testing.T) (url, operator, tenantAdmin string, ids map[string]string) {
	t.Helper()
	ctx := context.Background()
	url, password, db := newAdminDB(t)
	p, err := plans.NewStore(db).Put(ctx, plans.Plan{Name: "free"})
	testenv.Must(t, err)
	tn, err := tenants.NewStore(db).Create(ctx, "acme", p.ID)
	testenv.Must(t, err)
	_, err = auth.NewStore(db).CreateUser(ctx, auth.NewUser{Email: "admin@acme.example", Password: password,
		Role: auth.RoleTenantAdmin, TenantID: tn.ID})
	testenv.Must(t, err)
	operator = login(t, url, "ops@example.com", password)
	tenantAdmin = login(t, url, "admin@acme.example", password)
	base := url + "/api/v1/tenants/" + tn.ID
	var key struct {
		Key struct {
			ID string `json:"id"`
		} `json:"key"`
	}
	a := call(t, "POST", base+"/keys", operator, `{"name": "k"}`)
	if err := json.Unmarshal([]byte(a.body), &key); err != nil || key.Key.ID == "" {
		t.Fatalf("create key: %d %s", a.status, a.body)
	}
	var ep struct {
		Endpoint struct {
			ID string `json:"id"`
		} `json:"endpoint"`
	}
	a = call(t, "POST", base+"/webhooks/endpoints", operator, `{"url": "https://hooks.example.com/acme"}`)
	if err := json.Unmarshal([]byte(a.body), &ep); err != nil || ep.Endpoint.ID == "" {
		t.Fatalf("create endpoint: %d %s", a.status, a.body)
	}
	return url, operator, tenantAdmin, map[string]string{
		"{tenantID}": tn.ID, "{keyID}": key.Key.ID, "{endpointID}": ep.Endpoint.ID, "{planID}": strconv.FormatInt(p.ID, 10)}
}

// Times a request may spell in RFC 3339 whose instant, in UTC, is outside
// the years 0000 to 9999 (which JSON cannot write), and the months ending
// there.
const (
	pastYear9999 = "9999-12-31T23:59:59-01:00" // 10000-01-01T00:59:59Z
	beforeYear0  = "0000-01-01T00:00:00+01:00" // -0001-12-31T23:00:00Z
	lastMonth    = "9999-12"                   // ends 10000-01-01
)

// farTimeCases are every time input of the admin API, each given a time
// that cannot be written back: method and route as openapi.yaml names it,
// the query (with the leading "?") or JSON body, the field the 422 must
// name, and whether to send it as the tenant's admin rather than an
// operator.
var farTimeCases = []struct {
	route, query, body, field string
	tenantAdmin               bool
}{
	{route: "POST /api/v1/tenants/{tenantID}/keys", body: `{"name": "far", "expires_at": "` + pastYear9999 + `"}`, field: "expires_at", tenantAdmin: true},
	{route: "POST /api/v1/tenants/{tenantID}/keys", body: `{"name": "far", "expires_at": "` + pastYear9999 + `"}`, field: "expires_at"},
	{route: "PATCH /api/v1/tenants/{tenantID}/keys/{keyID}", body: `{"expires_at": "` + pastYear9999 + `"}`, field: "expires_at"},
	{route: "PATCH /api/v1/tenants/{tenantID}/keys/{keyID}", body: `{"expires_at": "` + beforeYear0 + `"}`, field: "expires_at", tenantAdmin: true},
	{route: "POST /api/v1/tenants/{tenantID}/credits/grants", body: `{"amount": 5, "cause": "far", "expires_at": "` + pastYear9999 + `"}`, field: "expires_at"},
	{route: "POST /api/v1/tenants/{tenantID}/plan", body: `{"plan_id": {planID}, "effective_at": "` + pastYear9999 + `"}`, field: "effective_at"},
	{route: "POST /api/v1/tenants/{tenantID}/plan", body: `{"plan_id": {planID}, "effective_at": "` + beforeYear0 + `"}`, field: "effective_at"},
	{route: "POST /api/v1/webhooks/endpoints/{endpointID}/replay", body: `{"from": "2026-01-01T00:00:00Z", "to": "` + pastYear9999 + `"}`, field: "to"},
	{route: "POST /api/v1/webhooks/endpoints/{endpointID}/replay", body: `{"from": "` + beforeYear0 + `", "to": "2026-01-01T00:00:00Z"}`, field: "from"},
	{route: "POST /api/v1/tenants/{tenantID}/webhooks/endpoints/{endpointID}/replay", body: `{"from": "2026-01-01T00:00:00Z", "to": "` + pastYear9999 + `"}`, field: "to", tenantAdmin: true},
	{route: "POST /api/v1/tenants/{tenantID}/webhooks/endpoints/{endpointID}/replay", body: `{"from": "` + beforeYear0 + `", "to": "2026-01-01T00:00:00Z"}`, field: "from", tenantAdmin: true},
	{route: "GET /api/v1/audit", query: "?from=" + pastYear9999, field: "from"},
	{route: "GET /api/v1/audit", query: "?to=" + pastYear9999, field: "to"},
	{route: "GET /api/v1/audit", query: "?from=" + beforeYear0, field: "from"},
	{route: "GET /api/v1/usage/tenants/{tenantID}/series", query: "?granularity=month&from=9999-01-01T00:00:00Z&to=9999-12-31T00:00:00Z", field: "to", tenantAdmin: true},
	{route: "GET /api/v1/usage/tenants/{tenantID}/series", query: "?from=2026-01-01T00:00:00Z&to=" + pastYear9999, field: "to"},
	{route: "GET /api/v1/usage/tenants/{tenantID}/series", query: "?granularity=day&from=" + beforeYear0 + "&to=0000-01-02T00:00:00Z", field: "from"},
	{route: "GET /api/v1/usage/tenants/{tenantID}/top-keys", query: "?from=9999-12-30T00:00:00Z&to=" + pastYear9999, field: "to"},
	{route: "GET /api/v1/usage/tenants/{tenantID}/top-keys", query: "?from=" + beforeYear0 + "&to=0000-01-02T00:00:00Z", field: "from"},
	{route: "GET /api/v1/usage/tenants/{tenantID}/top-resources", query: "?from=9999-12-30T00:00:00Z&to=" + pastYear9999, field: "to"},
	{route: "GET /api/v1/usage/tenants/{tenantID}/top-resources", query: "?from=" + beforeYear0 + "&to=0000-01-02T00:00:00Z", field: "from"},
	{route: "GET /api/v1/usage/tenants/{tenantID}/rejections", query: "?from=9999-12-30T00:00:00Z&to=" + pastYear9999, field: "to"},
	{route: "GET /api/v1/usage/tenants/{tenantID}/rejections", query: "?from=" + beforeYear0 + "&to=0000-01-02T00:00:00Z", field: "from"},
	{route: "GET /api/v1/usage/totals", query: "?from=9999-12-30T00:00:00Z&to=" + pastYear9999, field: "to"},
	{route: "GET /api/v1/usage/totals", query: "?from=" + beforeYear0 + "&to=0000-01-02T00:00:00Z", field: "from"},
	{route: "GET /api/v1/usage/anonymous/top-ips", query: "?from=9999-12-30T00:00:00Z&to=" + pastYear9999, field: "to"},
	{route: "GET /api/v1/usage/anonymous/top-ips", query: "?from=" + beforeYear0 + "&to=0000-01-02T00:00:00Z", field: "from"},
	{route: "GET /api/v1/statements", query: "?month=" + lastMonth, field: "month"},
	{route: "GET /api/v1/statements", query: "?month=" + lastMonth + "&format=csv", field: "month"},
	{route: "GET /api/v1/statements/late", query: "?month=" + lastMonth, field: "month"},
	{route: "GET /api/v1/statements/{tenantID}/{month}", field: "month", tenantAdmin: true},
	{route: "POST /api/v1/months/{month}/close", field: "month"},
	{route: "GET /api/v1/months/{month}/reconciliation", field: "month"},
}

// TestFarTimesRefused: every time input of the admin API, given a time
// RFC 3339 allows but whose instant in UTC lies past year 9999 or before
// year 0, or a month or range ending past 9999-12-01, is a 422 naming the
// field, never a 500 or a 200 with an empty body. Every time input
// openapi.yaml documents must have a case here.
func TestFarTimesRefused(t *testing.T) {
	url, operator, tenantAdmin, ids := inputAdmin(t)
	ids["{month}"] = lastMonth
	covered := map[string]bool{}
	for _, c := range farTimeCases {
		method, route, _ := strings.Cut(c.route, " ")
		covered[c.route+" "+c.field] = true
		path, body := route, c.body
		for k, v := range ids {
			path, body = strings.ReplaceAll(path, k, v), strings.ReplaceAll(body, k, v)
		}
		token, who := operator, "operator"
		if c.tenantAdmin {
			token, who = tenantAdmin, "tenant admin"
		}
		t.Run(c.route+c.query+" "+who, func(t *testing.T) {
			a := call(t, method, url+path+strings.ReplaceAll(c.query, "+", "%2B"), token, body)
			if a.status != http.StatusUnprocessableEntity {
				t.Fatalf("%d %q, want 422 naming %s", a.status, a.body, c.field)
			}
			if f := a.problemFields(t); f[c.field] == "" {
				t.Errorf("422 names %v, want %s", f, c.field)
			}
		})
	}
	documented := documentedTimeInputs(t)
	if len(documented) < 20 {
		t.Fatalf("openapi.yaml documents %d time inputs: %v", len(documented), documented)
	}
	for _, in := range documented {
		if !covered[in] {
			t.Errorf("%s: a time input openapi.yaml documents has no case in farTimeCases", in)
		}
	}
}

// documentedTimeInputs lists the time inputs of the admin API's
// operations in openapi.yaml, as "METHOD route field": parameters of
// format date-time or of the Month schema, and request body properties
// of format date-time (not read-only).
func documentedTimeInputs(t *testing.T) []string {
	doc := apispec.Load(t, "../../openapi.yaml")
	var ins []string
	for route, item := range doc.Paths.Map() {
		if !strings.HasPrefix(route, "/api/v1/") {
			continue
		}
		for method, op := range item.Operations() {
			params := append(openapi3.Parameters{}, item.Parameters...)
			params = append(params, op.Parameters...)
			for _, p := range params {
				s := p.Value.Schema
				if s != nil && (s.Ref == "#/components/schemas/Month" || s.Value != nil && s.Value.Format == "date-time") {
					ins = append(ins, method+" "+route+" "+p.Value.Name)
				}
			}
			if op.RequestBody == nil || op.RequestBody.Value == nil {
				continue
			}
			if mt := op.RequestBody.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil {
				for _, field := range timeProperties(mt.Schema.Value, "", 0) {
					ins = append(ins, method+" "+route+" "+field)
				}
			}
		}
	}
	sort.Strings(ins)
	return ins
}

// timeProperties returns the paths of s's properties of format date-time.
func timeProperties(s *openapi3.Schema, path string, depth int) []string {
	if s == nil || depth > 8 || s.ReadOnly {
		return nil
	}
	if s.Format == "date-time" {
		return []string{path}
	}
	var out []string
	for _, refs := range []openapi3.SchemaRefs{s.AllOf, s.OneOf, s.AnyOf} {
		for _, r := range refs {
			out = append(out, timeProperties(r.Value, path, depth+1)...)
		}
	}
	if s.Items != nil {
		out = append(out, timeProperties(s.Items.Value, path+"[]", depth+1)...)
	}
	for name, r := range s.Properties {
		p := name
		if path != "" {
			p = path + "." + name
		}
		out = append(out, timeProperties(r.Value, p, depth+1)...)
	}
	return out
}

// TestUnknownTenantReads: every read below a tenant that does not exist
// is a 404 for an operator, as openapi.yaml documents, not an empty page
// or a series of zeros.
func TestUnknownTenantReads(t *testing.T) {
	url, operator, _, _ := inputAdmin(t)
	doc := apispec.Load(t, "../../openapi.yaml")
	var routes []string
	for route, item := range doc.Paths.Map() {
		if strings.HasPrefix(route, "/api/v1/") && strings.Contains(route, "{tenantID}") && item.Get != nil {
			routes = append(routes, route)
		}
	}
	sort.Strings(routes)
	if len(routes) < 10 {
		t.Fatalf("openapi.yaml has %d reads below a tenant: %v", len(routes), routes)
	}
	for _, tenantID := range []string{"00000000-0000-0000-0000-000000000000", "nope"} {
		for _, route := range routes {
			path := strings.NewReplacer("{tenantID}", tenantID, "{month}", "2026-10",
				"{keyID}", "00000000-0000-0000-0000-000000000001", "{endpointID}", "00000000-0000-0000-0000-000000000001").Replace(route)
			if a := call(t, "GET", url+path, operator, ""); a.status != http.StatusNotFound {
				t.Errorf("GET %s: %d %.200s, want 404", path, a.status, a.body)
			}
		}
	}
}
