package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// FailMode says what a Client decides when it cannot ask the check API.
type FailMode int

const (
	// FailOpen allows the request (the default, like the server's rules):
	// an outage of the rate limiter does not become an outage of the
	// service.
	FailOpen FailMode = iota
	// FailClosed denies the request with ReasonUnavailable and a one
	// second Retry-After.
	FailClosed
)

// String returns "open" or "closed".
func (m FailMode) String() string {
	if m == FailClosed {
		return "closed"
	}
	return "open"
}

// Defaults of Options.
const (
	DefaultTimeout           = 500 * time.Millisecond
	DefaultSettleTimeout     = 2 * time.Second
	DefaultMemorySize        = 10_000
	DefaultMaxPendingReturns = 1024
)

// Options configures a Client. The zero value is ready to use.
type Options struct {
	// Timeout bounds one check, and one lease renewal, connecting
	// included (default DefaultTimeout). Past it, FailMode decides.
	Timeout time.Duration
	// SettleTimeout bounds one attempt of a settlement or a release
	// (default DefaultSettleTimeout, and never less than Timeout): the
	// middleware's response waits for the first attempt (see
	// Client.Middleware), never for the retries, and a give-back lost
	// costs the caller its estimate until the hold's TTL.
	SettleTimeout time.Duration
	// MaxPendingReturns bounds the requests whose settlement or release
	// the middleware retries after their responses have ended (default
	// DefaultMaxPendingReturns). Past it, a request's retries are made
	// before its response ends, as backpressure. See Client.Shutdown.
	MaxPendingReturns int
	// FailMode decides when the check API cannot be asked: it cannot be
	// reached, times out, answers 5xx, or something in between answers
	// 408 or 429 (default FailOpen). Any other answer that is not a
	// decision is an error, whatever the FailMode. See Client.Check.
	FailMode FailMode
	// MemorySize bounds the denials remembered to answer repeated requests
	// locally (default DefaultMemorySize); negative turns remembering off.
	// A denial is remembered until its wait has passed, but for at most
	// MaxMemoryAge (one second, as the check API's own local denials),
	// and is forgotten when this client settles or releases a hold or
	// lease of the same tenant (see Client.Check).
	MemorySize int
	// HTTPClient sends the checks. By default the Client makes its own,
	// with one transport tuned for many concurrent checks to one host.
	HTTPClient *http.Client
	// Now is the clock of remembered denials (default time.Now).
	Now func() time.Time
}

// Client is a client of the check API. It is safe for concurrent use;
// create one per process and share it, so checks reuse connections.
type Client struct {
	checkURL      string
	baseURL       string
	token         string
	http          *http.Client
	timeout       time.Duration
	settleTimeout time.Duration
	failMode      FailMode
	memory        *denials // nil when remembering is off
	now           func() time.Time
	returns       *pendingReturns
}

// New returns a Client of the check API at baseURL (e.g.
// "http://tollgate:8080") that authenticates with serviceToken, a service
// token issued with `admin tokens issue` or the admin API. It fails when
// baseURL is not an http(s) URL or the token is empty.
func New(baseURL, serviceToken string, opts Options) (*Client, error) {
	u, err := parseBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(serviceToken) == "" {
		return nil, errors.New("tollgate: the service token is empty")
	}
	c := &Client{
		checkURL:      u + "/v1/check",
		baseURL:       u,
		token:         serviceToken,
		http:          opts.HTTPClient,
		timeout:       opts.Timeout,
		settleTimeout: opts.SettleTimeout,
		failMode:      opts.FailMode,
		now:           opts.Now,
	}
	if c.http == nil {
		c.http = &http.Client{Transport: newTransport(), CheckRedirect: noRedirects}
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.settleTimeout <= 0 {
		c.settleTimeout = DefaultSettleTimeout
	}
	c.settleTimeout = max(c.settleTimeout, c.timeout)
	maxReturns := opts.MaxPendingReturns
	if maxReturns <= 0 {
		maxReturns = DefaultMaxPendingReturns
	}
	c.returns = newPendingReturns(maxReturns)
	if c.now == nil {
		c.now = time.Now
	}
	switch size := opts.MemorySize; {
	case size == 0:
		c.memory = newDenials(DefaultMemorySize)
	case size > 0:
		c.memory = newDenials(size)
	}
	return c, nil
}

// parseBaseURL checks that s is an absolute http(s) URL and returns it
// without a trailing slash.
func parseBaseURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("tollgate: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("tollgate: base URL %q: want http://host[:port] or https://host[:port]", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("tollgate: base URL %q: must have no query or fragment", s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// newTransport returns a transport for many concurrent requests to one
// host. The default keeps 2 idle connections per host, so under load most
// checks would open a new connection and leave it in TIME_WAIT.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   2 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 2 * time.Second,
	}
}

