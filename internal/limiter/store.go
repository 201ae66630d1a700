package limiter

import (
	"context"
	"errors"
	"time"
)

// Request asks one rule to decide on a check.
type Request struct {
	// Key is the rule's state key. All keys of one Batch must share a hash
	// tag ({…}) so that the batch runs in one call on Redis Cluster.
	Key    string
	Params Params
	// Shadow rules are evaluated and reported but never deny.
	Shadow bool
}

// Batch is one check: every matching rule, decided all-or-nothing.
type Batch struct {
	Requests []Request
	// Cost is the units the check consumes; 0 peeks. A cost above a rule's
	// capacity is denied with RetryAfterUS -1; a negative cost is an error.
	Cost int64
	// DryRun evaluates without consuming.
	DryRun bool
	// NowUS overrides the store's clock (µs since the epoch) when > 0.
	// Production leaves it 0: Redis takes the time from TIME.
	NowUS int64
	// ReportState asks for the state each rule was decided on when the
	// check is not admitted (Outcome.States), so that the caller can deny
	// the same rule and key locally until that state could admit again.
	ReportState bool
	// Hold, when set on a batch that is not a dry run, makes Cost an
	// estimate: an admitted check also opens the hold (see Hold).
	Hold *Hold
	// Lease names the lease an admitted check takes on its concurrency
	// rules; required when the batch TakesLease, ignored otherwise.
	Lease *Lease
	// Credits, when set, draws Cost on a prepaid balance, all-or-nothing
	// with the rules (see Credits). A batch with credits may have no
	// requests.
	Credits *Credits
	// Money marks a check whose rules count money beyond Hold and
	// Credits, which always do: an overage plan's monthly quota (its
	// tally) or a spend cap, whose counts are billed. A store that
	// confirms money on replicas before answering (redisstore's
	// WaitReplicas) does so for a check that is not a dry run and has a
	// hold, a prepaid balance or Money, and for no other.
	Money bool
	// Usage, when set on a batch that is not a dry run, is the head of the
	// check's usage journal entry (statekey.UsageEntry): a store that journals usage
	// records an admitted check's decision and units in its hash tag's
	// journal in the same step that admits it, so that they outlive the
	// caller, and says so in Outcome.Recorded. A hold's check records the
	// decision (its units count at settlement, under Hold.Usage).
	Usage string
}

// Outcome is a store's answer to a Batch.
type Outcome struct {
	// NowUS is the time the store decided at.
	NowUS int64
	// Admitted is true when every non-shadow rule allowed the check; only
	// then was anything consumed.
	Admitted bool
	// Results holds one result per request, in order.
	Results []Result
	// States holds, when the batch asked (ReportState) and the check was
	// not admitted, the state each request was decided on; nil otherwise.
	States []RuleState
	// Credits is what the check did to its balance, when the batch drew
	// on one (Batch.Credits).
	Credits CreditResult
	// Recorded is true when the store journaled the check's usage
	// (Batch.Usage): the caller must not count it again.
	Recorded bool
}

// Store decides batches atomically. Implementations are safe for
// concurrent use.
type Store interface {
	Check(ctx context.Context, b Batch) (Outcome, error)
}

// Window is the state of a fixed window as a store keeps it: StartUS is
// the window's start (µs since the epoch) and Count the units admitted in
// it. Present is false when the store holds no state at the key (never
// written, or expired).
type Window struct {
	StartUS, Count int64
	Present        bool
}

// WindowReader reads the state of fixed windows without changing it: the
// usage worker reads tenants' monthly quota counters with it. The Redis
// store implements it.
type WindowReader interface {
	// ReadWindows returns the state at each of keys, in order. The keys
	// may lie in different hash slots; the caller bounds how many it
	// reads at once.
	ReadWindows(ctx context.Context, keys []string) ([]Window, error)
}

// SelfTimed is a Store that bounds by itself how long each check waits for
// its answer, from when the check arrives, so that a caller need not give
// every check a context with a deadline (a timer per check).
type SelfTimed interface {
	Store
	// CheckTimeout is the longest a check waits for its answer; ok is
	// false when the store does not bound it (the caller's context must).
	CheckTimeout() (d time.Duration, ok bool)
}

// ErrEmptyBatch is returned for a batch without requests.
var ErrEmptyBatch = errors.New("limiter: empty batch")

// ErrNegativeCost is returned for a batch whose cost is below zero: it
// would hand units back instead of consuming them.
var ErrNegativeCost = errors.New("limiter: negative cost")

// ErrNotReplicated is returned (wrapped) by a store that applied a call
// carrying money (Batch.Money) on its server but could not confirm, within
// its bound, that enough replicas have the writes: a failover now could
// lose them. An admitted check is returned with its outcome beside the
// error (its writes stand on the server: the caller answers what the
// store decided, marked degraded); a refused check wrote nothing and is
// answered without it; a settlement or expiry fails with it. A circuit
// breaker does not count it against the store, which answered.
var ErrNotReplicated = errors.New("limiter: writes not confirmed on enough replicas")

// ErrHoldNotListed is returned (wrapped) by a store that admitted a check
// with a hold but could not yet list the hold for expiry (its index on
// another node of a Redis Cluster failed). The outcome is returned beside
// it: the hold stands, charged, and is answered (its ID lets the caller
// settle it); the store keeps trying to list it. A circuit breaker does
// not count it against the store, which answered.
var ErrHoldNotListed = errors.New("limiter: hold admitted but not yet listed for expiry")

// ErrBadHold is returned for a hold on a dry run, or without a key or a
// positive time to live.
var ErrBadHold = errors.New("limiter: hold needs a key, a positive TTL and no dry run")

// Validate returns ErrEmptyBatch, ErrNegativeCost, ErrBadHold, ErrBadLease
// or ErrBadCredits for a batch no store can decide, and nil otherwise.
func (b Batch) Validate() error {
	switch {
	case len(b.Requests) == 0 && b.Credits == nil:
		return ErrEmptyBatch
	case b.Cost < 0:
		return ErrNegativeCost
	case b.Hold != nil && (b.DryRun || b.Hold.TTLUS <= 0 || b.Hold.Key == ""):
		return ErrBadHold
	case (b.Lease == nil || b.Lease.Key == "") && b.TakesLease():
		return ErrBadLease
	}
	return b.Credits.validate()
}
