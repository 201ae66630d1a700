package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
)

// MiddlewareOptions configures Client.Middleware. Every field is optional.
type MiddlewareOptions struct {
	// KeyFunc returns the caller's API key, "" for an anonymous caller.
	// Default: the token of "Authorization: Bearer <key>", else the
	// X-API-Key header. If your service uses bearer tokens for something
	// else, set KeyFunc.
	KeyFunc func(*http.Request) string
	// IPFunc returns the caller's address. Default: the host of
	// RemoteAddr. No header is trusted unless you say so: behind a proxy,
	// use ForwardedFor with the proxy's addresses. Without a key the
	// check API needs a valid address: a request it refuses goes to
	// OnError.
	IPFunc func(*http.Request) string
	// ResourceFunc returns what is accessed, matched against the rules'
	// resource patterns. Default: RouteResource(Mux), the method (HEAD
	// counted as GET) and the pattern of the route that will serve the
	// request, else its cleaned, decoded path: however a client spells a
	// path, it cannot escape the rule of the handler that serves it.
	ResourceFunc func(*http.Request) string
	// Mux is the ServeMux the middleware wraps, if it wraps one: the
	// default ResourceFunc names a request by the pattern of the route mux
	// picks for it (mux.Handler), e.g. "GET /repos/{owner}". Not needed
	// when the middleware wraps a handler registered in a mux, whose
	// requests already carry their pattern (Request.Pattern).
	Mux *http.ServeMux
	// Cost returns the units the request consumes (0 means 1). Default 1.
	// With Hold, the estimate.
	Cost func(*http.Request) int64
	// Hold returns true for requests checked with a hold (for rules priced
	// in tokens, say): Cost is then an estimate, and when the handler
	// returns — for a streamed response, once its body has ended — the
	// middleware settles the hold at the cost the handler reported with
	// ReportCost or in a Tollgate-Cost response header (removed before the
	// response is sent), else at the estimate. Default (nil): a request
	// is held when a rule that matches it asks for holds (its option
	// hold; CheckRequest.AutoHold).
	Hold func(*http.Request) bool
	// RefundOn lists the outcomes of a held request settled at 0: "5xx"
	// (a final response status of 500 or more, whatever the handler
	// reported) and "timeout" (the service did not deliver: the request's
	// deadline passed — the request's context, as the middleware sees
	// it, ended with context.DeadlineExceeded: set the deadline outside
	// the middleware (http.TimeoutHandler or a context deadline wrapping
	// it; one set by a handler inside is not seen, and bytes a handler
	// wrote into a TimeoutHandler outside count as served) — before the
	// handler wrote any of the body, and the handler reported no cost). A caller that hangs up is not a timeout: it controls its
	// own disconnection, so its request is settled at the cost reported,
	// else at the estimate; a handler that abandons its work when the
	// caller goes away may report what that cost (ReportCost, 0 for
	// nothing). The outcomes the hold's rules list (their option
	// refund_on, Decision.HoldRefundOn) are added to these.
	RefundOn []string
	// Skip returns true for requests that are not checked at all (no
	// decision is put in their context), e.g. health probes.
	Skip func(*http.Request) bool
	// OnLimited answers a denied request. The rate-limit headers are
	// already set and the decision is in r's context. It is called for
	// every denial, whatever the reason (d.Reason says which); delegate
	// to WriteDenied for the ones you do not customise. Default:
	// WriteDenied.
	OnLimited func(w http.ResponseWriter, r *http.Request, d *Decision)
	// OnError answers a request whose check failed with an error (see
	// Client.Check: the check API refused the check, e.g. a bad service
	// token or an IP it cannot parse; something in between refused it, a
	// WAF's 403, say; or the answer was not a decision). Outages are not
	// errors: the FailMode decides them. Default: a 500
	// application/problem+json, or nothing when the caller has gone away.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
}

type decisionKey struct{}

// DecisionFrom returns the decision the middleware put in ctx, if any.
func DecisionFrom(ctx context.Context) (*Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(*Decision)
	return d, ok
}