// noRedirects stops a client from following redirects: a Tollgate server
// never sends one, and following it would send the request elsewhere.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// CloseIdleConnections closes the connections the Client keeps open.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Check asks whether req may proceed now. Every decision of the server
// is a Decision with a nil error, and so is an outage, when the check
// API could not be asked (decided by the FailMode, with Degraded set): no
// answer within Options.Timeout, a 5xx, or a 408 or 429 (the check API
// never answers a check with either; a proxy or load balancer in between
// does). Any other answer is an error, so that the middleware fails
// closed on it whatever the FailMode: a *ProblemError for any other
// status — the check API's refusal, 400, 401 (bad service token), 413 or
// 422 (invalid values; Errors names them), or something in between
// refusing the check for it (a WAF's 403 on a key that looks like an
// attack, a 404 or 405: the base URL is not a check API) — and a 2xx
// whose body is not a decision. It is also an error when ctx ended
// first. Those answers are not outages to ride out: a caller who could
// provoke one (a WAF blocks a body by its contents) would otherwise be
// let through, past every limit, by FailOpen.
//
// A Key longer than MaxKeyLength is denied as invalid_key without
// asking: no API key is that long, and the check API would refuse the
// body (413) before it could say so.
//
// A request the server denied as rate_limited or spend_cap with a
// positive retry_after_ms is denied again without a round trip
// (Decision.Remembered) until that wait or MaxMemoryAge has passed,
// whichever comes first, or until this client settles a hold or
// releases a lease of the same tenant (of the same address for an
// anonymous caller): those give units back. Denials by a concurrency
// rule, degraded ones and unavailable ones are not remembered: a slot
// may free at any time, and only a check tells when the limiter is back.
func (c *Client) Check(ctx context.Context, req CheckRequest) (*Decision, error) {
	if len(req.Key) > MaxKeyLength {
		return &Decision{Reason: ReasonInvalidKey, Tier: TierAuthenticated, Header: http.Header{}}, nil
	}
	var key denialKey
	var sentGen uint64
	if c.memory != nil {
		key = newDenialKey(req)
		if d, ok := c.memory.lookup(key, c.now()); ok {
			return d, nil
		}
		sentGen = c.memory.sent()
	}
	askedAt := c.now()
	d, err := c.post(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("tollgate: check: %w", ctx.Err())
		}
		if !unasked(err) {
			return nil, err
		}
		return c.fail(err), nil
	}
	if c.memory != nil {
		switch {
		case d.Allowed:
			if d.HoldID != "" || d.LeaseID != "" {
				c.memory.granted(ownerTag(d.TenantID, req.Key, req.IP), d.HoldID, d.LeaseID)
			}
		case remembers(d):
			c.memory.remember(key, ownerTag(d.TenantID, req.Key, req.IP), d, askedAt, sentGen)
		}
	}
	return d, nil
}

// MaxKeyLength is the longest API key, in bytes, that Check sends to the
// check API. Tollgate's keys have 39 characters; a longer one cannot be
// valid, and one of 16 KiB would make the check's body larger than the
// check API accepts, a refusal (413) instead of a denial.
const MaxKeyLength = 1024

// maxDecisionBody bounds the decision read; real ones are a few hundred
// bytes per rule.
const maxDecisionBody = 1 << 20

