package plans

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/tollgate/tollgate"
)

// Route templates name what usage records for a check: a plan's routes
// are templates such as "GET /repos/{owner}/{repo}", "POST /v1/search",
// "GET /static/*" or "* /v1/admin/*", and a check is counted under the
// first of its plan's routes, in the order declared, that matches its
// resource (tollgate.ResourceOther when none does). A template is
// "METHOD /path": METHOD is an upper-case HTTP method or "*" (any), and
// each segment of the path is literal text, a parameter "{name}" (exactly
// one non-empty segment), or, as the last segment only, "*" (one or more
// segments). Paths are matched as checks normalise them (decoded,
// cleaned, no query), so a template must be clean too: no empty, "." or
// ".." segments and no trailing "/".

// MaxRoutes is the most routes a plan may declare.
const MaxRoutes = 200

// maxRouteLen bounds one template, as the check API bounds a resource.
const maxRouteLen = 1024

var (
	routeParam   = regexp.MustCompile(`^\{[A-Za-z_][A-Za-z0-9_]{0,62}\}$`)
	routeLiteral = regexp.MustCompile(`^[A-Za-z0-9._~!$&'()+,;=:@%-]+$`)
)

// ValidateRoute returns a problem with a route template, or "".
func ValidateRoute(template string) string {
	const form = `must be "METHOD /path" (METHOD upper-case or "*"; segments literal, "{name}", or a last "*")`
	if len(template) > maxRouteLen {
		return fmt.Sprintf("must be at most %d bytes", maxRouteLen)
	}
	method, path, ok := strings.Cut(template, " ")
	if !ok || !methodPattern.MatchString(method) || !strings.HasPrefix(path, "/") {
		return form
	}
	if path == "/" {
		return ""
	}
	segs := strings.Split(path[1:], "/")
	for i, seg := range segs {
		switch {
		case seg == "" || seg == "." || seg == "..":
			return "must be a clean path: no empty, '.' or '..' segments and no trailing '/'"
		case seg == "*" && i != len(segs)-1:
			return `may have "*" only as its last segment`
		case seg == "*", routeParam.MatchString(seg), routeLiteral.MatchString(seg):
		default:
			return fmt.Sprintf("segment %q: %s", seg, form)
		}
	}
	return ""
}

// ValidateRoutes checks routes, naming each bad one under prefix (e.g.
// "routes[2]"): every template valid, none declared twice, at most
// MaxRoutes.
func ValidateRoutes(prefix string, routes []string, f map[string]string) {
	if len(routes) > MaxRoutes {
		f[prefix] = fmt.Sprintf("must be at most %d routes", MaxRoutes)
		return
	}
	first := make(map[string]int, len(routes))
	for i, r := range routes {
		k := fmt.Sprintf("%s[%d]", prefix, i)
		if problem := ValidateRoute(r); problem != "" {
			f[k] = problem
			continue
		}
		if j, dup := first[r]; dup {
			f[k] = fmt.Sprintf("duplicates %s[%d]", prefix, j)
			continue
		}
		first[r] = i
	}
}

// Routes are a plan's route templates compiled for matching. The zero
// value has no routes. Safe for concurrent use (immutable).
type Routes struct {
	list []route
}

// route is one compiled template.
type route struct {
	template string
	method   string // "*" for any
	// prefix is the template's path up to its first parameter or "*" (the
	// whole path when it has none): a cheap test that rejects most paths.
	prefix   string
	segments []segment
	// rest: the template ends in "*", which takes one or more segments.
	rest bool
}

// segment is one path segment of a template: literal text, or a
// parameter that takes any one segment.
type segment struct {
	literal string
	param   bool
}

// CompileRoutes compiles templates, in their order. Templates that are
// not valid (ValidateRoute) are skipped: validation refuses them before
// they are stored.
func CompileRoutes(templates []string) Routes {
	var rs Routes
	for _, t := range templates {
		if ValidateRoute(t) != "" {
			continue
		}
		method, path, _ := strings.Cut(t, " ")
		r := route{template: t, method: method, prefix: path}
		if i := strings.IndexAny(path, "{*"); i >= 0 {
			r.prefix = path[:i]
		}
		if path != "/" {
			for _, seg := range strings.Split(path[1:], "/") {
				switch {
				case seg == "*":
					r.rest = true
				case strings.HasPrefix(seg, "{"):
					r.segments = append(r.segments, segment{param: true})
				default:
					r.segments = append(r.segments, segment{literal: seg})
				}
			}
		}
		rs.list = append(rs.list, r)
	}
	return rs
}

// Len returns the number of compiled routes.
func (rs Routes) Len() int { return len(rs.list) }

// Match returns what usage records for a check of resource (normalised,
// as every doorway of the check API names it): the template of the first
// route that matches, tollgate.ResourceAny for the resource "*" (a check
// that names none), else tollgate.ResourceOther. It does not allocate.
func (rs Routes) Match(resource string) string {
	if resource == tollgate.ResourceAny {
		return tollgate.ResourceAny
	}
	method, path, ok := strings.Cut(resource, " ")
	if !ok { // a bare "/path" names no method
		method, path = "", resource
	}
	if !strings.HasPrefix(path, "/") {
		return tollgate.ResourceOther
	}
	for i := range rs.list {
		r := &rs.list[i]
		if (r.method == "*" || r.method == method) && strings.HasPrefix(path, r.prefix) && r.matchPath(path) {
			return r.template
		}
	}
	return tollgate.ResourceOther
}

// matchPath reports whether path (starting with "/") matches r's path.
func (r *route) matchPath(path string) bool {
	rest := path[1:]
	end := rest == "" // no segment left
	for _, s := range r.segments {
		if end {
			return false
		}
		seg, after, more := strings.Cut(rest, "/")
		if seg == "" || (!s.param && seg != s.literal) {
			return false
		}
		rest, end = after, !more
	}
	if r.rest {
		return !end && rest != ""
	}
	return end
}