// Middleware returns middleware that checks every request with c before
// the handler runs. It copies the decision's rate-limit headers to the
// response, puts the decision in the request's context (DecisionFrom),
// holds the request for the decision's delay if a shaping rule asks for
// one, and answers denials with opts.OnLimited. A request that took a
// lease on concurrency rules (Decision.LeaseID) has it renewed while the
// handler runs and released when it returns; a held one is settled then
// (see MiddlewareOptions.Hold), which releases its lease too. A caller
// that goes away during the delay is not served: its hold is settled at
// 0, or its lease released, at once. CostHeader is removed from every
// response of an admitted request, held or not.
//
// The settlement or release is made when the handler returns, before
// the response ends: the response waits for its round trip (bounded by
// Options.SettleTimeout), so that a caller who waits for its response and
// sends its next request at once finds its slot free and its refund made
// (on a concurrency rule of 1, the next request is never denied by the
// lease of the one before). An attempt the check API could not answer —
// a transport error or timeout, a 5xx, a 408 or a 429 — is tried again
// (at the same cost: a repeat changes nothing) in the background, without
// holding the response up: up to four attempts in all over about a
// second, each bounded by Options.SettleTimeout. At most
// Options.MaxPendingReturns requests' retries are under way at once; past
// that a request's are made before its response ends. Call
// Client.Shutdown after the server has shut down, so that none is cut
// short by the process exiting.
func (c *Client) Middleware(opts MiddlewareOptions) func(http.Handler) http.Handler {
	keyFunc := orDefault(opts.KeyFunc, APIKey)
	ipFunc := orDefault(opts.IPFunc, RemoteIP)
	resourceFunc := orDefault(opts.ResourceFunc, RouteResource(opts.Mux))
	onLimited := orDefault(opts.OnLimited, WriteDenied)
	onError := orDefault(opts.OnError, writeCheckError)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if opts.Skip != nil && opts.Skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			req := CheckRequest{Key: keyFunc(r), IP: ipFunc(r), Resource: resourceFunc(r)}
			if opts.Cost != nil {
				req.Cost = opts.Cost(r)
			}
			if opts.Hold != nil {
				req.Hold = opts.Hold(r)
			} else {
				req.AutoHold = true
			}
			sent := time.Now()
			d, err := c.Check(r.Context(), req)
			if err != nil {
				onError(w, r, err)
				return
			}
			h := w.Header()
			for name, values := range d.Header {
				h[name] = append([]string(nil), values...)
			}
			r = r.WithContext(context.WithValue(r.Context(), decisionKey{}, d))
			if !d.Allowed {
				onLimited(w, r, d)
				return
			}
			if d.DelayMS > 0 && !hold(r.Context(), d.Delay()) {
				c.unserved(r.Context(), d) // the caller went away while held
				return
			}
			// A handler may report a cost in CostHeader whether or not
			// the request holds anything: it never reaches the caller.
			rw := &costWriter{ResponseWriter: w}
			if d.HoldID == "" && d.LeaseID == "" {
				next.ServeHTTP(rw, r)
				rw.finish()
				return
			}
			c.serveHeld(rw, r, next, d, sent, req.effectiveCost(), opts.RefundOn)
		})
	}
}

// optionFunc is the type of MiddlewareOptions' function fields that
// have a default.
type optionFunc interface {
	func(*http.Request) string |
		func(http.ResponseWriter, *http.Request, *Decision) |
		func(http.ResponseWriter, *http.Request, error)
}

// orDefault is f, or def when f is nil (the option is not set).
func orDefault[F optionFunc](f, def F) F {
	if f == nil {
		return def
	}
	return f
}

// CostHeader is the response header in which a handler behind the
// middleware may report a held request's actual cost (ReportCost does the
// same from code); the middleware removes it from every response it lets
// through, held or not, so that it never reaches the caller.
const CostHeader = "Tollgate-Cost"

type costKey struct{}

// costReport is a held request's actual cost, as its handler reports it.
type costReport struct {
	cost     atomic.Int64
	reported atomic.Bool
}

// ReportCost sets the actual cost of the held request whose context is
// ctx; the middleware settles the hold at it when the handler returns. It
// reports false, and changes nothing, when the request holds nothing or
// cost is negative (no settlement can be negative: the check API would
// refuse it, and the hold would keep its estimate until its TTL).
func ReportCost(ctx context.Context, cost int64) bool {
	if cost < 0 {
		return false
	}
	rep, ok := ctx.Value(costKey{}).(*costReport)
	if ok {
		rep.cost.Store(cost)
		rep.reported.Store(true)
	}
	return ok
}

