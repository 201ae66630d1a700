package tollgate_test

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/tollgate/tollgate/internal/testenv/apispec"
)

// openapi.yaml must stay clean under the recommended rules of the common
// OpenAPI linters (Spectral's spectral:oas, Redocly's recommended set):
// lintOpenAPI checks the same rules in Go, so that the tests need neither
// npm nor the network, and the rules of this API besides: which
// operations are public, and which errors every operation documents. The
// two exceptions Redocly is told about (.redocly.lint-ignore.yaml) are
// the exceptions here too: the licence has no URL, and GET /metrics has
// no client error. (cmd/admin's TestOpenAPI checks that the document
// describes what the servers really answer.)

const openAPIFile = "openapi.yaml"

// publicOperations answer without credentials; they say so with
// `security: []`, every other operation names its security.
var publicOperations = map[string]bool{"healthz": true, "readyz": true, "metrics": true, "login": true,
	"stripeWebhook": true} // signed by Stripe

// anyMethod are the operations whose path answers every method.
var anyMethod = map[string]bool{"metrics": true, "forwardAuth": true}

// notProblemJSON are the error responses that are not problem details:
// operationId and status → why.
var notProblemJSON = map[string]string{
	"readyz 503": "the readiness report names what is wrong",
}

var (
	// exampleServer is what no server URL may point to (Redocly's
	// no-server-example.com): where a deployment is, is a variable.
	exampleServer = regexp.MustCompile(`^([a-z]+:)?//(example\.com|localhost)([:/]|$)`)
	// urlSafe is what an operationId may hold (Redocly's
	// operation-operationId-url-safe).
	urlSafe       = regexp.MustCompile(`^[A-Za-z0-9_.~-]+$`)
	pathParam     = regexp.MustCompile(`\{([^{}]+)\}`)
	componentRef  = regexp.MustCompile(`#/components/([A-Za-z]+)/([A-Za-z0-9_.-]+)`)
	changeMethods = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true}
)

func TestOpenAPILint(t *testing.T) {
	doc, raw := loadOpenAPI(t)
	for _, p := range lintOpenAPI(doc, raw) {
		t.Error(p)
	}
}

