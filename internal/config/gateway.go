package config

import "strings"

// Forward is the forward-auth endpoint's settings (TOLLGATE_FORWARD_*).
type Forward struct {
	// KeyHeaders name the headers that may carry the caller's API key, in
	// order; Authorization is read as "Bearer <key>".
	KeyHeaders []string
	// KeyQuery names a query parameter that may carry the key ("": none).
	KeyQuery string
}

// Forward reads TOLLGATE_FORWARD_KEY_HEADERS (default
// "Authorization,X-API-Key") and TOLLGATE_FORWARD_KEY_QUERY (default
// none).
func (e *Env) Forward() Forward {
	f := Forward{KeyHeaders: e.List("TOLLGATE_FORWARD_KEY_HEADERS"), KeyQuery: e.String("TOLLGATE_FORWARD_KEY_QUERY", "")}
	if f.KeyHeaders == nil {
		f.KeyHeaders = []string{"Authorization", "X-API-Key"}
	}
	for _, h := range f.KeyHeaders {
		if !isToken(h) {
			e.Fail("TOLLGATE_FORWARD_KEY_HEADERS", "\""+h+"\" is not a header name")
		}
	}
	if f.KeyQuery != "" && strings.ContainsAny(f.KeyQuery, "&=#? ") {
		e.Fail("TOLLGATE_FORWARD_KEY_QUERY", "must be a bare query parameter name such as api_key")
	}
	return f
}

// Envoy is the Envoy rate-limit service's settings (TOLLGATE_ENVOY_*):
// where it listens and which descriptor entries name the caller and the
// resource.
type Envoy struct {
	// Addr is the gRPC listen address; "" turns the service off.
	Addr string
	// KeyEntry is the descriptor entry whose value is the caller's API key.
	KeyEntry string
	// IPEntry is the entry whose value is the client's address (anonymous
	// callers are limited per address).
	IPEntry string
	// ResourceEntries are the entries whose value is the resource, tried
	// in order.
	ResourceEntries []string
}

// Envoy reads TOLLGATE_ENVOY_GRPC_ADDR (default off),
// TOLLGATE_ENVOY_KEY_ENTRY (default api_key), TOLLGATE_ENVOY_IP_ENTRY
// (default remote_address) and TOLLGATE_ENVOY_RESOURCE_ENTRIES (default
// "resource,header_match,generic_key").
func (e *Env) Envoy() Envoy {
	c := Envoy{
		Addr:            e.String("TOLLGATE_ENVOY_GRPC_ADDR", ""),
		KeyEntry:        e.String("TOLLGATE_ENVOY_KEY_ENTRY", "api_key"),
		IPEntry:         e.String("TOLLGATE_ENVOY_IP_ENTRY", "remote_address"),
		ResourceEntries: e.List("TOLLGATE_ENVOY_RESOURCE_ENTRIES"),
	}
	if c.ResourceEntries == nil {
		c.ResourceEntries = []string{"resource", "header_match", "generic_key"}
	}
	return c
}

// isToken reports whether s is an HTTP token (a valid header name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", c):
		default:
			return false
		}
	}
	return true
}
