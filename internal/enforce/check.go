// Package enforce answers the hot-path question — may this caller make
// this request now? — from the current snapshot of plans, tenants and keys
// (package snapshot) and the limiter store, which decides the rules that
// match in one call shared with other checks (checks are batched), unless
// a recent denial answers it locally.
package enforce

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/breaker"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/tenants"
)

// Request is one check, validated.
type Request struct {
	Key      string
	IP       string
	Resource string
	Cost     int64
	DryRun   bool

	// route is what usage records as the resource: the plan's route that
	// Resource matched (see plans.Routes.Match).
	route string
	// Hold makes Cost an estimate: an admitted check opens a hold, to be
	// settled at the actual cost (Checker.Settle). HoldTTLS is how long it
	// stays open unsettled, 0 for the rules' (or the default).
	Hold     bool
	HoldTTLS int64
	// AutoHold opens a hold when a matching rule asks for one (its option
	// hold), as Hold does; it changes nothing otherwise.
	AutoHold bool
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

	// rule is the rule the result is of; nil in results built by hand.
	rule *snapshot.Rule
	// count is the rule's count after the check (snapshot.Rule.Reported):
	// for the monthly quota, the tenant's month-to-date units.
	count int64
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
	// 3339, UTC, ms). Both are empty when no slot was taken.
	LeaseID        string `json:"lease_id,omitempty"`
	LeaseExpiresAt string `json:"lease_expires_at,omitempty"`
	// Credits is the tenant's prepaid balance, when its plan draws on
	// credits and the store decided.
	Credits *CreditsResult `json:"credits,omitempty"`

	// NowUS is when the decision was made (the store's clock).
	NowUS int64 `json:"-"`
	// crossed are the tenant's quota thresholds the check crossed.
	crossed []int64
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
	holder  *snapshot.Holder
	store   limiter.Store
	breaker *breaker.Breaker
	// settler settles holds on the store itself (nil when it cannot):
	// settlements are not decisions, so no breaker stands in for them.
	settler limiter.Settler
	// leaser renews and releases the leases of concurrency rules (nil
	// when the store cannot).
	leaser     limiter.Leaser
	prefix     string
	timeout    time.Duration
	recorder   Recorder
	metrics    *Metrics
	log        *slog.Logger
	now        func() time.Time
	ipv6Prefix int
	// denials answers checks the store would deny without asking it (nil
	// when off).
	denials *denials
	// selfTimed: the store bounds each check's wait within timeout by
	// itself (limiter.SelfTimed), so no deadline is set per check.
	selfTimed bool

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
	// NoLocalDenials makes every check ask the store, even one the store
	// denied on a state that cannot have admitted anything since (see
	// denials.go). A memory store is always asked.
	NoLocalDenials bool
	// IPv6Prefix groups IPv6 callers by network for per-IP limits and
	// usage (default 64: one subscriber usually holds a whole /64 and
	// could otherwise step through 2^64 fresh allowances); 128 counts
	// every address alone. IPv4 addresses count alone.
	IPv6Prefix int
	// Breaker configures the circuit breaker the checker puts around its
	// store (see breaker.Breaker); its Probe, ProbeTimeout and Log default to a
	// dry run on a key under Prefix, StoreTimeout and Log.
	Breaker breaker.Config
}

