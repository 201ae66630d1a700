package checkapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"

	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter"
)

// Writing a decision without reflection: appendDecision produces exactly
// what encoding/json's Encoder does for an enforce.Decision (same field
// order, omissions, escaping and final newline; a test holds it to that),
// into a pooled buffer.

var responsePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// jsonContentType is shared by every answer: net/http only reads it.
var jsonContentType = []string{"application/json"}

// writeDecision writes d as the 200 answer, its headers set already.
func writeDecision(w http.ResponseWriter, d *enforce.Decision) {
	bp := responsePool.Get().(*[]byte)
	b := appendDecision((*bp)[:0], d)
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	*bp = b[:0]
	responsePool.Put(bp)
}

func appendDecision(b []byte, d *enforce.Decision) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, d.Allowed)
	b = append(b, `,"reason":`...)
	b = appendString(b, d.Reason)
	b = append(b, `,"tier":`...)
	b = appendString(b, d.Tier)
	if d.TenantID != "" {
		b = append(b, `,"tenant_id":`...)
		b = appendString(b, d.TenantID)
	}
	if d.KeyID != "" {
		b = append(b, `,"key_id":`...)
		b = appendString(b, d.KeyID)
	}
	if d.Plan != "" {
		b = append(b, `,"plan":`...)
		b = appendString(b, d.Plan)
	}
	if d.Limit != nil {
		b = append(b, `,"limit":`...)
		b = strconv.AppendInt(b, *d.Limit, 10)
	}
	if d.Remaining != nil {
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, *d.Remaining, 10)
	}
	if d.ResetAfterMS != nil {
		b = append(b, `,"reset_after_ms":`...)
		b = strconv.AppendInt(b, *d.ResetAfterMS, 10)
	}
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, d.RetryAfterMS, 10)
	if d.DelayMS != 0 {
		b = append(b, `,"delay_ms":`...)
		b = strconv.AppendInt(b, d.DelayMS, 10)
	}
	if d.Policy != "" {
		b = append(b, `,"policy":`...)
		b = appendString(b, d.Policy)
	}
	b = append(b, `,"degraded":`...)
	b = strconv.AppendBool(b, d.Degraded)
	b = append(b, `,"rules":`...)
	if d.Rules == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range d.Rules {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendRule(b, &d.Rules[i])
		}
		b = append(b, ']')
	}
	if d.HoldID != "" {
		b = append(b, `,"hold_id":`...)
		b = appendString(b, d.HoldID)
		b = append(b, `,"hold_expires_at":`...)
		b = appendString(b, d.HoldExpiresAt)
		if len(d.HoldRefundOn) > 0 {
			b = append(b, `,"hold_refund_on":[`...)
			for i, o := range d.HoldRefundOn {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendString(b, o)
			}
			b = append(b, ']')
		}
	}
	if d.LeaseID != "" {
		b = append(b, `,"lease_id":`...)
		b = appendString(b, d.LeaseID)
		b = append(b, `,"lease_expires_at":`...)
		b = appendString(b, d.LeaseExpiresAt)
		if d.LeaseTTLMS > 0 {
			b = append(b, `,"lease_ttl_ms":`...)
			b = strconv.AppendInt(b, d.LeaseTTLMS, 10)
		}
	}
	if c := d.Credits; c != nil {
		b = append(b, `,"credits":{"balance":`...)
		b = strconv.AppendInt(b, c.Balance, 10)
		b = append(b, `,"drawn":`...)
		b = strconv.AppendInt(b, c.Drawn, 10)
		b = append(b, `,"overage":`...)
		b = strconv.AppendInt(b, c.Overage, 10)
		b = append(b, '}')
	}
	return append(b, "}\n"...)
}

func appendRule(b []byte, r *enforce.RuleResult) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, r.Name)
	b = append(b, `,"algorithm":`...)
	b = appendString(b, string(r.Algorithm))
	b = append(b, `,"mode":`...)
	b = appendString(b, string(r.Mode))
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, r.Limit, 10)
	b = append(b, `,"window_s":`...)
	b = strconv.AppendInt(b, r.WindowS, 10)
	b = append(b, `,"allowed":`...)
	b = strconv.AppendBool(b, r.Allowed)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, r.Remaining, 10)
	b = append(b, `,"reset_after_ms":`...)
	b = strconv.AppendInt(b, r.ResetAfterMS, 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, r.RetryAfterMS, 10)
	if r.DelayMS != 0 {
		b = append(b, `,"delay_ms":`...)
		b = strconv.AppendInt(b, r.DelayMS, 10)
	}
	if r.WouldDeny {
		b = append(b, `,"would_deny":true`...)
	}
	if r.Degraded {
		b = append(b, `,"degraded":true`...)
	}
	return append(b, '}')
}

