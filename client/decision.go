package client

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/tollgate/tollgate"
)

// Reasons a decision gives: the check API's own values. The check API may
// add reasons: treat an unknown one by Decision.Allowed.
const (
	ReasonOK          = tollgate.ReasonOK          // "ok"
	ReasonRateLimited = tollgate.ReasonRateLimited // "rate_limited"
	// ReasonSpendCap ("spend_cap"): the tenant's monthly spend cap is
	// reached; retry after RetryAfterMS (the month's end).
	ReasonSpendCap = tollgate.ReasonSpendCap
	// ReasonCreditsExhausted ("credits_exhausted"): the tenant's prepaid
	// balance cannot cover the cost; RetryAfterMS is -1 (until a top-up).
	ReasonCreditsExhausted = tollgate.ReasonCreditsExhausted
	ReasonInvalidKey       = tollgate.ReasonInvalidKey      // "invalid_key"
	ReasonKeyRevoked       = tollgate.ReasonKeyRevoked      // "key_revoked"
	ReasonKeyExpired       = tollgate.ReasonKeyExpired      // "key_expired"
	ReasonTenantSuspended  = tollgate.ReasonTenantSuspended // "tenant_suspended"
	// ReasonUnavailable ("unavailable"): a fail-closed rule could not be
	// evaluated, or the client could not reach the check API and its
	// FailMode is FailClosed.
	ReasonUnavailable = tollgate.ReasonUnavailable
	// ReasonKeyRequired ("key_required"): the caller is anonymous and
	// anonymous callers have no plan.
	ReasonKeyRequired = tollgate.ReasonKeyRequired
)

// Tiers of a decision.
const (
	TierAuthenticated = tollgate.TierAuthenticated // "authenticated"
	TierAnonymous     = tollgate.TierAnonymous     // "anonymous"
)

// Credits is a decision's part about the tenant's prepaid balance, in
// units of its plan.
type Credits = tollgate.CreditsDecision

// CheckRequest is one question to the check API: may this caller make this
// request now? The zero value of each field is the server's default.
type CheckRequest struct {
	// Key is the end caller's API key; empty for an anonymous caller.
	Key string
	// IP is the end caller's address (IPv4 or IPv6). Required without Key;
	// with a Key it feeds the plan's per-address rules.
	IP string
	// Resource is what is accessed, e.g. "GET /repos"; empty means "*".
	Resource string
	// Cost is the units the request consumes; 0 means 1, the server's
	// default. Set Peek to consume nothing.
	Cost int64
	// Peek evaluates with cost 0: the decision says whether a request
	// could pass and consumes nothing (usage is still recorded).
	Peek bool
	// DryRun evaluates, consumes nothing and records no usage.
	DryRun bool
	// Hold makes Cost an estimate: an admitted check opens a hold
	// (Decision.HoldID) to settle at the actual cost with Client.Settle.
	// HoldTTL is how long it stays open unsettled, rounded up to whole
	// seconds (at most 24 hours); 0 for the rules' default. It needs Hold
	// or AutoHold: with neither, the check API refuses it (422).
	Hold    bool
	HoldTTL time.Duration
	// AutoHold opens a hold, as Hold does, only when a matching rule asks
	// for one (its option hold), for HoldTTL if set; the middleware sets
	// it unless told otherwise (MiddlewareOptions.Hold).
	AutoHold bool
}

// effectiveCost is the cost the server is asked to charge.
func (r CheckRequest) effectiveCost() int64 {
	switch {
	case r.Peek:
		return 0
	case r.Cost == 0:
		return 1
	}
	return r.Cost
}

// MarshalJSON encodes r as the body of POST /v1/check.
func (r CheckRequest) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Key      string `json:"key,omitempty"`
		IP       string `json:"ip,omitempty"`
		Resource string `json:"resource,omitempty"`
		Cost     int64  `json:"cost"`
		DryRun   bool   `json:"dry_run,omitempty"`
		Hold     bool   `json:"hold,omitempty"`
		HoldTTLS int64  `json:"hold_ttl_s,omitempty"`
		AutoHold bool   `json:"auto_hold,omitempty"`
	}{r.Key, r.IP, r.Resource, r.effectiveCost(), r.DryRun, r.Hold, int64((r.HoldTTL + time.Second - 1) / time.Second), r.AutoHold && !r.Hold})
}

