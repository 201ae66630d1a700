package checkapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/httpx"
)

// ForwardAuthPath is the forward-auth endpoint. Envoy's ext_authz calls it
// with the original path appended (its path_prefix), so everything below
// it is the same endpoint.
const ForwardAuthPath = "/v1/forward-auth"

// Headers of the forward-auth exchange. The gateway sends the first group;
// Tollgate answers with the second, for the upstream (tenant, key, plan)
// and for the gateway's own configuration (status, reason).
const (
	// HeaderServiceToken carries the gateway's service token: the end
	// caller's key may be in Authorization, so the gateway's own
	// credential needs a header of its own.
	HeaderServiceToken = "X-Tollgate-Service-Token"
	// HeaderCost is the units the request consumes (default 1). Only the
	// gateway may set it: a recipe must set or clear it, never pass on
	// the client's.
	HeaderCost = "X-Tollgate-Cost"
	// HeaderDenyStatus, when "403", asks for every denial that would be a
	// 429 or 503 as a 403 carrying HeaderStatus: nginx's auth_request
	// accepts only 2xx, 401 and 403 from its auth service and turns
	// anything else into a 500.
	HeaderDenyStatus = "X-Tollgate-Deny-Status"

	HeaderStatus   = "X-Tollgate-Status"
	HeaderReason   = "X-Tollgate-Reason"
	HeaderTenant   = "X-Tollgate-Tenant"
	HeaderKeyID    = "X-Tollgate-Key-Id"
	HeaderPlan     = "X-Tollgate-Plan"
	HeaderDegraded = "X-Tollgate-Degraded"
	HeaderDelay    = "X-Tollgate-Delay-Ms"
)

// maxResource is the longest resource /v1/check accepts; a longer
// forwarded path is cut there.
const maxResource = 1024

// ForwardConfig configures the forward-auth endpoint.
type ForwardConfig struct {
	// KeyHeaders name the headers of the original request that may carry
	// the caller's API key, tried in order; Authorization is read as
	// "Bearer <key>" (other schemes are not keys). Default: Authorization,
	// X-API-Key.
	KeyHeaders []string
	// KeyQuery, when set, names a query parameter of the original URI that
	// may carry the key, tried after the headers.
	KeyQuery string
	// TrustedProxies are hops in front of the gateway (load balancers)
	// whose addresses in X-Forwarded-For are skipped to find the client.
	// The gateway itself, authenticated by its service token, is always
	// trusted to name the client.
	TrustedProxies httpx.TrustedProxies
}

// DefaultKeyHeaders are ForwardConfig.KeyHeaders' default.
var DefaultKeyHeaders = []string{"Authorization", "X-API-Key"}

// ReasonGatewayUnauthorized is the X-Tollgate-Reason of a forward-auth
// request refused for the gateway's own service token.
const ReasonGatewayUnauthorized = "gateway_unauthorized"

// RequireGatewayToken lets a forward-auth request through only with a
// valid, unexpired and unrevoked service token in HeaderServiceToken
// (bare, or as "Bearer …"). A gateway that fails gets a 401 with
// X-Tollgate-Reason: gateway_unauthorized, so that its operator (and the
// shipped gateway recipes, which then apply the route's failure mode
// instead of passing the 401 on) can tell it from a caller's missing key.
// Every refusal goes to refusals (when not nil).
func RequireGatewayToken(tokens *enforce.TokenVerifier, log *slog.Logger, refusals *GatewayRefusals) func(http.Handler) http.Handler {
	return serviceToken(tokens, log, func(r *http.Request) (string, bool) {
		v := strings.TrimSpace(r.Header.Get(HeaderServiceToken))
		if t, ok := BearerCredentials(v); ok {
			v = t
		}
		return v, v != ""
	}, func(w http.ResponseWriter, r *http.Request, sent bool) {
		w.Header().Set(HeaderReason, ReasonGatewayUnauthorized)
		refusals.Refused(r.Context(), "forward-auth", sent, r.RemoteAddr, time.Now())
	})
}

