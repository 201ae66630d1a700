package enforce

import (
	"strconv"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
)

// RuleResult is one rule's part of a decision. Durations are ms, rounded
// up so that a caller never retries too early.
type RuleResult struct {
	Name         string            `json:"name"`
	Algorithm    limiter.Algorithm `json:"algorithm"`
	Mode         plans.Mode        `json:"mode"`
	Limit        int64             `json:"limit"`
	WindowS      int64             `json:"window_s"`
	Allowed      bool              `json:"allowed"`
	Remaining    int64             `json:"remaining"`
	ResetAfterMS int64             `json:"reset_after_ms"`
	RetryAfterMS int64             `json:"retry_after_ms"`
	DelayMS      int64             `json:"delay_ms,omitempty"`
	WouldDeny    bool              `json:"would_deny,omitempty"`
	Degraded     bool              `json:"degraded,omitempty"`

	// Capacity is what Remaining counts down from: the burst of the
	// bucket algorithms, the limit of the windows.
	Capacity int64 `json:"-"`

	// rule is the rule the result is of; nil in results built by hand.
	rule *snapshot.Rule
	// count is the rule's count after the check (snapshot.Rule.Reported):
	// for the monthly quota, the tenant's month-to-date units.
	count int64
}

// denial returns the reason of a check whose denial rr governs, as its
// rule says (snapshot.After.Denial).
func (rr *RuleResult) denial() string {
	if rr.rule != nil && rr.rule.After.Denial != "" {
		return rr.rule.After.Denial
	}
	return tollgate.ReasonRateLimited
}

// QuotedName returns the rule's name as a structured-field string (for
// the RateLimit headers).
func (rr *RuleResult) QuotedName() string {
	if rr.rule != nil {
		return rr.rule.Quoted
	}
	return strconv.Quote(rr.Name)
}

// PolicyHeader returns the rule's RateLimit-Policy header value, e.g.
// "hourly";q=5000;w=3600.
func (rr *RuleResult) PolicyHeader() string {
	if rr.rule != nil {
		return rr.rule.Policy
	}
	return rr.QuotedName() + ";q=" + strconv.FormatInt(rr.Limit, 10) + ";w=" + strconv.FormatInt(rr.WindowS, 10)
}

// outageRetryMS is the retry a fail-closed rule asks for while its store
// is unreachable.
const outageRetryMS = 1000

// capacity returns the units rule admits at once when untouched.
func capacity(rule *snapshot.Rule) int64 {
	switch rule.Algorithm {
	case limiter.GCRA, limiter.TokenBucket, limiter.LeakyBucket:
		return rule.Params.EffectiveBurst()
	}
	return rule.Limit
}

// Decision is the answer to a check (the body of a 200 from /v1/check).
// Limit, Remaining, ResetAfterMS and Policy describe the governing rule
// and are absent when no rule applied.
type Decision struct {
	Allowed      bool         `json:"allowed"`
	Reason       string       `json:"reason"`
	Tier         string       `json:"tier"`
	TenantID     string       `json:"tenant_id,omitempty"`
	KeyID        string       `json:"key_id,omitempty"`
	Plan         string       `json:"plan,omitempty"`
	Limit        *int64       `json:"limit,omitempty"`
	Remaining    *int64       `json:"remaining,omitempty"`
	ResetAfterMS *int64       `json:"reset_after_ms,omitempty"`
	RetryAfterMS int64        `json:"retry_after_ms"`
	DelayMS      int64        `json:"delay_ms,omitempty"`
	Policy       string       `json:"policy,omitempty"`
	Degraded     bool         `json:"degraded"`
	Rules        []RuleResult `json:"rules"`
	// HoldID names the hold an admitted check with a hold opened;
	// HoldExpiresAt is when it expires unsettled (RFC 3339, UTC, ms).
	// Both are empty when nothing was held (a denial, no rule matched, or
	// a degraded decision).
	HoldID        string `json:"hold_id,omitempty"`
	HoldExpiresAt string `json:"hold_expires_at,omitempty"`
	// HoldRefundOn lists, for an opened hold, the outcomes its rules ask
	// to settle at 0 (their option refund_on): "5xx", "timeout".
	HoldRefundOn []string `json:"hold_refund_on,omitempty"`
	// LeaseID names the lease an admitted check took on its concurrency
	// rules, to renew while the request runs and release when it ends;
	// LeaseExpiresAt is when its first slot is freed unless renewed (RFC
	// 3339, UTC, ms), and LeaseTTLMS how long that was from the store's
	// clock at the check (ms, rounded down): a caller schedules renewals
	// from it, whatever its own clock says. All are zero when no slot
	// was taken.
	LeaseID        string `json:"lease_id,omitempty"`
	LeaseExpiresAt string `json:"lease_expires_at,omitempty"`
	LeaseTTLMS     int64  `json:"lease_ttl_ms,omitempty"`
	// Credits is the tenant's prepaid balance, when its plan draws on
	// credits and the store decided.
	Credits *CreditsResult `json:"credits,omitempty"`

	// NowUS is when the decision was made (the store's clock).
	NowUS int64 `json:"-"`
	// crossed are the tenant's quota thresholds the check crossed.
	crossed []int64
	// governing indexes Rules; -1 when no rule applied.
	governing int
	// recorded: the store journaled the check's usage
	// (limiter.Outcome.Recorded).
	recorded bool
}