// unserved gives back what the check of a request that was never served
// took, the caller having gone away first: its hold is settled at 0,
// which releases its lease too, else its lease is released.
func (c *Client) unserved(ctx context.Context, d *Decision) {
	if d.HoldID != "" || d.LeaseID != "" {
		c.giveBack(ctx, d, 0) // the caller is gone; the give-back must still happen
	}
}

// serveHeld runs next, writing to rw, for a request whose check opened
// hold d or took its lease, renewing the lease meanwhile; then it settles
// the hold: at the reported cost, else the estimate; at 0 for the
// outcomes refundOn or the hold's rules list (see
// MiddlewareOptions.RefundOn). Without a hold it releases the lease. The
// first attempt of the settlement or release is made before serveHeld
// returns, so before the response ends; its retries, if it needs any,
// after (giveBack).
func (c *Client) serveHeld(rw *costWriter, r *http.Request, next http.Handler, d *Decision, sent time.Time, estimate int64, refundOn []string) {
	rep := &costReport{}
	rw.report = rep
	stopRenewing := c.keepLease(r.Context(), d, sent)
	defer func() {
		rw.finish()
		stopRenewing()
		// The caller may be gone; the settlement or release must still
		// happen (giveBack ignores the end of the request's context).
		if d.HoldID == "" {
			c.giveBack(r.Context(), d, 0)
			return
		}
		cost, reported := estimate, rep.reported.Load()
		if reported {
			cost = rep.cost.Load()
		}
		refund := func(outcome string) bool {
			return slices.Contains(refundOn, outcome) || slices.Contains(d.HoldRefundOn, outcome)
		}
		// A timeout is the service's own deadline passing before it
		// served anything, never the caller going away: a caller that
		// reads an answer and hangs up before the handler returns must
		// not have it refunded.
		timedOut := errors.Is(r.Context().Err(), context.DeadlineExceeded) && !rw.served && !reported
		if rw.status >= 500 && refund("5xx") || timedOut && refund("timeout") {
			cost = 0
		}
		c.giveBack(r.Context(), d, cost)
	}()
	next.ServeHTTP(rw, r.WithContext(context.WithValue(r.Context(), costKey{}, rep)))
}

// minRenewal is the shortest wait between two renewals of a lease.
const minRenewal = 50 * time.Millisecond

// keepLease renews d's lease (if it took one), whose check was sent at
// sent, in the background, a third of its remaining life before each
// expiry, until the returned function is called. It stops by itself once
// the lease is gone (404) or has expired; a renewal that fails otherwise
// is tried again at the next turn. The expiries are taken from the TTLs the check and each renewal
// answer, counted from when each was sent by the local monotonic clock,
// so that a local clock that disagrees with the server's changes
// nothing (see leaseDeadline).
func (c *Client) keepLease(ctx context.Context, d *Decision, sent time.Time) (stop func()) {
	if d.LeaseID == "" {
		return func() {}
	}
	done := make(chan struct{})
	ctx = context.WithoutCancel(ctx)
	go func() {
		deadline := leaseDeadline(sent, d.LeaseTTLMS, d.LeaseExpiresAt, c.now)
		for {
			left := time.Until(deadline)
			if left <= 0 {
				return
			}
			t := time.NewTimer(max(left/3, minRenewal))
			select {
			case <-done:
				t.Stop()
				return
			case <-t.C:
			}
			sent := time.Now()
			l, err := c.Renew(ctx, d.LeaseID)
			var p *ProblemError
			switch {
			case errors.As(err, &p) && p.Status == http.StatusNotFound:
				return
			case err == nil:
				deadline = leaseDeadline(sent, l.TTLMS, l.ExpiresAt, c.now)
			}
		}
	}()
	return func() { close(done) }
}

// costWriter records the final status of an admitted request's response
// and whether any of its body was served, and takes CostHeader out of its
// headers before they are sent: into the report of a held request, to
// settle at; away, for any other.
type costWriter struct {
	http.ResponseWriter
	report *costReport // nil when the request holds nothing
	status int         // the final status; 0 until it is written
	served bool        // some of the body was written, or the connection taken over
}