// GatewayRefusals counts the requests of gateways refused for their own
// service token (forward-auth, and Envoy's rate-limit service), in
// tollgate_gateway_token_refused_total, and logs them at warn level at
// most once every minute with how many there were (a gateway whose token
// has expired is refused on every request; one line a minute saying so
// is enough), never with the token. It is safe for concurrent use; a nil
// *GatewayRefusals does nothing.
type GatewayRefusals struct {
	counter prometheus.Counter
	log     *slog.Logger
	every   time.Duration
	// last is when the last line was logged (Unix ns, 0 before the first);
	// unlogged counts the refusals since.
	last     atomic.Int64
	unlogged atomic.Int64
}

// NewGatewayRefusals returns the refusals' counter, registered in reg
// when reg is not nil, and their log.
func NewGatewayRefusals(reg prometheus.Registerer, log *slog.Logger) *GatewayRefusals {
	g := &GatewayRefusals{log: log, every: time.Minute, counter: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tollgate_gateway_token_refused_total",
		Help: "Gateway requests refused because the gateway's own service token was missing, not valid, expired or revoked " +
			"(forward-auth: 401 with X-Tollgate-Reason gateway_unauthorized; Envoy's rate-limit service: UNAUTHENTICATED).",
	})}
	if reg != nil {
		reg.MustRegister(g.counter)
	}
	return g
}

// Refused counts one refusal at where ("forward-auth", "envoy-ratelimit")
// of a gateway at peer, which sent a token or none.
func (g *GatewayRefusals) Refused(ctx context.Context, where string, sent bool, peer string, now time.Time) {
	if g == nil {
		return
	}
	g.counter.Inc()
	g.unlogged.Add(1)
	last := g.last.Load()
	if g.log == nil || (last != 0 && now.UnixNano()-last < int64(g.every)) || !g.last.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	g.log.WarnContext(ctx, where+": the gateway's service token was refused (missing, not valid, expired or revoked); "+
		"the gateway's requests are refused until it sends a valid one (admin tokens issue)",
		"refused", g.unlogged.Swap(0), "token_sent", sent, "peer", peer)
}

// HandleForwardAuth serves ForwardAuthPath for gateways that ask an HTTP
// service whether to let a request through: nginx auth_request, Traefik
// forwardAuth and Envoy ext_authz (HTTP). Every method is accepted and no
// body is read. The original request is named by X-Original-Method and
// X-Original-URI (nginx), by X-Forwarded-Method and X-Forwarded-Uri
// (Traefik), or is the request itself below ForwardAuthPath (Envoy); a
// request naming it both ways is refused, as one of them came from the
// client. Resource names it as rules match it, "METHOD /path" (HEAD as
// GET, the path decoded and cleaned, no query), as /v1/check's resource
// is named (NormalizeResource). The key comes from cfg's headers or query
// parameter, the client's address from X-Forwarded-For (see
// ForwardConfig).
//
// Answers: 200 when allowed; 429 rate limited, spend cap reached or
// credits exhausted (with Retry-After when a wait lifts the denial, as on
// /v1/check: SetHeaders); 401 no key where the plan requires one, or a
// key that is not valid; 403 a revoked or expired key or a suspended
// tenant; 503 when a fail-closed rule, or a balance that denies past
// it, could not be evaluated (Retry-After: 1). Every answer carries the
// rate-limit headers of SetHeaders and X-Tollgate-Reason; a 200 also
// X-Tollgate-Tenant, -Key-Id and -Plan for the upstream (empty for an
// anonymous caller, whose plan is the anonymous one).
func HandleForwardAuth(checker *enforce.Checker, cfg ForwardConfig, log *slog.Logger) http.Handler {
	if len(cfg.KeyHeaders) == 0 {
		cfg.KeyHeaders = DefaultKeyHeaders
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started := time.Now()
		in, err := readForwarded(r, cfg)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		d, err := checker.Check(r.Context(), in.request)
		if err != nil {
			if r.Context().Err() != nil {
				return // the gateway went away
			}
			if errors.Is(err, enforce.ErrNotReady) {
				w.Header().Set("Retry-After", "1")
				writeDenial(w, in.denyStatus, http.StatusServiceUnavailable, tollgate.ReasonUnavailable,
					"not ready: the snapshot of plans and keys has not loaded yet")
				return
			}
			httpx.Error(w, r, log, err)
			return
		}
		h := w.Header()
		SetHeaders(h, &d)
		h.Set("Cache-Control", "no-store")
		if d.Degraded {
			h.Set(HeaderDegraded, "true")
		}
		if d.Allowed {
			h.Set(HeaderReason, d.Reason)
			// Always sent, empty for an anonymous caller: a gateway that
			// copies them to the upstream request then replaces whatever a
			// client sent under these names.
			h.Set(HeaderTenant, d.TenantID)
			h.Set(HeaderKeyID, d.KeyID)
			h.Set(HeaderPlan, d.Plan)
			if d.DelayMS > 0 {
				h.Set(HeaderDelay, strconv.FormatInt(d.DelayMS, 10))
			}
			w.WriteHeader(http.StatusOK)
		} else {
			status, detail := denial(&d)
			writeDenial(w, in.denyStatus, status, d.Reason, detail)
		}
		checker.Observe(time.Since(started))
	})
}

