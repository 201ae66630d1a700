package enforce

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
)

// Request is one check, validated.
type Request struct {
	Key      string
	IP       string
	Resource string
	Cost     int64
	DryRun   bool
}

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
}

// outageRetryMS is the retry a fail-closed rule asks for while its store
// is unreachable.
const outageRetryMS = 1000

// capacity returns the units the rule admits at once when untouched.
func (r *compiledRule) capacity() int64 {
	switch r.Algorithm {
	case limiter.GCRA, limiter.TokenBucket, limiter.LeakyBucket:
		return r.params.EffectiveBurst()
	}
	return r.Limit
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

	// NowUS is when the decision was made (the store's clock).
	NowUS int64 `json:"-"`
	// governing indexes Rules; -1 when no rule applied.
	governing int
}

// Governing returns the rule the top-level fields describe, if any.
func (d *Decision) Governing() (RuleResult, bool) {
	if d.governing < 0 || d.governing >= len(d.Rules) {
		return RuleResult{}, false
	}
	return d.Rules[d.governing], true
}

// Recorder counts decisions. Record must not block: the hot path calls it
// for every check that is not a dry run.
type Recorder interface {
	Record(tollgate.UsageEvent)
}

type nopRecorder struct{}

func (nopRecorder) Record(tollgate.UsageEvent) {}

// Checker decides checks. It is safe for concurrent use.
type Checker struct {
	holder     *Holder
	store      limiter.Store
	breaker    *Breaker
	prefix     string
	timeout    time.Duration
	recorder   Recorder
	metrics    *Metrics
	log        *slog.Logger
	now        func() time.Time
	ipv6Prefix int

	outageLog throttledLog
}

// throttledLog logs failed store calls at most once a second, with the
// number of failed calls since the last line. An outage, once the circuit
// is open, is logged by the breaker instead.
type throttledLog struct {
	mu      sync.Mutex
	last    time.Time
	dropped int
}

func (t *throttledLog) warn(ctx context.Context, log *slog.Logger, err error) {
	t.mu.Lock()
	now := time.Now()
	if now.Sub(t.last) < time.Second {
		t.dropped++
		t.mu.Unlock()
		return
	}
	dropped := t.dropped
	t.last, t.dropped = now, 0
	t.mu.Unlock()
	log.WarnContext(ctx, "limiter store unavailable; rules' failure modes decide", "err", err, "failures_since_last_log", dropped+1)
}

// CheckerConfig configures a Checker.
type CheckerConfig struct {
	// Prefix starts every limiter state key (default "tg:").
	Prefix string
	// StoreTimeout bounds one store call (default 250ms); past it the
	// rules' failure modes decide.
	StoreTimeout time.Duration
	Recorder     Recorder
	Metrics      *Metrics
	Log          *slog.Logger
	// IPv6Prefix groups IPv6 callers by network for per-IP limits and
	// usage (default 64: one subscriber usually holds a whole /64 and
	// could otherwise step through 2^64 fresh allowances); 128 counts
	// every address alone. IPv4 addresses count alone.
	IPv6Prefix int
	// Breaker configures the circuit breaker the checker puts around its
	// store (see Breaker); its Probe, ProbeTimeout and Log default to a
	// dry run on a key under Prefix, StoreTimeout and Log.
	Breaker BreakerConfig
}

