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

func TestNormalizeResourceDoesNotAllocateWhenNormal(t *testing.T) {
	for _, r := range []string{"*", "GET /v1/search", "POST /repos/acme/issues", "/v1/search"} {
		if n := testing.AllocsPerRun(100, func() { _ = NormalizeResource(r) }); n != 0 {
			t.Errorf("NormalizeResource(%q): %v allocations, want 0", r, n)
		}
	}
}