// denials are the status and message of a denial by reason, but for
// rate_limited, whose message names the rule.
var denials = map[string]struct {
	status int
	detail string
}{
	tollgate.ReasonSpendCap:         {http.StatusTooManyRequests, "the monthly spend cap is reached"},
	tollgate.ReasonCreditsExhausted: {http.StatusTooManyRequests, "the prepaid credits are exhausted"},
	tollgate.ReasonKeyRequired:      {http.StatusUnauthorized, "an API key is required"},
	tollgate.ReasonInvalidKey:       {http.StatusUnauthorized, "the API key is not valid"},
	tollgate.ReasonUnavailable:      {http.StatusServiceUnavailable, "the limiter is unavailable and the rule fails closed; retry shortly"},
	tollgate.ReasonKeyRevoked:       {http.StatusForbidden, "the API key has been revoked"},
	tollgate.ReasonKeyExpired:       {http.StatusForbidden, "the API key has expired"},
	tollgate.ReasonTenantSuspended:  {http.StatusForbidden, "the account is suspended"},
}

// denial returns the status and message of a denied decision.
func denial(d *enforce.Decision) (int, string) {
	if d.Reason == tollgate.ReasonRateLimited {
		msg := "rate limited"
		if d.Policy != "" {
			msg += " by rule " + strconv.Quote(d.Policy)
		}
		if d.RetryAfterMS < 0 {
			return http.StatusTooManyRequests, msg + "; the request costs more than the rule ever admits"
		}
		return http.StatusTooManyRequests, msg
	}
	if a, ok := denials[d.Reason]; ok {
		return a.status, a.detail
	}
	return http.StatusForbidden, "denied: " + d.Reason
}

var codeByStatus = map[int]string{
	http.StatusUnauthorized:       tollgate.EUNAUTHORIZED,
	http.StatusForbidden:          tollgate.EFORBIDDEN,
	http.StatusTooManyRequests:    tollgate.ERATELIMITED,
	http.StatusServiceUnavailable: tollgate.EUNAVAILABLE,
}