// Governing returns the rule the top-level fields describe, if any.
func (d *Decision) Governing() (RuleResult, bool) {
	if d.governing < 0 || d.governing >= len(d.Rules) {
		return RuleResult{}, false
	}
	return d.Rules[d.governing], true
}

// decided completes d with the store's outcome for the matched rules of
// tenant (nil for an anonymous caller).
func (c *Checker) decided(d Decision, r Request, matched []*snapshot.Rule, out limiter.Outcome, tenant *snapshot.Tenant) Decision {
	d.Rules = make([]RuleResult, 0, len(matched))
	d.NowUS = out.NowUS
	d.Allowed = out.Admitted
	d.recorded = out.Recorded
	for i, rule := range matched {
		if out.Results[i].Unknown {
			// The store may have lost the rule's state (a tally before its
			// rebuild): its failure mode decides, as in an outage.
			d.Degraded = true
			d.Rules = append(d.Rules, unknownResult(rule, r))
			continue
		}
		res, count := rule.Reported(out.Results[i], r.Cost)
		rr := ruleResult(rule, res)
		rr.count = count
		if rule.Mode == plans.ModeShadow && !res.Allowed {
			rr.Allowed, rr.WouldDeny = true, true
			rr.RetryAfterMS = 0
			c.metrics.wouldDeny(rule.Name)
		}
		d.Rules = append(d.Rules, rr)
	}
	d.governing = governing(d.Rules, d.Allowed)
	refused := balanceDecided(&d, out.Credits, tenant)
	reason := tollgate.ReasonOK
	switch {
	case d.Allowed:
		if tenant != nil && len(tenant.Points) > 0 && !r.DryRun {
			d.crossed = crossed(d.Rules, tenant.Points, r.Cost)
		}
	case refused != "":
		reason = refused
	case d.Rules[d.governing].Degraded:
		reason = tollgate.ReasonUnavailable
	default:
		reason = d.Rules[d.governing].denial()
	}
	return c.finish(d, r, reason)
}

// unknownResult is the part of a decision of rule, which the store could
// not decide (limiter.Result.Unknown), as its failure mode decides it: a
// closed enforce rule refuses a check that costs something, as the store
// did (limiter.SeedClosed).
func unknownResult(rule *snapshot.Rule, r Request) RuleResult {
	rr := RuleResult{Name: rule.Name, Algorithm: rule.Algorithm, Mode: rule.Mode, Limit: rule.Limit,
		WindowS: rule.WindowS, Allowed: true, Degraded: true, Capacity: capacity(rule), rule: rule}
	if rule.Params.Seed == limiter.SeedClosed && r.Cost > 0 && !r.DryRun {
		rr.Allowed = false
		rr.RetryAfterMS = outageRetryMS // rebuilt within a second
	}
	return rr
}

// crossed returns the points (month-to-date counts, ascending) that an
// admitted check of cost units took the tenant's monthly quota count
// past. The store admits checks one at a time, so the count after this
// one is exact and no other check has it: before < point ≤ after holds
// for exactly one check, however many API processes share the store, and
// no store call or Postgres query is needed to know it. An overage
// plan's quota counts the whole month (snapshot.Rule.Tally), so every
// point is seen here; a hard quota stops at its limit, and so does a
// shadow quota past it, whose points the usage worker finds from the
// rollups.
func crossed(rules []RuleResult, points []int64, cost int64) []int64 {
	for i := range rules {
		rr := &rules[i]
		if rr.rule == nil || !rr.rule.After.Crossings {
			continue
		}
		tally := rr.rule.Tally
		if (rr.WouldDeny && !tally) || rr.Degraded {
			continue
		}
		after := rr.Limit - rr.Remaining
		if tally {
			after = rr.count
		}
		before := after - cost
		var out []int64
		for _, p := range points {
			if before < p && p <= after {
				out = append(out, p)
			}
		}
		return out
	}
	return nil
}

func ruleResult(rule *snapshot.Rule, res limiter.Result) RuleResult {
	return RuleResult{
		Name:         rule.Name,
		Algorithm:    rule.Algorithm,
		Mode:         rule.Mode,
		Limit:        rule.Limit,
		WindowS:      rule.WindowS,
		Allowed:      res.Allowed,
		Remaining:    res.Remaining,
		ResetAfterMS: msCeil(res.ResetAfterUS),
		RetryAfterMS: msCeil(res.RetryAfterUS),
		DelayMS:      msCeil(res.DelayUS),
		Capacity:     capacity(rule),
		rule:         rule,
	}
}