// TestOpenAPILintCatches breaks the document in memory, one rule at a
// time, and expects lintOpenAPI to say so.
func TestOpenAPILintCatches(t *testing.T) {
	cases := []struct {
		name  string
		spoil func(doc *openapi3.T)
		want  string
	}{
		{"no description", func(d *openapi3.T) { op(d, "me").Description = "" }, "GET /api/v1/me has no description"},
		{"no summary", func(d *openapi3.T) { op(d, "check").Summary = " " }, "POST /v1/check has no summary"},
		{"no operationId", func(d *openapi3.T) { op(d, "listAudit").OperationID = "" }, "GET /api/v1/audit has no operationId"},
		{"operationId twice", func(d *openapi3.T) { op(d, "getKey").OperationID = "getPlan" }, `operationId "getPlan" is also`},
		{"operationId not URL-safe", func(d *openapi3.T) { op(d, "getKey").OperationID = "get key" }, "is not URL-safe"},
		{"no tag", func(d *openapi3.T) { op(d, "listAudit").Tags = nil }, "GET /api/v1/audit has no tag"},
		{"undeclared tag", func(d *openapi3.T) { op(d, "listAudit").Tags = []string{"auditing"} }, `tag "auditing" is not declared`},
		{"tag without description", func(d *openapi3.T) { d.Tags[0].Description = "" }, `tag "check" has no description`},
		{"public without security: []", func(d *openapi3.T) { op(d, "healthz").Security = nil }, "GET /healthz is public"},
		{"login needing credentials", func(d *openapi3.T) { op(d, "login").Security = op(d, "me").Security }, "POST /api/v1/login is public"},
		{"no security", func(d *openapi3.T) { op(d, "getPlan").Security = nil }, "GET /api/v1/plans/{planID} declares no security"},
		{"made public", func(d *openapi3.T) { op(d, "getPlan").Security = &openapi3.SecurityRequirements{} }, "is not a public operation"},
		{"path parameter undeclared", func(d *openapi3.T) { d.Paths.Value("/api/v1/service-tokens/{tokenID}/revoke").Parameters = nil },
			`path parameter "tokenID" is not declared`},
		{"path parameter not in the path", func(d *openapi3.T) {
			op(d, "listPlans").Parameters = append(op(d, "listPlans").Parameters, d.Paths.Value("/api/v1/plans/{planID}").Parameters[0])
		}, `path parameter "planID" is not in the path`},
		{"error as plain JSON", func(d *openapi3.T) {
			op(d, "getTenant").Responses.Set("404", &openapi3.ResponseRef{Value: openapi3.NewResponse().
				WithDescription("Not found.").WithJSONSchema(openapi3.NewObjectSchema())})
		}, "GET /api/v1/tenants/{tenantID} 404 is not application/problem+json"},
		{"no 405", func(d *openapi3.T) { op(d, "healthz").Responses.Delete("405") }, "GET /healthz does not document 405"},
		{"no 500", func(d *openapi3.T) { op(d, "getKey").Responses.Delete("500") }, "does not document 500"},
		{"no 413", func(d *openapi3.T) { op(d, "createKey").Responses.Delete("413") }, "does not document 413"},
		{"no 403 on a change", func(d *openapi3.T) { op(d, "logout").Responses.Delete("403") }, "POST /api/v1/logout does not document 403"},
		{"no 503 on check", func(d *openapi3.T) { op(d, "check").Responses.Delete("503") }, "POST /v1/check does not document 503"},
		{"no 4xx", func(d *openapi3.T) {
			for _, code := range op(d, "healthz").Responses.Keys() {
				if code != "200" {
					op(d, "healthz").Responses.Delete(code)
				}
			}
		}, "GET /healthz documents no 4xx"},
		{"unused component", func(d *openapi3.T) { d.Components.Schemas["Spare"] = openapi3.NewObjectSchema().NewRef() }, "schemas/Spare is never used"},
		{"localhost server", func(d *openapi3.T) { d.Servers[0].URL = "http://localhost:8080" }, "points to localhost or example.com"},
		{"no contact", func(d *openapi3.T) { d.Info.Contact = nil }, "info has no contact"},
		{"OpenAPI 3.0", func(d *openapi3.T) { d.OpenAPI = "3.0.3" }, `openapi is "3.0.3", want 3.1.0`},
		{"no webhooks", func(d *openapi3.T) { d.Webhooks = nil }, "the document describes no webhooks"},
		{"no license", func(d *openapi3.T) { d.Info.License = nil }, "info has no license"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc, raw := loadOpenAPI(t)
			c.spoil(doc)
			problems := lintOpenAPI(doc, raw)
			for _, p := range problems {
				if strings.Contains(p, c.want) {
					return
				}
			}
			t.Errorf("no problem says %q; got:\n%s", c.want, strings.Join(problems, "\n"))
		})
	}
}

func loadOpenAPI(t *testing.T) (*openapi3.T, []byte) {
	t.Helper()
	raw, err := os.ReadFile(openAPIFile)
	if err != nil {
		t.Fatal(err)
	}
	return apispec.Load(t, openAPIFile), raw
}

// op returns the operation called id.
func op(doc *openapi3.T, id string) *openapi3.Operation {
	for _, item := range doc.Paths.Map() {
		for _, o := range item.Operations() {
			if o.OperationID == id {
				return o
			}
		}
	}
	panic("no operation " + id)
}