func (w *costWriter) WriteHeader(status int) {
	switch {
	case w.status != 0:
	case informational(status):
		// Sent at once with the headers set so far, and a final status
		// follows: CostHeader must not go with it, and is taken at the
		// final one, which may still change it.
		if v, ok := w.Header()[CostHeader]; ok {
			delete(w.Header(), CostHeader)
			w.ResponseWriter.WriteHeader(status)
			w.Header()[CostHeader] = v
			return
		}
	default:
		w.status = status
		w.takeCost()
	}
	w.ResponseWriter.WriteHeader(status)
}

// informational reports whether status is a 1xx that net/http sends
// ahead of the final status (all but 101 Switching Protocols, which is
// final).
func informational(status int) bool {
	return status >= 100 && status <= 199 && status != http.StatusSwitchingProtocols
}

// finish takes CostHeader out of the headers of a handler that returned
// without writing anything, before net/http sends them with its 200.
func (w *costWriter) finish() {
	if w.status == 0 {
		w.takeCost()
	}
}

// takeCost records the cost reported in CostHeader, if the request holds
// something, and removes the header.
func (w *costWriter) takeCost() {
	v := w.Header().Get(CostHeader)
	if v == "" {
		return
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 && w.report != nil {
		w.report.cost.Store(n)
		w.report.reported.Store(true)
	}
	w.Header().Del(CostHeader)
}

func (w *costWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	if n > 0 {
		w.served = true
	}
	return n, err
}

// Flush lets a streaming handler flush through the middleware.
func (w *costWriter) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush() // as http.Flusher: nothing to report
}

// Hijack lets a handler take the connection over (a WebSocket, say)
// through the middleware, when the writer underneath can. What it writes
// on the connection is not seen, so a connection taken over counts as
// served.
func (w *costWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.served = true
	}
	return conn, rw, err
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *costWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// hold waits for delay, or until ctx ends (then it returns false).
func hold(ctx context.Context, delay time.Duration) bool {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// APIKey returns the API key of r: the token of "Authorization: Bearer
// <key>" (any case of "Bearer"), else the X-API-Key header, else "". It is
// the middleware's default KeyFunc.
func APIKey(r *http.Request) string {
	if scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		if token = strings.TrimSpace(token); token != "" {
			return token
		}
	}
	return strings.TrimSpace(r.Header.Get("X-API-Key"))
}

// RemoteIP returns the host part of r.RemoteAddr, the address of the peer
// that connected. It is the middleware's default IPFunc.
func RemoteIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// maxResource is the longest resource the check API accepts.
const maxResource = 1024

// MethodAndPath returns r's method, a space and its path as sent
// (percent-encoded, so never a control character), cut to 1024 bytes.
// The middleware's default is RouteResource, which a client cannot dodge
// by spelling a path differently; MethodAndPath suits a ResourceFunc that
// must tell spellings apart.
func MethodAndPath(r *http.Request) string {
	return cutResource(r.Method + " " + r.URL.EscapedPath())
}

// RouteResource returns a ResourceFunc naming a request as the check API
// names a forwarded one: the method upper case, HEAD counted as GET (a
// route for GET serves HEAD too), a space, then the path of the pattern
// of the route that will serve it (without its host and without a
// trailing "{$}"), e.g. "GET /repos/{owner}". The pattern is mux's
// (mux.Handler) when mux is not nil, else Request.Pattern, which a
// ServeMux sets before it calls a handler. A request no route matches is
// named by its path, decoded and cleaned ("//", "/./", "..", a trailing
// slash), still escaped if it decodes to control characters or invalid
// UTF-8. The query is never part of it. The result is cut to 1024 bytes.
func RouteResource(mux *http.ServeMux) func(*http.Request) string {
	return func(r *http.Request) string {
		pattern := r.Pattern
		if mux != nil {
			_, pattern = mux.Handler(r)
		}
		p, ok := patternPath(pattern)
		if !ok {
			p = cleanRequestPath(r.URL)
		}
		return cutResource(canonicalMethod(r.Method) + " " + p)
	}
}

// patternPath returns the path of a ServeMux pattern ("[METHOD ][HOST]/
// [PATH]"), without a trailing "{$}"; ok is false for "".
func patternPath(pattern string) (string, bool) {
	i := strings.IndexByte(pattern, '/')
	if i < 0 {
		return "", false
	}
	p := strings.TrimSuffix(pattern[i:], "{$}")
	return p, true
}