// NewChecker returns a Checker on the holder's snapshots and store. The
// store is called through a circuit breaker: while it is down, checks are
// decided by the rules' failure modes at once. Close stops the breaker's
// background probing.
func NewChecker(holder *Holder, store limiter.Store, cfg CheckerConfig) *Checker {
	c := &Checker{holder: holder, prefix: cfg.Prefix, timeout: cfg.StoreTimeout,
		recorder: cfg.Recorder, metrics: cfg.Metrics, log: cfg.Log, now: time.Now, ipv6Prefix: cfg.IPv6Prefix}
	if c.ipv6Prefix <= 0 || c.ipv6Prefix > 128 {
		c.ipv6Prefix = 64
	}
	if c.prefix == "" {
		c.prefix = "tg:"
	}
	if c.timeout <= 0 {
		c.timeout = 250 * time.Millisecond
	}
	if c.recorder == nil {
		c.recorder = nopRecorder{}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	bc := cfg.Breaker
	if len(bc.Probe.Requests) == 0 {
		// Peeks at a key no check uses: it changes nothing, and runs the
		// check script, so a probe that succeeds means checks will too.
		bc.Probe = limiter.Batch{DryRun: true, Requests: []limiter.Request{{
			Key:    c.prefix + "{tollgate}:probe",
			Params: limiter.Params{Algorithm: limiter.GCRA, Limit: 1, PeriodUS: limiter.SecondUS},
		}}}
	}
	if bc.ProbeTimeout <= 0 {
		bc.ProbeTimeout = c.timeout
	}
	if bc.Log == nil {
		bc.Log = c.log
	}
	c.breaker = NewBreaker(store, bc)
	c.store = c.breaker
	c.metrics.watchBreaker(c.breaker)
	return c
}

// Observe records how long serving one check took, from reading its body
// to writing its answer.
func (c *Checker) Observe(d time.Duration) { c.metrics.observe(d) }

// Close stops the background probing of the store's circuit breaker.
func (c *Checker) Close() { c.breaker.Close() }

// ErrNotReady is returned before the first snapshot has loaded.
var ErrNotReady = errors.New("enforce: snapshot not loaded")

// Check decides r. Errors are for requests that cannot be decided at all
// (no snapshot yet, or an ip-scoped rule and no ip); a store outage is a
// degraded decision, not an error.
func (c *Checker) Check(ctx context.Context, r Request) (Decision, error) {
	s := c.holder.Current()
	if s == nil {
		return Decision{}, ErrNotReady
	}
	d := Decision{Tier: tollgate.TierAnonymous, Rules: []RuleResult{}, governing: -1}
	r.IP = Network(r.IP, c.ipv6Prefix)
	var plan *planView
	var tag, keyID, tenantID string
	if r.Key != "" {
		d.Tier = tollgate.TierAuthenticated
		if !tenants.WellFormed(r.Key) {
			return c.finish(d, r, tollgate.ReasonInvalidKey), nil
		}
		k := c.holder.lookupKey(ctx, s, tenants.HashKey(r.Key))
		if k == nil {
			return c.finish(d, r, tollgate.ReasonInvalidKey), nil
		}
		d.TenantID, d.KeyID = k.tenant.id, k.id
		if k.tenant.plan != nil {
			d.Plan = k.tenant.plan.name
		}
		now := c.now()
		switch {
		case k.revokedAt != nil && !k.revokedAt.After(now):
			return c.finish(d, r, tollgate.ReasonKeyRevoked), nil
		case k.expiresAt != nil && !k.expiresAt.After(now):
			return c.finish(d, r, tollgate.ReasonKeyExpired), nil
		case k.tenant.status != tenants.StatusActive:
			return c.finish(d, r, tollgate.ReasonTenantSuspended), nil
		}
		plan, tag, keyID, tenantID = k.tenant.plan, k.tenant.id, k.id, k.tenant.id
	} else {
		if s.anonymous == nil {
			return c.finish(d, r, tollgate.ReasonKeyRequired), nil
		}
		plan, tag = s.anonymous, "a:"+r.IP
		d.Plan = plan.name
	}
	if plan == nil {
		// Cannot happen with a consistent snapshot (every tenant has a
		// plan); if it does, fail closed rather than admit unlimited.
		d.Degraded = true
		c.log.ErrorContext(ctx, "tenant without a plan in the snapshot", "tenant_id", d.TenantID)
		return c.finish(d, r, tollgate.ReasonUnavailable), nil
	}

	var matched []*compiledRule
	for i := range plan.rules {
		if plans.MatchResource(plan.rules[i].Resource, r.Resource) {
			matched = append(matched, &plan.rules[i])
		}
	}
	if len(matched) == 0 {
		d.Allowed = true // no rule limits this resource
		return c.finish(d, r, tollgate.ReasonOK), nil
	}
	reqs := make([]limiter.Request, len(matched))
	for i, rule := range matched {
		var scopeID string
		switch rule.Scope {
		case plans.ScopeKey:
			scopeID = "k:" + keyID
			if keyID == "" { // anonymous callers are their IP
				scopeID = "i:" + r.IP
			}
		case plans.ScopeTenant:
			scopeID = "t:" + tenantID
			if tenantID == "" {
				scopeID = "i:" + r.IP
			}
		case plans.ScopeIP:
			if r.IP == "" {
				return Decision{}, tollgate.Invalid(map[string]string{"ip": "is required: rule " + rule.Name + " limits per IP address"})
			}
			scopeID = "i:" + r.IP
		}
		reqs[i] = limiter.Request{
			Key:    c.prefix + "{" + tag + "}:" + rule.keyPart + ":" + scopeID,
			Params: rule.params,
			Shadow: rule.Mode == plans.ModeShadow,
		}
	}

	storeCtx, cancel := context.WithTimeout(ctx, c.timeout)
	out, err := c.store.Check(storeCtx, limiter.Batch{Requests: reqs, Cost: r.Cost, DryRun: r.DryRun})
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return Decision{}, ctx.Err() // the caller went away; nothing to decide
		}
		c.metrics.storeError()
		if !errors.Is(err, ErrCircuitOpen) && !c.breaker.Open() {
			// Once the circuit is open the breaker logs the outage.
			c.outageLog.warn(ctx, c.log, err)
		}
		return c.degraded(d, r, matched), nil
	}
	d.NowUS = out.NowUS
	d.Allowed = out.Admitted
	for i, rule := range matched {
		res := out.Results[i]
		rr := ruleResult(rule, res)
		if rule.Mode == plans.ModeShadow && !res.Allowed {
			rr.Allowed, rr.WouldDeny = true, true
			rr.RetryAfterMS = 0
			c.metrics.wouldDeny(rule.Name)
		}
		d.Rules = append(d.Rules, rr)
	}
	d.governing = governing(d.Rules, d.Allowed)
	reason := tollgate.ReasonOK
	if !d.Allowed {
		reason = tollgate.ReasonRateLimited
	}
	return c.finish(d, r, reason), nil
}