// post sends one check. Errors: a *ProblemError for a non-2xx answer, a
// *badAnswer for a 2xx whose body is not a decision (errNotDecision when
// it is JSON without a decision's fields), or a transport error; each
// wrapped.
func (c *Client) post(ctx context.Context, req CheckRequest) (*Decision, error) {
	var d Decision
	header, err := roundTrip(ctx, c.http, c.timeout, http.MethodPost, c.checkURL, c.token, nil, req, &decisionAnswer{&d}, maxDecisionBody)
	if err != nil {
		return nil, fmt.Errorf("tollgate: check: %w", err)
	}
	d.Header = pickRateLimitHeaders(header)
	return &d, nil
}

// unasked reports whether err, an error of post, means that the check
// API could not be asked: no answer (a transport error, the timeout, a
// body cut short) or a *ProblemError of an outage (see
// ProblemError.outage). An answer that refuses the check, or a 2xx that
// is not a decision, is not one.
func unasked(err error) bool {
	var p *ProblemError
	if errors.As(err, &p) {
		return p.outage()
	}
	var bad *badAnswer
	return !errors.As(err, &bad)
}

// errNotDecision is the decoding error of a 200 whose body lacks a
// decision's allowed, reason or retry_after_ms: not the check API's
// answer (a proxy's page, another service), so not one to act on.
var errNotDecision = errors.New("the answer is not a decision (allowed, reason, retry_after_ms)")

// decisionAnswer decodes the body of a 200 from /v1/check into d, and
// fails with errNotDecision unless allowed, reason and retry_after_ms are
// all there: decoded as a plain Decision, {"nope":1} would be a denial
// without a reason.
type decisionAnswer struct{ d *Decision }

func (a *decisionAnswer) UnmarshalJSON(b []byte) error {
	type plain Decision // Decision's fields, without this method
	// The pointer fields hide the embedded struct's of the same name, so
	// one pass decodes everything and tells which of them were present.
	var v struct {
		*plain
		Allowed      *bool   `json:"allowed"`
		Reason       *string `json:"reason"`
		RetryAfterMS *int64  `json:"retry_after_ms"`
	}
	v.plain = (*plain)(a.d)
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.Allowed == nil || v.Reason == nil || v.RetryAfterMS == nil {
		return errNotDecision
	}
	a.d.Allowed, a.d.Reason, a.d.RetryAfterMS = *v.Allowed, *v.Reason, *v.RetryAfterMS
	return nil
}