// lintOpenAPI returns the document's problems, in document order.
// raw is the document's text, in which components' uses are looked up.
func lintOpenAPI(doc *openapi3.T, raw []byte) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	blank := func(s string) bool { return strings.TrimSpace(s) == "" }

	// Spectral: info-contact, info-description; Redocly: info-license.
	if blank(doc.Info.Description) {
		report("info has no description")
	}
	if doc.Info.Contact == nil {
		report("info has no contact")
	}
	if doc.Info.License == nil || blank(doc.Info.License.Name) {
		report("info has no license")
	}

	// OpenAPI 3.1: the outgoing webhooks under webhooks:, and JSON
	// Schema's null rather than 3.0's nullable.
	if doc.OpenAPI != "3.1.0" {
		report("openapi is %q, want 3.1.0", doc.OpenAPI)
	}
	if len(doc.Webhooks) == 0 {
		report("the document describes no webhooks")
	}
	if n := strings.Count(string(raw), "nullable:"); n > 0 {
		report(`%d schemas say nullable, which OpenAPI 3.1 does not have: write type: [T, "null"]`, n)
	}

	// Redocly: no-empty-servers, no-server-example.com.
	servers := func(where string, list openapi3.Servers) {
		for _, s := range list {
			if exampleServer.MatchString(s.URL) {
				report("%s: server %s points to localhost or example.com (make where it is a server variable)", where, s.URL)
			}
		}
	}
	if len(doc.Servers) == 0 {
		report("the document names no servers")
	}
	servers("servers", doc.Servers)

	// Redocly: tag-description; Spectral: openapi-tags.
	declared := map[string]bool{}
	if len(doc.Tags) == 0 {
		report("the document declares no tags")
	}
	for _, tag := range doc.Tags {
		if declared[tag.Name] {
			report("tag %q is declared twice", tag.Name)
		}
		declared[tag.Name] = true
		if blank(tag.Description) {
			report("tag %q has no description", tag.Name)
		}
	}

	usedSchemes := map[string]bool{}
	for _, req := range doc.Security {
		for name := range req {
			usedSchemes[name] = true
		}
	}
	ids := map[string]string{}
	paths := doc.Paths.Map()
	for _, path := range slices.Sorted(maps.Keys(paths)) {
		item := paths[path]
		servers(path, item.Servers)
		template := map[string]bool{}
		for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
			template[m[1]] = true
		}
		ops := item.Operations()
		for _, method := range slices.Sorted(maps.Keys(ops)) {
			o := ops[method]
			where := method + " " + path
			if o.Servers != nil {
				servers(where, *o.Servers)
			}

			// Spectral: operation-operationId(-unique), operation-summary
			// (Redocly), operation-description, operation-tags,
			// operation-tag-defined.
			switch {
			case blank(o.OperationID):
				report("%s has no operationId", where)
			case !urlSafe.MatchString(o.OperationID):
				report("%s: operationId %q is not URL-safe", where, o.OperationID)
			case ids[o.OperationID] != "":
				report("%s: operationId %q is also %s's", where, o.OperationID, ids[o.OperationID])
			default:
				ids[o.OperationID] = where
			}
			if blank(o.Summary) {
				report("%s has no summary", where)
			}
			if blank(o.Description) {
				report("%s has no description", where)
			}
			if len(o.Tags) == 0 {
				report("%s has no tag", where)
			}
			for _, tag := range o.Tags {
				if !declared[tag] {
					report("%s: tag %q is not declared at the top level", where, tag)
				}
			}

			// Redocly: security-defined; and which operations are public.
			public := publicOperations[o.OperationID]
			switch {
			case public && (o.Security == nil || len(*o.Security) != 0):
				report("%s is public: it must declare `security: []`", where)
			case !public && o.Security == nil && len(doc.Security) == 0:
				report("%s declares no security, and the document has none", where)
			case !public && o.Security != nil && len(*o.Security) == 0:
				report("%s declares `security: []` but is not a public operation", where)
			}
			credentials := o.Security != nil && len(*o.Security) > 0 // required, unless one requirement is empty
			if o.Security != nil {
				for _, req := range *o.Security {
					if len(req) == 0 {
						credentials = false
					}
					for name := range req {
						usedSchemes[name] = true
					}
				}
			}

			// Spectral: path-params, operation-parameters; Redocly:
			// path-parameters-defined, operation-parameters-unique.
			inPath := map[string]bool{}
			for _, list := range []openapi3.Parameters{item.Parameters, o.Parameters} {
				seen := map[string]bool{}
				for _, ref := range list {
					p := ref.Value
					if seen[p.In+" "+p.Name] {
						report("%s: %s parameter %q is declared twice", where, p.In, p.Name)
					}
					seen[p.In+" "+p.Name] = true
					if p.In != openapi3.ParameterInPath {
						continue
					}
					inPath[p.Name] = true
					if !template[p.Name] {
						report("%s: path parameter %q is not in the path", where, p.Name)
					}
					if !p.Required {
						report("%s: path parameter %q is not required", where, p.Name)
					}
				}
			}
			for _, name := range slices.Sorted(maps.Keys(template)) {
				if !inPath[name] {
					report("%s: path parameter %q is not declared", where, name)
				}
			}

			lintResponses(o, method, path, credentials, report)
		}
	}

	// Spectral: oas3-unused-component; Redocly: no-unused-components.
	used := map[string]bool{}
	for _, m := range componentRef.FindAllSubmatch(raw, -1) {
		used[string(m[1])+"/"+string(m[2])] = true
	}
	unused := func(kind string, names []string) {
		for _, name := range names {
			if !used[kind+"/"+name] {
				report("components/%s/%s is never used", kind, name)
			}
		}
	}
	c := doc.Components
	unused("schemas", slices.Sorted(maps.Keys(c.Schemas)))
	unused("parameters", slices.Sorted(maps.Keys(c.Parameters)))
	unused("headers", slices.Sorted(maps.Keys(c.Headers)))
	unused("requestBodies", slices.Sorted(maps.Keys(c.RequestBodies)))
	unused("responses", slices.Sorted(maps.Keys(c.Responses)))
	unused("examples", slices.Sorted(maps.Keys(c.Examples)))
	for _, name := range slices.Sorted(maps.Keys(c.SecuritySchemes)) {
		if !usedSchemes[name] {
			report("components/securitySchemes/%s is never used", name)
		}
	}
	return problems
}