func ruleResult(rule *compiledRule, res limiter.Result) RuleResult {
	return RuleResult{
		Name:         rule.Name,
		Algorithm:    rule.Algorithm,
		Mode:         rule.Mode,
		Limit:        rule.Limit,
		WindowS:      rule.windowS,
		Allowed:      res.Allowed,
		Remaining:    res.Remaining,
		ResetAfterMS: msCeil(res.ResetAfterUS),
		RetryAfterMS: msCeil(res.RetryAfterUS),
		DelayMS:      msCeil(res.DelayUS),
		Capacity:     rule.capacity(),
	}
}

// degraded decides by failure modes: any closed enforce rule denies.
func (c *Checker) degraded(d Decision, r Request, matched []*compiledRule) Decision {
	d.Degraded = true
	d.Allowed = true
	for _, rule := range matched {
		rr := RuleResult{Name: rule.Name, Algorithm: rule.Algorithm, Mode: rule.Mode, Limit: rule.Limit,
			WindowS: rule.windowS, Allowed: true, Degraded: true, Capacity: rule.capacity()}
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
// rule with the least remaining. Enforce rules win over shadow ones.
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
		if (b.Mode == plans.ModeShadow && rr.Mode == plans.ModeEnforce) ||
			(b.Mode == rr.Mode && rr.Remaining < b.Remaining) {
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
	if d.NowUS == 0 {
		d.NowUS = c.now().UnixMicro()
	}
	if g, ok := d.Governing(); ok {
		d.Limit, d.Remaining, d.ResetAfterMS = &g.Limit, &g.Remaining, &g.ResetAfterMS
		d.Policy = g.Name
		if !d.Allowed {
			d.RetryAfterMS = g.RetryAfterMS
		}
	}
	for _, rr := range d.Rules {
		d.DelayMS = max(d.DelayMS, rr.DelayMS)
	}
	c.metrics.decision(d.Allowed, reason)
	if d.Degraded {
		c.metrics.degradedDecision(d.Allowed)
	}
	if !r.DryRun {
		ev := tollgate.UsageEvent{AtUS: d.NowUS, TenantID: d.TenantID, KeyID: d.KeyID, Tier: d.Tier, IP: r.IP,
			Resource: r.Resource, Cost: r.Cost, Allowed: d.Allowed, Reason: reason}
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

// Network returns what per-IP limits count ip as: an IPv4 address (or an
// IPv4-mapped IPv6 one) as it is, an IPv6 address as its network of
// ipv6Bits bits ("2001:db8:1:2::/64"; the address itself at 128).
// Anything that is not an IP address is returned as it is.
func Network(ip string, ipv6Bits int) string {
	if !strings.Contains(ip, ":") {
		return ip
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	addr = addr.WithZone("").Unmap()
	if addr.Is4() || ipv6Bits >= 128 {
		return addr.String()
	}
	p, _ := addr.Prefix(ipv6Bits)
	return p.String()
}

// NormalizeIP returns the canonical text of an IP address (IPv4-mapped
// IPv6 addresses become IPv4), or false.
func NormalizeIP(s string) (string, bool) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return "", false
	}
	return a.Unmap().WithZone("").String(), true
}
