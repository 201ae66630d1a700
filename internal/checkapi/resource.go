package checkapi

import (
	"net/url"
	"path"
	"strings"
	"unicode/utf8"
)

// Every doorway (POST /v1/check, forward-auth and Envoy's rate-limit
// service) names the resource of an HTTP request the same way, through
// NormalizeResource or Resource: spelling a request differently must not
// escape the rule that limits it.

// Resource returns the resource rules match for an HTTP request: "METHOD
// /path", the method upper case with HEAD counted as GET (a server that
// routes GET serves HEAD with the same handler), the request URI's path
// decoded and cleaned (see cleanPath), its query and fragment dropped, and
// of an absolute-form URI ("http://host/path", as a request to a proxy
// names it) the scheme and authority too.
func Resource(method, requestURI string) string {
	rawPath, _, _ := strings.Cut(withoutOrigin(requestURI), "?")
	rawPath, _, _ = strings.Cut(rawPath, "#")
	return canonicalMethod(method) + " " + cleanPath(rawPath)
}

// NormalizeResource returns the resource rules match for a resource a
// caller named: one of the form "METHOD /path?query" becomes
// Resource(METHOD, /path?query), a bare "/path?query" its cleaned path;
// a URI in absolute form counts as its path ("POST http://host/v1/search"
// is "POST /v1/search", a bare "http://host/v1/search" is "/v1/search"),
// since an HTTP server routes it by its path; anything else ("*", a name
// of the caller's own) is returned unchanged. A resource already in
// normal form is returned as it is, without allocating.
func NormalizeResource(resource string) string {
	if p := withoutOrigin(resource); len(p) < len(resource) {
		rawPath, _, _ := strings.Cut(p, "?")
		rawPath, _, _ = strings.Cut(rawPath, "#")
		return cleanPath(rawPath)
	}
	if strings.HasPrefix(resource, "/") {
		rawPath, _, _ := strings.Cut(resource, "?")
		rawPath, _, _ = strings.Cut(rawPath, "#")
		if p := cleanPath(rawPath); p != resource {
			return p
		}
		return resource
	}
	method, uri, ok := strings.Cut(resource, " ")
	if !ok || !validMethod(strings.ToUpper(method)) {
		return resource
	}
	if p := withoutOrigin(uri); len(p) < len(uri) {
		return Resource(method, p)
	}
	if !strings.HasPrefix(uri, "/") {
		return resource
	}
	if m := canonicalMethod(method); m == method && !strings.ContainsAny(uri, "?#") && cleanPath(uri) == uri {
		return resource
	}
	return Resource(method, uri)
}

// withoutOrigin returns uri without the "scheme://authority" of an
// absolute-form URI (RFC 3986: a letter, then letters, digits, "+", "-"
// or "."; the authority runs to the first "/", "?" or "#"), or uri itself
// when it has none. An HTTP server routes "POST http://host/v1/search
// HTTP/1.1" to /v1/search: naming it otherwise would dodge the rules of
// /v1/search.
func withoutOrigin(uri string) string {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok || scheme == "" || !isScheme(scheme) {
		return uri
	}
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		return rest[end:]
	}
	return ""
}

// isScheme reports whether s is a URI scheme: a letter followed by
// letters, digits, "+", "-" or ".".
func isScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20 // lower case, for letters
		switch {
		case 'a' <= c && c <= 'z':
		case i > 0 && ('0' <= s[i] && s[i] <= '9' || s[i] == '+' || s[i] == '-' || s[i] == '.'):
		default:
			return false
		}
	}
	return true
}

// canonicalMethod returns method upper case, with HEAD as GET.
func canonicalMethod(method string) string {
	if isUpper(method) {
		if method == "HEAD" {
			return "GET"
		}
		return method
	}
	return canonicalMethod(strings.ToUpper(method))
}

func isUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'a' <= s[i] && s[i] <= 'z' {
			return false
		}
	}
	return true
}

// cleanPath returns the path rules are matched against: decoded, with dot
// segments resolved and repeated and trailing slashes removed, so that
// /v1//search/, /v1/./search and /v1/%73earch all count as /v1/search
// (spelling a path differently must not escape its rule). A path that
// decodes to control characters or invalid UTF-8 stays escaped; one
// longer than 1024 bytes is cut there. A path already clean is returned
// as it is.
func cleanPath(raw string) string {
	p, err := url.PathUnescape(raw)
	if err != nil || !printable(p) {
		p = raw
		if !printable(p) {
			p = url.PathEscape(p)
		}
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	p = path.Clean(p)
	if len(p) > maxResource-40 { // leaves room for the method
		p = p[:maxResource-40]
		for !utf8.ValidString(p) {
			p = p[:len(p)-1]
		}
	}
	return p
}
