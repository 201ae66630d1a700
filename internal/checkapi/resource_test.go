package checkapi

import (
	"strings"
	"testing"
)

func TestCleanPath(t *testing.T) {
	cases := map[string]string{
		"/v1/search":                   "/v1/search",
		"/v1//search/":                 "/v1/search",
		"/v1/./search":                 "/v1/search",
		"/v1/x/../search":              "/v1/search",
		"/v1/%73earch":                 "/v1/search",
		"/../../etc/passwd":            "/etc/passwd",
		"":                             "/",
		"/":                            "/",
		"/caf%C3%A9":                   "/café",
		"/a%00b":                       "/a%00b",
		"/a%0Ab":                       "/a%0Ab",
		"/%ff":                         "/%ff",
		"/bad%zzescape":                "/bad%zzescape",
		"/a b":                         "/a b",
		"/" + strings.Repeat("é", 600): "/" + strings.Repeat("é", 491),
	}
	for in, want := range cases {
		if got := cleanPath(in); got != want {
			t.Errorf("cleanPath(%q) = %q, want %q", in, got, want)
		}
		if got := cleanPath(in); len(got) > maxResource-40 || !printable(got) {
			t.Errorf("cleanPath(%q) = %q: not a valid resource path", in, got)
		}
	}
}

func TestNormalizeResource(t *testing.T) {
	cases := map[string]string{
		"*":                                 "*",
		"search":                            "search",
		"GET /v1/search":                    "GET /v1/search",
		"HEAD /v1/search":                   "GET /v1/search",
		"head /v1/%73earch":                 "GET /v1/search",
		"post /v1/search":                   "POST /v1/search",
		"POST /v1/%73earch":                 "POST /v1/search",
		"POST /v1//search":                  "POST /v1/search",
		"POST /v1/./search":                 "POST /v1/search",
		"POST /v1/x/../search/":             "POST /v1/search",
		"POST /v1/search?x=1":               "POST /v1/search",
		"POST /v1/search#top":               "POST /v1/search",
		"/v1//search?x=1":                   "/v1/search",
		"/":                                 "/",
		"GET /":                             "GET /",
		"GET /a b":                          "GET /a b",
		"GET /a%00b":                        "GET /a%00b",
		"GET v1/search":                     "GET v1/search", // not a path: a name
		"GET /v1 /search":                   "GET /v1 /search",
		"* /v1//search":                     "* /v1//search", // not a method
		"MY-METHOD /x/":                     "MY-METHOD /x",
		"GET /" + strings.Repeat("a", 1000): "GET /" + strings.Repeat("a", maxResource-41),
	}
	for in, want := range cases {
		if got := NormalizeResource(in); got != want {
			t.Errorf("NormalizeResource(%q) = %q, want %q", in, got, want)
		}
		if got := NormalizeResource(NormalizeResource(in)); got != NormalizeResource(in) {
			t.Errorf("NormalizeResource is not idempotent on %q: %q", in, got)
		}
	}
	// Resource is what forward-auth and Envoy's method and path give: the
	// same answers.
	for _, c := range [][3]string{{"HEAD", "/v1/%73earch?x=1", "GET /v1/search"}, {"get", "//v1/./search/", "GET /v1/search"}} {
		if got := Resource(c[0], c[1]); got != c[2] || NormalizeResource(c[0]+" "+c[1]) != c[2] {
			t.Errorf("Resource(%q, %q) = %q, want %q as NormalizeResource", c[0], c[1], got, c[2])
		}
	}
}

// TestNormalizeResourceAbsoluteForm: an HTTP server routes a request
// whose target is in absolute form ("POST http://host/v1/search
// HTTP/1.1") by its path, so the resource is its path, whoever names it.
func TestNormalizeResourceAbsoluteForm(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"method and URL", "POST http://host/v1/search", "POST /v1/search"},
		{"https with a port", "POST https://api.example.com:8443/v1/search", "POST /v1/search"},
		{"scheme in upper case", "POST HTTP://HOST/v1/search", "POST /v1/search"},
		{"any scheme", "POST foo+bar.1-x://host/v1/search", "POST /v1/search"},
		{"user info in the authority", "POST http://u:p@host/v1/search", "POST /v1/search"},
		{"query and fragment dropped", "POST http://host/v1/search?q=http://x#top", "POST /v1/search"},
		{"the path cleaned", "post http://host//v1/./%73earch/", "POST /v1/search"},
		{"HEAD counts as GET", "HEAD http://host/v1/search", "GET /v1/search"},
		{"no path is the root", "GET http://host", "GET /"},
		{"a query at the root", "GET http://host?x=1", "GET /"},
		{"an empty authority", "GET http:///v1/search", "GET /v1/search"},
		{"a URL in the path stays path", "GET http://host/http://other/x", "GET /http:/other/x"},
		{"bare URL", "http://host/v1//search?x=1", "/v1/search"},
		{"bare URL without a path", "https://host", "/"},
		{"not a scheme: a digit first", "GET 1http://host/v1/search", "GET 1http://host/v1/search"},
		{"not a scheme: a slash", "GET /a://host/v1/search", "GET /a:/host/v1/search"},
		{"not a scheme: empty", "GET ://host/v1/search", "GET ://host/v1/search"},
		{"not absolute: one slash", "GET http:/host/v1/search", "GET http:/host/v1/search"},
		{"not a method", "* http://host/v1/search", "* http://host/v1/search"},
		{"a name of the caller's own", "search", "search"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := NormalizeResource(c.in); got != c.want {
				t.Errorf("NormalizeResource(%q) = %q, want %q", c.in, got, c.want)
			}
			if got := NormalizeResource(c.want); got != c.want {
				t.Errorf("NormalizeResource is not idempotent on %q: %q", c.in, got)
			}
			// Forward-auth and Envoy's rate-limit service name the
			// request's method and URI apart: the same answer.
			if method, uri, ok := strings.Cut(c.in, " "); ok && strings.HasPrefix(c.want, canonicalMethod(method)+" /") {
				if got := Resource(method, uri); got != c.want {
					t.Errorf("Resource(%q, %q) = %q, want %q", method, uri, got, c.want)
				}
			}
		})
	}
}

func TestNormalizeResourceDoesNotAllocateWhenNormal(t *testing.T) {
	for _, r := range []string{"*", "GET /v1/search", "POST /repos/acme/issues", "/v1/search"} {
		if n := testing.AllocsPerRun(100, func() { _ = NormalizeResource(r) }); n != 0 {
			t.Errorf("NormalizeResource(%q): %v allocations, want 0", r, n)
		}
	}
}
