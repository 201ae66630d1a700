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
	"sync"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/breaker"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/statekey"
)

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
	// journal: checks name their usage row (limiter.Batch.Usage), for a
	// store that journals them (CheckerConfig.JournalUsage).
	journal bool
	// region is the deployment's regions: global rules are decided as
	// their scope says (regions.go).
	region region.Config

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
	// JournalUsage has every check that is not a dry run name its usage
	// row (limiter.Batch.Usage), so that a store that journals usage
	// (redisstore) records an admitted check's units in the call that
	// admits it; the Recorder then gets those decisions marked Recorded,
	// to count their detail but not their units again. Set it only when
	// the usage worker drains that store's journals.
	JournalUsage bool
	// Region is the process's region (the zero value: a deployment of
	// one region, where every rule is regional).
	Region region.Config
}

// NewChecker returns a Checker on the holder's snapshots and store. The
// store is called through a circuit breaker: while it is down, checks are
// decided by the rules' failure modes at once. Close stops the breaker's
// background probing.
func NewChecker(holder *snapshot.Holder, store limiter.Store, cfg CheckerConfig) *Checker {
	c := &Checker{holder: holder, prefix: cfg.Prefix, timeout: cfg.StoreTimeout,
		recorder: cfg.Recorder, metrics: cfg.Metrics, log: cfg.Log, now: time.Now, ipv6Prefix: cfg.IPv6Prefix,
		journal: cfg.JournalUsage, region: cfg.Region}
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
			Key:    statekey.ProbeKey(c.prefix),
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
	for _, rule := range matched {
		batch.Money = batch.Money || rule.Money()
	}
	if hot := who.credits(); hot != nil {
		batch.Credits = c.creditsFor(hot, creditKeys)
	}
	var holdID string
	if (r.Hold || r.AutoHold && asksHold(matched)) && !r.DryRun && c.settler != nil {
		batch.Hold, holdID = c.holdFor(r, matched, reqs, creditKeys, &d)
	}
	if c.journal && !r.DryRun {
		batch.Usage = statekey.UsageEntry(d.TenantID, d.KeyID, d.Tier, usageResource(r.route))
		if batch.Hold != nil {
			batch.Hold.Usage = statekey.HoldUsage(holdHash(holdID), anonymousIP(d.Tier, r.IP), statekey.EntryRow(batch.Usage))
		}
	}
	var leaseID string
	if batch.TakesLease() {
		batch.Lease, leaseID = c.leaseFor(holdID, reqs, r, &d)
	}
	out, local, err := c.decide(ctx, batch)
	// Admitted and its units taken on the primary, but no replica
	// confirmed them in time, or its hold not yet listed for expiry:
	// answer what the store decided, degraded, rather than refuse (or
	// admit without a hold ID) what was charged.
	unconfirmed := err != nil && out.Admitted &&
		(errors.Is(err, limiter.ErrNotReplicated) || errors.Is(err, limiter.ErrHoldNotListed))
	if unconfirmed {
		c.storeFailed(ctx, err)
		err = nil
	}
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
			d.LeaseTTLMS = ttl / 1000
		}
	}
	d = c.decided(d, r, matched, out, who.tenant)
	d.Degraded = d.Degraded || unconfirmed
	if local {
		// Denied from the cache of recent denials: the store was not
		// asked, so the balance is not known; say nothing rather than 0.
		d.Credits = nil
	}
	return d, nil
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