// writeDenial answers a denial with status (or 403 when the gateway asked
// for it, naming the real status in HeaderStatus) and a problem body that
// Traefik and Envoy pass on to the client.
func writeDenial(w http.ResponseWriter, denyStatus, status int, reason, detail string) {
	h := w.Header()
	h.Set(HeaderReason, reason)
	h.Set(HeaderStatus, strconv.Itoa(status))
	if status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="tollgate"`)
	}
	sent := status
	if denyStatus != 0 && status != http.StatusUnauthorized && status != http.StatusForbidden {
		sent = denyStatus
	}
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Type", "application/problem+json")
	w.WriteHeader(sent)
	p := httpx.Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail,
		Code: codeByStatus[status]}
	_ = json.NewEncoder(w).Encode(p)
}

// forwarded is what a forward-auth request asks.
type forwarded struct {
	request enforce.Request
	// denyStatus replaces 429 and 503 when not 0 (HeaderDenyStatus).
	denyStatus int
}

// malformed is the error for a forward-auth request the gateway got
// wrong: a 400 naming the header.
func malformed(field, msg string) error {
	return &tollgate.Error{Code: tollgate.EMALFORMED, Message: "malformed forward-auth request",
		Fields: map[string]string{field: msg}}
}

func readForwarded(r *http.Request, cfg ForwardConfig) (forwarded, error) {
	var f forwarded
	switch v := strings.TrimSpace(r.Header.Get(HeaderDenyStatus)); v {
	case "":
	case "403":
		f.denyStatus = http.StatusForbidden
	default:
		return f, malformed(HeaderDenyStatus, "must be 403 (the only status besides 2xx and 401 that nginx's auth_request passes on)")
	}
	method, uri, err := originalRequest(r)
	if err != nil {
		return f, err
	}
	_, rawQuery, _ := strings.Cut(uri, "?")
	f.request = enforce.Request{Resource: Resource(method, uri), Cost: 1}
	if v := strings.TrimSpace(r.Header.Get(HeaderCost)); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > maxCost {
			return f, malformed(HeaderCost, "must be an integer from 0 to 1000000000")
		}
		f.request.Cost = n
	}
	f.request.Key = cfg.key(r.Header, rawQuery)
	peer, ok := httpx.PeerAddr(r)
	if !ok {
		return f, tollgate.Errorf(tollgate.EINTERNAL, "forward-auth: peer address %q is not an IP address", r.RemoteAddr)
	}
	// The gateway proved who it is with its service token: it is trusted
	// to name the client, as it is trusted to name the method and URI.
	f.request.IP = cfg.TrustedProxies.ClientAddr(peer, r.Header, true).String()
	return f, nil
}

// originalRequest returns the method and request URI (path and query,
// still escaped) of the request the gateway asks about.
func originalRequest(r *http.Request) (method, uri string, err error) {
	nginxURI, traefikURI := r.Header.Get("X-Original-URI"), r.Header.Get("X-Forwarded-Uri")
	switch {
	case nginxURI != "" && traefikURI != "":
		return "", "", malformed("X-Original-URI", "the request names its original URI both in X-Original-URI and in X-Forwarded-Uri: one of them came from the client; configure the gateway to set one and clear the other")
	case nginxURI != "":
		method, uri = r.Header.Get("X-Original-Method"), nginxURI
	case traefikURI != "":
		method, uri = r.Header.Get("X-Forwarded-Method"), traefikURI
	default:
		// Envoy: the request itself, below the endpoint's path.
		method, uri = r.Method, strings.TrimPrefix(r.URL.RequestURI(), ForwardAuthPath)
	}
	if method == "" {
		method = r.Method
	}
	method = strings.ToUpper(strings.TrimSpace(method))
	if !validMethod(method) {
		return "", "", malformed("X-Original-Method", "must be an HTTP method such as GET")
	}
	if !strings.HasPrefix(uri, "/") {
		// An absolute URI (a proxy's request line) or a bare path.
		if u, err := url.Parse(uri); err == nil && u.IsAbs() {
			uri = u.RequestURI()
		} else {
			uri = "/" + uri
		}
	}
	return method, uri, nil
}

func validMethod(m string) bool {
	if m == "" || len(m) > 32 {
		return false
	}
	for _, c := range m {
		if (c < 'A' || c > 'Z') && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

// key returns the caller's API key from the configured headers or query
// parameter, or "" for an anonymous caller.
func (cfg ForwardConfig) key(h http.Header, rawQuery string) string {
	for _, name := range cfg.KeyHeaders {
		v := strings.TrimSpace(h.Get(name))
		if v == "" {
			continue
		}
		if strings.EqualFold(name, "Authorization") {
			if k, ok := BearerCredentials(v); ok && k != "" {
				return k
			}
			continue // another scheme: not an API key
		}
		return v
	}
	if cfg.KeyQuery != "" && rawQuery != "" {
		if q, err := url.ParseQuery(rawQuery); err == nil {
			if v := strings.TrimSpace(q.Get(cfg.KeyQuery)); v != "" {
				return v
			}
		}
	}
	return ""
}

// BearerCredentials returns the credentials of an Authorization value of
// the Bearer scheme ("Bearer <credentials>", the scheme in any case, as
// RFC 9110 has it), and false for any other scheme ("Basic …"), whose
// credentials are neither a service token nor an API key.
func BearerCredentials(v string) (string, bool) {
	if len(v) < 7 || !strings.EqualFold(v[:7], "Bearer ") {
		return "", false
	}
	return strings.TrimSpace(v[7:]), true
}