// NewChecker returns a Checker on the holder's snapshots and store. The
// store is called through a circuit breaker: while it is down, checks are
// decided by the rules' failure modes at once. Close stops the breaker's
// background probing.
func NewChecker(holder *snapshot.Holder, store limiter.Store, cfg CheckerConfig) *Checker {
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
	// A store in this process is as cheap to ask as the denials, and its
	// clock is whatever its owner makes it (tests jump it by weeks).
	if _, inProcess := store.(*limiter.MemoryStore); !inProcess && !cfg.NoLocalDenials {
		c.denials = newDenials(time.Now)
	}
	if st, ok := store.(limiter.SelfTimed); ok {
		d, bounded := st.CheckTimeout()
		c.selfTimed = bounded && d <= c.timeout
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
	c.settler, _ = store.(limiter.Settler)
	c.leaser, _ = store.(limiter.Leaser)
	c.breaker = breaker.New(store, bc)
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
	r.IP = Network(r.IP, c.ipv6Prefix)
	d := Decision{Tier: tollgate.TierAnonymous, governing: -1}
	who, refused := c.identify(ctx, s, r, &d)
	r.route = who.route(r.Resource)
	if refused != "" {
		return c.finish(d, r, refused), nil
	}
	var matchedBuf [8]*snapshot.Rule // most checks match few rules
	matched := matchingRules(matchedBuf[:0], who.plan, r.Resource)
	if len(matched) == 0 && who.credits() == nil {
		d.Allowed = true // no rule limits this resource
		return c.finish(d, r, tollgate.ReasonOK), nil
	}
	reqs, creditKeys, err := c.requests(matched, who, r.IP)
	if err != nil {
		return Decision{}, err
	}
	batch := limiter.Batch{Requests: reqs, Cost: r.Cost, DryRun: r.DryRun, ReportState: c.denials != nil}
	if hot := who.credits(); hot != nil {
		batch.Credits = c.creditsFor(hot, creditKeys)
	}
	var holdID string
	if (r.Hold || r.AutoHold && asksHold(matched)) && !r.DryRun && c.settler != nil {
		batch.Hold, holdID = c.holdFor(r, matched, reqs, creditKeys, &d)
	}
	var leaseID string
	if batch.TakesLease() {
		batch.Lease, leaseID = c.leaseFor(holdID, reqs, r, &d)
	}
	out, local, err := c.decide(ctx, batch)
	if err != nil {
		if ctx.Err() != nil {
			return Decision{}, ctx.Err() // the caller went away; nothing to decide
		}
		c.storeFailed(ctx, err)
		return c.degraded(d, r, matched, who.credits()), nil
	}
	if out.Admitted && batch.Hold != nil {
		expires := time.UnixMicro(out.NowUS + batch.Hold.TTLUS).UTC()
		d.HoldID, d.HoldExpiresAt = holdID, expires.Format(timeFormat)
		d.HoldRefundOn = refundOn(matched)
	}
	if out.Admitted && batch.Lease != nil {
		if ttl := leasedTTL(reqs, out.Results); ttl > 0 {
			d.LeaseID, d.LeaseExpiresAt = leaseID, time.UnixMicro(out.NowUS+ttl).UTC().Format(timeFormat)
		}
	}
	d = c.decided(d, r, matched, out, who.tenant)
	if local {
		// Denied from the cache of recent denials: the store was not
		// asked, so the balance is not known; say nothing rather than 0.
		d.Credits = nil
	}
	return d, nil
}

// caller is who a check is for: a key of a tenant, or an anonymous caller
// (key and tenant nil), and the plan that limits it.
type caller struct {
	key    *snapshot.Key
	tenant *snapshot.Tenant
	plan   *snapshot.Plan
}

// route returns what usage records a check of resource by who under: the
// route of who's plan it matches, or tollgate.ResourceOther (or
// tollgate.ResourceAny) when there is no plan or no route matches.
func (who caller) route(resource string) string {
	if who.plan == nil {
		return plans.Routes{}.Match(resource)
	}
	return who.plan.Routes.Match(resource)
}

// identify finds r's caller in s and fills in d's tier, tenant, key and
// plan; refused is the reason when the check is refused before any rule
// (an unknown, revoked or expired key, a suspended tenant, no key where
// the anonymous plan is missing). A refused caller has only its plan,
// when known, for its usage to name the route.
func (c *Checker) identify(ctx context.Context, s *snapshot.Snapshot, r Request, d *Decision) (who caller, refused string) {
	if r.Key == "" {
		if s.Anonymous() == nil {
			return caller{}, tollgate.ReasonKeyRequired
		}
		d.Plan = s.Anonymous().Name
		return caller{plan: s.Anonymous()}, ""
	}
	d.Tier = tollgate.TierAuthenticated
	if !tenants.WellFormed(r.Key) {
		return caller{}, tollgate.ReasonInvalidKey
	}
	key, tenant := c.holder.FindKey(ctx, s, tenants.HashKey(r.Key))
	if tenant == nil { // unknown, or its tenant is gone
		return caller{}, tollgate.ReasonInvalidKey
	}
	d.TenantID, d.KeyID = tenant.ID, key.ID
	if tenant.Plan != nil {
		d.Plan = tenant.Plan.Name
	}
	if refused := c.refusal(key, tenant); refused != "" {
		return caller{plan: tenant.Plan}, refused
	}
	if tenant.Plan == nil {
		// Cannot happen with a consistent snapshot (every tenant has a
		// plan); if it does, fail closed rather than admit unlimited.
		d.Degraded = true
		c.log.ErrorContext(ctx, "tenant without a plan in the snapshot", "tenant_id", d.TenantID)
		return caller{}, tollgate.ReasonUnavailable
	}
	return caller{key: key, tenant: tenant, plan: tenant.Plan}, ""
}

// refusal returns why key of tenant may not be used now, or "".
func (c *Checker) refusal(key *snapshot.Key, tenant *snapshot.Tenant) string {
	nowUS := c.now().UnixMicro()
	switch {
	case key.RevokedAtUS != 0 && key.RevokedAtUS <= nowUS:
		return tollgate.ReasonKeyRevoked
	case key.ExpiresAtUS != 0 && key.ExpiresAtUS <= nowUS:
		return tollgate.ReasonKeyExpired
	case tenant.Status != tenants.StatusActive:
		return tollgate.ReasonTenantSuspended
	}
	return ""
}

// matchingRules appends to matched the rules of plan whose resource
// pattern matches resource.
func matchingRules(matched []*snapshot.Rule, plan *snapshot.Plan, resource string) []*snapshot.Rule {
	for i := range plan.Rules {
		if plans.MatchResource(plan.Rules[i].Resource, resource) {
			matched = append(matched, &plan.Rules[i])
		}
	}
	return matched
}

// decide answers batch from the local denials when they can, else from
// the store (through the breaker, within the store timeout), and tells
// the denials what the store answered; local reports the former.
func (c *Checker) decide(ctx context.Context, batch limiter.Batch) (out limiter.Outcome, local bool, err error) {
	sentUS := c.denials.localNowUS()
	if out, ok := c.denials.decideAt(batch, sentUS); ok {
		return out, true, nil
	}
	if c.selfTimed {
		out, err = c.store.Check(ctx, batch)
	} else {
		storeCtx, cancel := context.WithTimeout(ctx, c.timeout)
		out, err = c.store.Check(storeCtx, batch)
		cancel()
	}
	if err != nil {
		return out, false, err
	}
	c.denials.observe(batch, out, sentUS)
	return out, false, nil
}

// storeFailed counts and logs a failed store call.
func (c *Checker) storeFailed(ctx context.Context, err error) {
	c.metrics.storeError()
	if !errors.Is(err, breaker.ErrOpen) && !c.breaker.Open() {
		// Once the circuit is open the breaker logs the outage.
		c.outageLog.warn(ctx, c.log, err)
	}
}

// decided completes d with the store's outcome for the matched rules of
// tenant (nil for an anonymous caller).
func (c *Checker) decided(d Decision, r Request, matched []*snapshot.Rule, out limiter.Outcome, tenant *snapshot.Tenant) Decision {
	d.Rules = make([]RuleResult, 0, len(matched))
	d.NowUS = out.NowUS
	d.Allowed = out.Admitted
	for i, rule := range matched {
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
	reason := tollgate.ReasonOK
	unknown := false
	if batch := out.Credits; tenant != nil && tenant.Credits != nil {
		if batch.Unknown {
			// The store has no counter of the balance (it lost it, or the
			// credits drainer has not made it from the ledger yet): nothing
			// was drawn, as when the store is down.
			unknown, d.Degraded = true, true
		} else {
			d.Credits = &CreditsResult{Balance: batch.Balance, Drawn: batch.Drawn, Overage: batch.Overage}
		}
	}
	switch {
	case !d.Allowed && unknown && !out.Credits.Allowed && !ruleDenied(d.Rules):
		reason = tollgate.ReasonUnavailable
		d.governing = -1
		d.RetryAfterMS = outageRetryMS
	case !d.Allowed && d.Credits != nil && !out.Credits.Allowed && !ruleDenied(d.Rules):
		reason = tollgate.ReasonCreditsExhausted
		d.governing = -1
		d.RetryAfterMS = -1 // until a top-up
	case !d.Allowed && d.Rules[d.governing].Name == plans.SpendCapRuleName:
		reason = tollgate.ReasonSpendCap
	case !d.Allowed:
		reason = tollgate.ReasonRateLimited
	case tenant != nil && len(tenant.Points) > 0 && !r.DryRun:
		d.crossed = crossed(d.Rules, tenant.Points, r.Cost)
	}
	return c.finish(d, r, reason)
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
		tally := rr.rule != nil && rr.rule.Tally
		if rr.Name != plans.QuotaRuleName || (rr.WouldDeny && !tally) || rr.Degraded {
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

// requests returns the limiter requests of the matched rules for who
// (from ip), their state keys laid out as package statekey describes, and
// when who draws on credits the two keys of its balance, all in one
// string.
func (c *Checker) requests(matched []*snapshot.Rule, who caller, ip string) ([]limiter.Request, string, error) {
	var addrBuf [24]byte
	addr := statekey.AppendAddr(addrBuf[:0], ip)
	var stack [256]byte
	b := stack[:0]
	var endStack [8]int
	ends := endStack[:0]
	for _, rule := range matched {
		b = append(b, c.prefix...)
		if who.key == nil {
			b = append(b, '{', statekey.IPTag(addr), '}')
			b = append(b, rule.StateID[:]...)
			b = append(b, addr...)
		} else {
			b = append(b, '{', who.tenant.Tag, '}')
			b = append(b, rule.StateID[:]...)
			switch rule.Scope {
			case plans.ScopeKey:
				b = append(b, who.key.Short[:]...)
			case plans.ScopeTenant:
				b = append(b, who.tenant.Short[:]...)
			case plans.ScopeIP:
				if ip == "" {
					return nil, "", tollgate.Invalid(map[string]string{"ip": "is required: rule " + rule.Name + " limits per IP address"})
				}
				b = append(b, who.tenant.Short[:]...)
				b = append(b, addr...)
			}
		}
		ends = append(ends, len(b))
	}
	rulesEnd := len(b)
	if who.credits() != nil {
		b = statekey.AppendCredits(b, c.prefix, who.tenant.Tag, who.tenant.Short)
	}
	keys := string(b)
	reqs := make([]limiter.Request, len(matched))
	from := 0
	for i, rule := range matched {
		reqs[i] = limiter.Request{Key: keys[from:ends[i]], Params: rule.Params, Shadow: rule.Mode == plans.ModeShadow}
		from = ends[i]
	}
	return reqs, keys[rulesEnd:], nil
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
	if !d.Allowed && len(d.Rules) == 0 {
		d.RetryAfterMS = outageRetryMS
	}
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
	if d.Rules == nil {
		d.Rules = []RuleResult{}
	}
	if d.NowUS == 0 {
		d.NowUS = c.now().UnixMicro()
	}
	if d.governing >= 0 && d.governing < len(d.Rules) {
		g := &d.Rules[d.governing]
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
			Resource: r.route, Cost: r.Cost, Allowed: d.Allowed, Reason: reason, Crossed: d.crossed}
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
