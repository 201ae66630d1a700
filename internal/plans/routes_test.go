package plans

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/testenv"
)

func TestRoutesMatch(t *testing.T) {
	rs := CompileRoutes([]string{
		"GET /repos/{owner}/{repo}",
		"POST /v1/search",
		"GET /static/*",
		"* /v1/admin/*",
		"GET /repos/{owner}/{repo}/issues", // after a shorter template: order declared
		"GET /",
		"DELETE /items/{id}",
		"DELETE /items/new", // shadowed by the template before it
	})
	cases := []struct{ resource, want string }{
		{"GET /repos/acme/web", "GET /repos/{owner}/{repo}"},
		{"GET /repos/acme", tollgate.ResourceOther},
		{"GET /repos/acme/web/issues", "GET /repos/{owner}/{repo}/issues"},
		{"POST /repos/acme/web", tollgate.ResourceOther},
		{"POST /v1/search", "POST /v1/search"},
		{"POST /v1/search/x", tollgate.ResourceOther},
		{"GET /static/app.css", "GET /static/*"},
		{"GET /static/img/a.png", "GET /static/*"},
		{"GET /static", tollgate.ResourceOther},
		{"PATCH /v1/admin/users/7", "* /v1/admin/*"},
		{"PATCH /v1/admin", tollgate.ResourceOther},
		{"/v1/admin/users", "* /v1/admin/*"}, // a bare path names no method: only "*" matches it
		{"/v1/search", tollgate.ResourceOther},
		{"GET /", "GET /"},
		{"GET /x", tollgate.ResourceOther},
		{"DELETE /items/new", "DELETE /items/{id}"},
		{"*", tollgate.ResourceAny},
		{"search", tollgate.ResourceOther},
		{"", tollgate.ResourceOther},
	}
	for _, c := range cases {
		if got := rs.Match(c.resource); got != c.want {
			t.Errorf("Match(%q) = %q, want %q", c.resource, got, c.want)
		}
	}
	if got := (Routes{}).Match("GET /items/1"); got != tollgate.ResourceOther {
		t.Errorf("no routes: Match = %q, want %q", got, tollgate.ResourceOther)
	}
}

func TestValidateRoutesNamesEachBadRoute(t *testing.T) {
	f := map[string]string{}
	ValidateRoutes("routes", []string{
		"GET /repos/{owner}/{repo}", // ok
		"get /x",                    // lower-case method
		"GET /a/*/b",                // "*" not last
		"GET /a//b",                 // not clean
		"GET /a/",                   // trailing slash
		"GET /a/../b",               // dot segment
		"GET /a/{}",                 // empty parameter
		"GET /a/{id",                // broken parameter
		"GET /a?x=1",                // query
		"/a",                        // no method
		"GET /repos/{owner}/{repo}", // duplicate
		"* /v1/admin/*",             // ok
		"GET /",                     // ok
	}, f)
	for i, bad := range []bool{false, true, true, true, true, true, true, true, true, true, true, false, false} {
		k := fmt.Sprintf("routes[%d]", i)
		if _, got := f[k]; got != bad {
			t.Errorf("%s: problem %q, want a problem: %v", k, f[k], bad)
		}
	}
	if !strings.Contains(f["routes[10]"], "routes[0]") {
		t.Errorf("duplicate: %q, want it to name routes[0]", f["routes[10]"])
	}
	f = map[string]string{}
	ValidateRoutes("routes", make([]string, MaxRoutes+1), f)
	if f["routes"] == "" {
		t.Errorf("%d routes: no problem with routes", MaxRoutes+1)
	}
}

func TestPlanValidateNamesRoutes(t *testing.T) {
	err := PlanInput{Name: "p", Routes: []string{"GET /a", "GET /b/", "GET /a"}}.Validate()
	fields := testenv.Fields(err)
	if fields["routes[1]"] == "" || fields["routes[2]"] == "" || fields["routes[0]"] != "" {
		t.Errorf("fields %v, want routes[1] and routes[2] named, not routes[0]", fields)
	}
	if err := (PlanInput{Name: "p", Routes: []string{"GET /items/{id}"}}).Validate(); err != nil {
		t.Errorf("a valid route: %v", err)
	}
}

// BenchmarkRoutesMatch matches the resources of a plan with 20 routes:
// the cost the check path adds per check.
func BenchmarkRoutesMatch(b *testing.B) {
	var templates []string
	for i := range 18 {
		templates = append(templates, fmt.Sprintf("GET /v1/res%d/{id}", i))
	}
	templates = append(templates, "GET /repos/{owner}/{repo}/issues/{number}", "* /static/*")
	rs := CompileRoutes(templates)
	for _, bc := range []struct{ name, resource string }{
		{"first", "GET /v1/res0/42"},
		{"last", "GET /static/app/main.js"},
		{"deep", "GET /repos/acme/web/issues/7"},
		{"none", "POST /v2/other/thing"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = rs.Match(bc.resource)
			}
		})
	}
}