// Settle sets the actual cost of the hold holdID that a check with Hold
// opened: the difference to its estimate is given back (cost 0 gives
// everything back) or taken, even past the limit. Settling again at the
// same cost answers the same (Settlement.Repeated), so a settlement that
// failed with a transport error, a 5xx (503: the limiter store did not
// answer), a 408 or a 429 is safe to try again at the same cost, as the
// middleware does; the error is a *ProblemError for another cost (409),
// an unknown or long expired hold (404) or invalid values (422: a
// negative cost, say), else a transport error. One attempt is bounded by
// Options.SettleTimeout. Either way the client forgets the denials it
// remembers of the hold's tenant (of every caller, for a hold it did not
// open).
func (c *Client) Settle(ctx context.Context, holdID string, cost int64) (*Settlement, error) {
	var s Settlement
	err := c.call(ctx, c.settleTimeout, "settle", map[string]any{"hold_id": holdID, "cost": cost}, &s)
	c.givenBack(holdID)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// Hold checks req with a hold: Cost is an estimate, and an admitted check
// opens a hold (Decision.HoldID) to settle at the actual cost with
// Settle. It is Check with req.Hold set.
func (c *Client) Hold(ctx context.Context, req CheckRequest) (*Decision, error) {
	req.Hold = true
	return c.Check(ctx, req)
}

// Renew renews the lease leaseID that a check under concurrency rules took
// (Decision.LeaseID): each slot it holds then expires its rule's lease TTL
// from now. Renew well before Decision.LeaseExpiresAt. The error is a
// *ProblemError 404 once the lease expired or was released (its slot may
// be someone else's by now: the request should end), 422 for a malformed
// ID, else a transport error.
func (c *Client) Renew(ctx context.Context, leaseID string) (*Lease, error) {
	var l Lease
	if err := c.call(ctx, c.timeout, "renew", map[string]any{"lease_id": leaseID}, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Release frees the slots of lease leaseID when its request ends;
// Lease.Released is false when none was still held (released before, or
// expired). Settling the check's hold releases its lease too. Either way
// the client forgets the denials it remembers of the lease's tenant, as
// Settle does. Releasing again is harmless (Released false), so a
// release that failed as a settlement may be tried again. One attempt is
// bounded by Options.SettleTimeout.
func (c *Client) Release(ctx context.Context, leaseID string) (*Lease, error) {
	var l Lease
	err := c.call(ctx, c.settleTimeout, "release", map[string]any{"lease_id": leaseID}, &l)
	c.givenBack(leaseID)
	if err != nil {
		return nil, err
	}
	return &l, nil
}

// givenBack forgets the remembered denials that the settlement or
// release of id, answered or not, may have ended: the server takes it
// before it answers, so a denial of a check sent until now may predate
// it.
func (c *Client) givenBack(id string) {
	if c.memory != nil {
		c.memory.givenBack(id)
	}
}

// call posts body to the check API's /v1/{op} with the service token,
// within timeout, and decodes the answer into out; its errors start with
// "tollgate: {op}: ".
func (c *Client) call(ctx context.Context, timeout time.Duration, op string, body, out any) error {
	_, err := roundTrip(ctx, c.http, timeout, http.MethodPost, c.baseURL+"/v1/"+op, c.token, nil, body, out, maxDecisionBody)
	if err != nil {
		return fmt.Errorf("tollgate: %s: %w", op, err)
	}
	return nil
}

// fail returns the decision of the FailMode for a check that could not be
// asked because of err.
func (c *Client) fail(err error) *Decision {
	if c.failMode == FailClosed {
		return &Decision{
			Allowed: false, Reason: ReasonUnavailable, RetryAfterMS: 1000, Degraded: true,
			Header: http.Header{"Retry-After": {"1"}}, Err: err,
		}
	}
	return &Decision{Allowed: true, Reason: ReasonOK, Degraded: true, Header: http.Header{}, Err: err}
}

// roundTrip sends one request to a Tollgate server within timeout: in,
// when not nil, as its JSON body, token, when not empty, as its bearer
// token, and header's fields besides (nil: none). It decodes a 2xx
// answer (at most limit bytes) into out, when not nil, and returns the
// answer's header. Errors: a *ProblemError
// for any other status, a *badAnswer for a body that does not decode
// into out, or an encoding or transport error.
func roundTrip(ctx context.Context, hc *http.Client, timeout time.Duration, method, target, token string,
	header http.Header, in, out any, limit int64) (http.Header, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode: %w", err)
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for name, values := range header {
		req.Header[name] = values
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer drainAndClose(resp.Body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, readProblem(resp)
	}
	if out != nil {
		// Read first, then decode: an answer cut short is a failure to
		// ask, one read whole that does not decode is an answer.
		raw, err := io.ReadAll(io.LimitReader(resp.Body, limit))
		if err != nil {
			return nil, fmt.Errorf("read answer: %w", err)
		}
		if err := json.Unmarshal(raw, out); err != nil {
			return nil, &badAnswer{err}
		}
	}
	return resp.Header, nil
}

// badAnswer is the error of a 2xx answer read whole whose body is not the
// JSON asked for: empty, not JSON, or of another shape.
type badAnswer struct{ err error }

func (e *badAnswer) Error() string { return "decode answer: " + e.err.Error() }
func (e *badAnswer) Unwrap() error { return e.err }

// drainAndClose reads what is left of a body (a little) so that the
// connection can be reused, then closes it.
func drainAndClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	_ = body.Close()
}