// degraded decides by failure modes: any closed enforce rule denies, and
// so does a balance whose plan denies past it (credits fail closed: what
// the store cannot record cannot be drawn).
func (c *Checker) degraded(d Decision, r Request, matched []*snapshot.Rule, hot *credits.Hot) Decision {
	d.Degraded = true
	d.Allowed = hot == nil || hot.Mode != credits.ModeDeny || r.Cost == 0 || r.DryRun
	for _, rule := range matched {
		rr := RuleResult{Name: rule.Name, Algorithm: rule.Algorithm, Mode: rule.Mode, Limit: rule.Limit,
			WindowS: rule.WindowS, Allowed: true, Degraded: true, Capacity: capacity(rule), rule: rule}
		if rule.FailureMode == plans.FailClosed && rule.Mode == plans.ModeEnforce {
			rr.Allowed = false
			// Unknown when the store is back: ask for a retry in a second.
			rr.RetryAfterMS = outageRetryMS
			d.Allowed = false
		}
		d.Rules = append(d.Rules, rr)
	}
	d.NowUS = c.now().UnixMicro()
	reason := tollgate.ReasonOK
	if !d.Allowed {
		// Unknown until the store is back: retry in a second, whether a
		// rule that fails closed denied or, no rule governing, the balance.
		d.RetryAfterMS = outageRetryMS
		reason = tollgate.ReasonUnavailable
		for i, rr := range d.Rules {
			if !rr.Allowed {
				d.governing = i
				break
			}
		}
	}
	return c.finish(d, r, reason)
}

// governing picks the rule the top-level fields describe: on a denial the
// denying rule with the longest retry (never = longest), otherwise the
// rule with the least remaining. Enforce rules win over shadow ones, then
// on an admission a rule the store decided over one it could not (whose
// remaining is not known).
func governing(rules []RuleResult, allowed bool) int {
	best := -1
	for i, rr := range rules {
		if best < 0 {
			best = i
			continue
		}
		b := rules[best]
		if !allowed {
			if rr.Allowed {
				continue
			}
			if b.Allowed || longerRetry(rr.RetryAfterMS, b.RetryAfterMS) {
				best = i
			}
			continue
		}
		if b.Mode != rr.Mode {
			if b.Mode == plans.ModeShadow && rr.Mode == plans.ModeEnforce {
				best = i
			}
			continue
		}
		if b.Degraded != rr.Degraded {
			if b.Degraded {
				best = i
			}
			continue
		}
		if rr.Remaining < b.Remaining {
			best = i
		}
	}
	return best
}

func longerRetry(a, b int64) bool {
	if b < 0 {
		return false
	}
	return a < 0 || a > b
}

func (c *Checker) finish(d Decision, r Request, reason string) Decision {
	d.Reason = reason
	if d.Rules == nil {
		d.Rules = []RuleResult{}
	}
	if d.NowUS == 0 {
		d.NowUS = c.now().UnixMicro()
	}
	if d.governing >= 0 && d.governing < len(d.Rules) {
		g := &d.Rules[d.governing]
		d.Limit, d.Policy = &g.Limit, g.Name
		if !g.Degraded {
			// A rule its failure mode decided has no known remaining.
			d.Remaining, d.ResetAfterMS = &g.Remaining, &g.ResetAfterMS
		}
		if !d.Allowed {
			d.RetryAfterMS = g.RetryAfterMS
		}
	}
	// The caller waits for the longest delay of the enforced shaping
	// rules, and only on an admission: a shadow rule's delay is reported
	// in its own rules[] entry, never imposed, and a denial has none.
	if d.Allowed {
		for _, rr := range d.Rules {
			if rr.Mode != plans.ModeShadow {
				d.DelayMS = max(d.DelayMS, rr.DelayMS)
			}
		}
	}
	c.metrics.decision(d.Allowed, reason)
	if d.Degraded {
		c.metrics.degradedDecision(d.Allowed)
	}
	if !r.DryRun {
		ev := tollgate.UsageEvent{AtUS: d.NowUS, TenantID: d.TenantID, KeyID: d.KeyID, Tier: d.Tier, IP: r.IP,
			Resource: r.route, Cost: r.Cost, Allowed: d.Allowed, Reason: reason, Crossed: d.crossed, Recorded: d.recorded}
		if d.HoldID != "" {
			ev.Hold = tollgate.HoldOpened
		}
		for _, rr := range d.Rules {
			if !rr.Allowed {
				ev.Denied = append(ev.Denied, rr.Name)
			}
		}
		c.recorder.Record(ev)
	}
	return d
}

func msCeil(us int64) int64 {
	if us <= 0 {
		return us
	}
	return (us + 999) / 1000
}