// Decision is the check API's answer (the body of a 200 from /v1/check),
// or one the client made itself: see Remembered and Degraded.
//
// Limit, Remaining, ResetAfterMS and Policy describe the governing rule (on
// a denial the denying rule with the longest wait, otherwise the rule with
// the least remaining); they are zero when no rule applied (Policy "").
// Durations are milliseconds, rounded up by the server.
//
// Remaining is 0 both when nothing is left and when the answer has no
// remaining: no rule applied (Policy ""), or the governing rule's failure
// mode decided it (Degraded; its RuleResult has Degraded set), its state
// unknown. Header has X-RateLimit-Remaining only when the check API knew
// it; a decision of the FailMode has neither.
type Decision struct {
	Allowed  bool   `json:"allowed"`
	Reason   string `json:"reason"`
	Tier     string `json:"tier"`
	TenantID string `json:"tenant_id,omitempty"`
	KeyID    string `json:"key_id,omitempty"`
	Plan     string `json:"plan,omitempty"`

	Limit int64 `json:"limit,omitempty"`
	// Remaining is 0 also when unknown: see above.
	Remaining    int64 `json:"remaining,omitempty"`
	ResetAfterMS int64 `json:"reset_after_ms,omitempty"`
	// RetryAfterMS is 0 when allowed; when denied, the wait until the same
	// request can succeed, or -1 when it never can (its cost is above the
	// rule's capacity).
	RetryAfterMS int64 `json:"retry_after_ms"`
	// DelayMS, on an allowed decision of a shaping rule, is how long the
	// caller should hold the request; the middleware waits it out.
	DelayMS int64  `json:"delay_ms,omitempty"`
	Policy  string `json:"policy,omitempty"`
	// Degraded is true when a rule could not be evaluated and its failure
	// mode decided, or when the client could not ask and its FailMode
	// decided (then Err says why).
	Degraded bool         `json:"degraded"`
	Rules    []RuleResult `json:"rules"`
	// HoldID names the hold an admitted check with Hold opened; empty
	// when nothing was held (a denial, no rule matched, a degraded
	// decision). HoldExpiresAt is when it expires unsettled.
	HoldID        string    `json:"hold_id,omitempty"`
	HoldExpiresAt time.Time `json:"hold_expires_at,omitempty"`
	// HoldRefundOn lists, for an opened hold, the outcomes its rules ask
	// to settle at 0 (their option refund_on): "5xx", "timeout".
	HoldRefundOn []string `json:"hold_refund_on,omitempty"`
	// LeaseID names the lease an admitted check took on its concurrency
	// rules (one slot each, of the requests in flight): renew it with
	// Client.Renew while the request runs and free it with Client.Release
	// (or by settling the hold) when it ends. LeaseExpiresAt is when its
	// first slot is freed unless renewed, by the server's clock;
	// LeaseTTLMS is how long that was from the server's clock at the
	// check (servers before lease_ttl_ms answer 0). The middleware does
	// all this.
	LeaseID        string    `json:"lease_id,omitempty"`
	LeaseExpiresAt time.Time `json:"lease_expires_at,omitempty"`
	LeaseTTLMS     int64     `json:"lease_ttl_ms,omitempty"`
	// Credits is the tenant's prepaid balance when its plan draws on
	// credits; nil otherwise.
	Credits *Credits `json:"credits,omitempty"`

	// Header holds the rate-limit headers of the answer (RateLimit-Policy,
	// RateLimit, X-RateLimit-*, Retry-After), ready to copy to a response.
	// It is never nil.
	Header http.Header `json:"-"`
	// Remembered is true when the client denied the request itself, from
	// an earlier denial whose wait has not passed, without asking.
	Remembered bool `json:"-"`
	// Err is why the client could not ask the check API when its FailMode
	// decided; nil otherwise.
	Err error `json:"-"`
}

// RetryAfter returns RetryAfterMS as a duration: 0 when allowed, negative
// when the request can never succeed.
func (d *Decision) RetryAfter() time.Duration {
	if d.RetryAfterMS < 0 {
		return -1
	}
	return time.Duration(d.RetryAfterMS) * time.Millisecond
}

// Delay returns DelayMS as a duration.
func (d *Decision) Delay() time.Duration { return time.Duration(d.DelayMS) * time.Millisecond }

// RuleResult is one rule's part of a decision.
type RuleResult struct {
	Name string `json:"name"`
	// Algorithm is gcra, token_bucket, leaky_bucket, fixed_window,
	// sliding_window_log, sliding_window_counter or concurrency.
	Algorithm string `json:"algorithm"`
	// Mode is enforce or shadow (evaluated and reported, never denies).
	Mode         string `json:"mode"`
	Limit        int64  `json:"limit"`
	WindowS      int64  `json:"window_s"`
	Allowed      bool   `json:"allowed"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	DelayMS      int64  `json:"delay_ms,omitempty"`
	// WouldDeny marks a shadow rule that would have denied.
	WouldDeny bool `json:"would_deny,omitempty"`
	Degraded  bool `json:"degraded,omitempty"`
}

// rateLimitHeaders are the headers of a decision worth passing on.
var rateLimitHeaders = []string{
	"RateLimit-Policy", "RateLimit",
	"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Used", "X-RateLimit-Reset",
	"Retry-After",
}

// pickRateLimitHeaders returns the rate-limit headers of h.
func pickRateLimitHeaders(h http.Header) http.Header {
	out := make(http.Header, len(rateLimitHeaders))
	for _, name := range rateLimitHeaders {
		if v := h.Values(name); len(v) > 0 {
			out[http.CanonicalHeaderKey(name)] = append([]string(nil), v...)
		}
	}
	return out
}

// Settlement is the check API's answer to a settlement.
type Settlement = tollgate.Settlement

// Lease is the check API's answer to a renewal or a release.
type Lease struct {
	LeaseID string `json:"lease_id"`
	// ExpiresAt, for a renewal, is when the lease's first slot is freed
	// unless renewed again, by the server's clock; TTLMS is how long that
	// was from the server's clock at the renewal (servers before ttl_ms
	// answer 0).
	ExpiresAt time.Time `json:"expires_at,omitempty"`
	TTLMS     int64     `json:"ttl_ms,omitempty"`
	// Released, for a release, is whether a slot was still held (false:
	// released before, or expired).
	Released bool `json:"released,omitempty"`
}

// leaseDeadline returns, by the local monotonic clock, when a lease
// expires whose check or renewal was sent at sent and answered ttlMS
// (the lease's life from the server's clock as it answered) and expires
// (the same, as a time of the server's clock): sent plus ttlMS, never
// later than the expiry since the server answered after sent, whatever
// either clock reads; from a server that sends no TTL, expires as the
// local clock reads it.
func leaseDeadline(sent time.Time, ttlMS int64, expires time.Time, now func() time.Time) time.Time {
	if ttlMS > 0 {
		return sent.Add(time.Duration(ttlMS) * time.Millisecond)
	}
	return time.Now().Add(expires.Sub(now()))
}