// lintResponses checks o's responses: a success (Spectral:
// operation-success-response), a client error (Redocly:
// operation-4xx-response), and the errors the servers answer with, as
// problem details.
func lintResponses(o *openapi3.Operation, method, path string, credentials bool, report func(string, ...any)) {
	where := method + " " + path
	var success, clientError bool
	for _, code := range o.Responses.Keys() {
		switch code[0] {
		case '2':
			success = true
		case '4':
			clientError = true
		}
		if code[0] != '4' && code[0] != '5' {
			continue
		}
		if _, ok := notProblemJSON[o.OperationID+" "+code]; ok {
			continue
		}
		r := o.Responses.Value(code).Value
		if len(r.Content) != 1 || r.Content.Get("application/problem+json") == nil {
			report("%s %s is not application/problem+json", where, code)
		} else if s := r.Content.Get("application/problem+json").Schema; s == nil || s.Ref != "#/components/schemas/Problem" {
			report("%s %s: its schema is not Problem", where, code)
		}
	}
	if !success {
		report("%s documents no success", where)
	}
	// The metrics handler answers every method and has no client error.
	if !clientError && o.OperationID != "metrics" {
		report("%s documents no 4xx", where)
	}

	// What the servers answer, and so what must be documented.
	need := map[string]string{}
	// Both routers answer 405 on a known path asked with another method;
	// metrics and forward-auth accept every method.
	if !anyMethod[o.OperationID] {
		need["405"] = "Allow"
	}
	if o.RequestBody != nil {
		need["400"], need["413"], need["422"] = "", "", "" // every body is decoded with a size limit, then validated
	}
	if credentials {
		need["401"] = ""
	}
	if strings.HasPrefix(path, "/api/v1/") {
		need["500"] = "" // every admin API request may reach Postgres
		if changeMethods[method] {
			need["403"] = "" // cross-origin requests from browsers are refused
		}
	}
	if o.OperationID == "check" {
		need["503"] = "Retry-After" // not ready: the snapshot has not loaded
	}
	for _, code := range slices.Sorted(maps.Keys(need)) {
		r := o.Responses.Value(code)
		switch {
		case r == nil:
			report("%s does not document %s", where, code)
		case need[code] != "" && r.Value.Headers[need[code]] == nil:
			report("%s %s does not document its %s header", where, code, need[code])
		}
	}
}