// cleanRequestPath returns u's path decoded (as Go's ServeMux matches
// it) and cleaned, or its escaped form cleaned when the decoded one holds
// control characters or invalid UTF-8.
func cleanRequestPath(u *url.URL) string {
	p := u.Path
	if !utf8.ValidString(p) || strings.IndexFunc(p, unicode.IsControl) >= 0 {
		p = u.EscapedPath()
	}
	return path.Clean("/" + p)
}

// canonicalMethod returns method upper case, with HEAD as GET.
func canonicalMethod(method string) string {
	if m := strings.ToUpper(method); m != http.MethodHead {
		return m
	}
	return http.MethodGet
}

// cutResource cuts s to the longest resource the check API accepts, on a
// character boundary.
func cutResource(s string) string {
	if len(s) > maxResource {
		s = s[:maxResource]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}

// ForwardedFor returns an IPFunc for a service behind proxies: when a
// request comes from one of the trusted prefixes, the caller is the
// right-most address of X-Forwarded-For that is not trusted (each proxy
// appends the address it saw, so addresses left of it may be forged);
// otherwise the caller is RemoteAddr and the header is ignored.
func ForwardedFor(trusted ...netip.Prefix) func(*http.Request) string {
	isTrusted := func(a netip.Addr) bool {
		a = a.Unmap()
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) string {
		remote := RemoteIP(r)
		addr, err := netip.ParseAddr(remote)
		if err != nil || !isTrusted(addr) {
			return remote
		}
		var hops []string
		for _, v := range r.Header.Values("X-Forwarded-For") {
			hops = append(hops, strings.Split(v, ",")...)
		}
		caller := remote
		for i := len(hops) - 1; i >= 0; i-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				return caller // garbage: stop at the last address a trusted proxy vouched for
			}
			caller = hop.String()
			if !isTrusted(hop) {
				return caller
			}
		}
		return caller
	}
}

// problem is the application/problem+json body of the middleware's own
// answers.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Code   string `json:"code"`
}

func writeProblem(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Code: code})
}

// WriteDenied answers a denied request with application/problem+json whose
// code is the decision's reason: 429 for rate_limited and spend_cap, 402
// for credits_exhausted, 401 for invalid_key
// and key_required, 403 for key_revoked, key_expired and tenant_suspended,
// 503 for unavailable; an unknown reason is a 429 when it has a wait, a
// 403 otherwise. It is the middleware's default OnLimited.
func WriteDenied(w http.ResponseWriter, r *http.Request, d *Decision) {
	status, detail := http.StatusForbidden, "the request is not allowed"
	switch d.Reason {
	case ReasonSpendCap:
		status, detail = http.StatusTooManyRequests, "the monthly spend cap is reached"
	case ReasonCreditsExhausted:
		status, detail = http.StatusPaymentRequired, "the prepaid credits are exhausted"
	case ReasonRateLimited:
		status, detail = http.StatusTooManyRequests, "rate limit exceeded"
		if d.RetryAfterMS < 0 {
			detail = "the request exceeds what the rate limit can ever allow"
		}
	case ReasonInvalidKey:
		status, detail = http.StatusUnauthorized, "the API key is not valid"
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	case ReasonKeyRequired:
		status, detail = http.StatusUnauthorized, "an API key is required"
		w.Header().Set("WWW-Authenticate", "Bearer")
	case ReasonKeyRevoked:
		detail = "the API key has been revoked"
	case ReasonKeyExpired:
		detail = "the API key has expired"
	case ReasonTenantSuspended:
		detail = "the account is suspended"
	case ReasonUnavailable:
		status, detail = http.StatusServiceUnavailable, "rate limiting is unavailable"
	default:
		if d.RetryAfterMS > 0 {
			status = http.StatusTooManyRequests
		}
	}
	if d.RetryAfterMS > 0 {
		if w.Header().Get("Retry-After") == "" {
			w.Header().Set("Retry-After", strconv.FormatInt(ceilDiv(d.RetryAfterMS, 1000), 10))
		}
		detail += "; retry after " + w.Header().Get("Retry-After") + " s"
	}
	writeProblem(w, status, d.Reason, detail)
}

// writeCheckError is the default OnError.
func writeCheckError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the caller went away; nobody reads an answer
	}
	writeProblem(w, http.StatusInternalServerError, "internal", "the rate limit check failed")
}