// setDegradedHeaders sets the headers of a decision governed by a rule its
// failure mode decided: its policy and limit, and Retry-After on a
// denial, but no remaining, used or reset, which are not known (a 0
// would tell clients to back off from an admission).
func setDegradedHeaders(h http.Header, d *enforce.Decision, g *enforce.RuleResult) {
	h[hRateLimitPolicy] = []string{g.PolicyHeader()}
	h[hLimit] = []string{strconv.FormatInt(g.Limit, 10)}
	if !d.Allowed && d.RetryAfterMS > 0 {
		h[hRetryAfter] = []string{strconv.FormatInt(limiter.CeilDiv(d.RetryAfterMS, 1000), 10)}
	}
}

// appendString appends s as a JSON string, escaped as encoding/json does
// (HTML-safe).
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Header names as http.Header keeps them (canonical), so that they can be
// set without canonicalising each time.
const (
	hRateLimitPolicy = "Ratelimit-Policy"
	hRateLimit       = "Ratelimit"
	hLimit           = "X-Ratelimit-Limit"
	hRemaining       = "X-Ratelimit-Remaining"
	hUsed            = "X-Ratelimit-Used"
	hReset           = "X-Ratelimit-Reset"
	hRetryAfter      = "Retry-After"
)

// setHeaders is SetHeaders with two allocations: every value is cut from
// one string, and every value slice from one array.
func setHeaders(h http.Header, d *enforce.Decision) {
	g, ok := d.Governing()
	if !ok {
		// A denial no rule governs (the prepaid balance's) has no
		// rate-limit headers, but a wait when one is known: a second
		// while Redis has no counter of the balance.
		if !d.Allowed && d.RetryAfterMS > 0 {
			h[hRetryAfter] = []string{strconv.FormatInt(limiter.CeilDiv(d.RetryAfterMS, 1000), 10)}
		}
		return
	}
	if g.Degraded {
		setDegradedHeaders(h, d, &g)
		return
	}
	var stack [160]byte
	b := stack[:0]
	var ends [6]int
	// RateLimit
	b = append(b, g.QuotedName()...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, g.Remaining, 10)
	if g.ResetAfterMS >= 0 {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, limiter.CeilDiv(g.ResetAfterMS, 1000), 10)
	}
	ends[0] = len(b)
	b = strconv.AppendInt(b, g.Limit, 10)
	ends[1] = len(b)
	b = strconv.AppendInt(b, g.Remaining, 10)
	ends[2] = len(b)
	// Used counts down from what the rule admits at once (a GCRA rule's
	// burst), the same base Remaining counts from.
	b = strconv.AppendInt(b, max(0, g.Capacity-g.Remaining), 10)
	ends[3] = len(b)
	if g.ResetAfterMS >= 0 {
		b = strconv.AppendInt(b, limiter.CeilDiv(d.NowUS+g.ResetAfterMS*1000, 1_000_000), 10)
	}
	ends[4] = len(b)
	retry := !d.Allowed && d.RetryAfterMS > 0
	if retry {
		b = strconv.AppendInt(b, limiter.CeilDiv(d.RetryAfterMS, 1000), 10)
	}
	ends[5] = len(b)
	s := string(b)
	v := make([]string, 7)
	v[0] = g.PolicyHeader()
	from := 0
	for i, end := range ends {
		v[i+1] = s[from:end]
		from = end
	}
	h[hRateLimitPolicy] = v[0:1:1]
	h[hRateLimit] = v[1:2:2]
	h[hLimit] = v[2:3:3]
	h[hRemaining] = v[3:4:4]
	h[hUsed] = v[4:5:5]
	if g.ResetAfterMS >= 0 {
		h[hReset] = v[5:6:6]
	}
	if retry {
		h[hRetryAfter] = v[6:7:7]
	}
}
