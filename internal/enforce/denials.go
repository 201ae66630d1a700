package enforce

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/statekey"
)

// denials remembers, per state key, the state on which the store last
// denied a check, so that later checks it would deny too are denied here
// without a store call.
//
// Exactness: between two admissions a rule's state only moves towards
// "more used" — admissions consume, time only replenishes — so a check
// that the remembered state denies, evaluated at a time no earlier than
// the store's clock, is one the store would deny. The store's clock is
// estimated as the local monotonic clock plus an offset taken from the
// last answer: the store's time of that answer minus the local time
// before the call was made. The store read its clock after that, so the
// estimate is never behind the store (unless the store's clock steps
// forward), and a later time only makes the remembered state less used:
// an error can only send a check to the store, never deny one the store
// would admit.
//
// Give-backs break "only more used": a hold settled below its estimate or
// expired with a refund, a lease released, a balance topped up. Those
// that happen in this process (Checker.Settle, ExpireHolds,
// ReleaseLease) forget at once every entry under the hash tag of the
// states they touched, and every entry of a check that was under way
// then (givenBack); those of other processes, and of the worker, reach
// this one within maxDenialLife, the bound revocations meet too: no
// entry lives longer. So a local denial is never one the store would
// not give, but for up to maxDenialLife after a give-back elsewhere.
//
// An entry is forgotten once its state could admit a check of cost 1 (it
// may still deny larger ones, but no more is promised), after at most
// maxDenialLife, when the rule's parameters differ from those it was
// stored with (but for a fixed window's limit and burst: sameState), when
// the store admits a check on its key, and when this process gives units
// back under its hash tag. A check of cost 0 (a peek)
// always goes to the store, as does one with any rule that has no entry
// or whose entries all allow it. Only the decision is the store's: the
// figures of a local denial (remaining, retry_after) are those of the
// remembered state, so retry_after may be shorter than the store would
// answer, never longer.
//
// denials is safe for concurrent use; a nil *denials remembers nothing.
type denials struct {
	shards [denialShards]denialShard
	// offsetUS is the store's clock minus the local clock, in µs.
	offsetUS atomic.Int64
	// now is the local clock; tests replace it.
	now func() time.Time
	// start anchors local µs on the monotonic clock.
	start time.Time
	// givenAtUS is, per hash tag, the local µs of the last give-back in
	// this process under it (math.MinInt64: none): an entry of a check
	// sent no later is stale.
	givenAtUS [256]atomic.Int64
}

const (
	denialShards = 16
	// maxDenialsPerShard bounds the memory: past it a shard forgets its
	// expired entries, then all of them.
	maxDenialsPerShard = 1 << 14
	// maxDenialLife bounds how long a denial is remembered, so that units
	// given back by another process (a settlement, a hold's expiry, a
	// lease's release, a top-up) or state an operator cleared in Redis
	// are seen within that time: the second a revocation takes too. A
	// caller that keeps being denied costs the store one call a second
	// per process.
	maxDenialLife = limiter.SecondUS
)

type denialShard struct {
	mu      sync.Mutex
	entries map[string]denial
}

type denial struct {
	params limiter.Params
	state  limiter.RuleState
	// untilUS is the store time from which the entry is not used.
	untilUS int64
	// sentUS is the local µs at which the check that taught it was sent.
	sentUS int64
}

func newDenials(now func() time.Time) *denials {
	d := &denials{now: now, start: now()}
	for i := range d.shards {
		d.shards[i].entries = map[string]denial{}
	}
	for i := range d.givenAtUS {
		d.givenAtUS[i].Store(math.MinInt64)
	}
	return d
}

// givenBack forgets every entry under hash tag tag, and every entry of a
// check sent until now: this process gave units back under it. Safe on
// nil denials.
func (d *denials) givenBack(tag byte) {
	if d == nil {
		return
	}
	now, at := d.localUS(), &d.givenAtUS[tag]
	for old := at.Load(); now > old && !at.CompareAndSwap(old, now); old = at.Load() {
	}
}

// stale reports whether an entry of key taught by a check sent at local
// µs sentUS predates a give-back under key's hash tag.
func (d *denials) stale(key string, sentUS int64) bool {
	return d.givenAtUS[statekey.TagOf(key)].Load() >= sentUS
}

// localUS returns the local monotonic clock in µs.
func (d *denials) localUS() int64 { return d.now().Sub(d.start).Microseconds() }

// localNowUS returns the local monotonic clock in µs (0 on nil denials):
// taken when a check is sent, it is the time decideAt decides at and
// observe takes when the store answers.
func (d *denials) localNowUS() int64 {
	if d == nil {
		return 0
	}
	return d.localUS()
}

func (d *denials) shard(key string) *denialShard {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return &d.shards[h%denialShards]
}

// decide denies b here when the remembered states of all its rules deny
// it; ok is false when the store must decide.
func (d *denials) decide(b limiter.Batch) (out limiter.Outcome, ok bool) {
	return d.decideAt(b, d.localNowUS())
}

// decideAt is decide at local time localUS (from localNowUS).
func (d *denials) decideAt(b limiter.Batch, localUS int64) (out limiter.Outcome, ok bool) {
	if d == nil || b.Cost == 0 || len(b.Requests) == 0 {
		return limiter.Outcome{}, false
	}
	var stack [4]denial
	entries := stack[:0]
	nowUS := localUS + d.offsetUS.Load()
	for _, r := range b.Requests {
		sh := d.shard(r.Key)
		sh.mu.Lock()
		e, found := sh.entries[r.Key]
		if found && (nowUS >= e.untilUS || !sameState(e.params, r.Params) || d.stale(r.Key, e.sentUS)) {
			delete(sh.entries, r.Key)
			found = false
		}
		sh.mu.Unlock()
		if !found {
			return limiter.Outcome{}, false
		}
		entries = append(entries, e)
	}
	results := make([]limiter.Result, len(b.Requests))
	admitted := true
	for i, r := range b.Requests {
		results[i] = limiter.Decide(r.Params, entries[i].state, nowUS, b.Cost)
		if !results[i].Allowed && !r.Shadow {
			admitted = false
		}
	}
	if admitted {
		return limiter.Outcome{}, false
	}
	return limiter.Outcome{NowUS: nowUS, Admitted: false, Results: results}, true
}

// observe learns from the store's answer to b, asked at local time
// sentUS: its clock, and what its states deny.
func (d *denials) observe(b limiter.Batch, out limiter.Outcome, sentUS int64) {
	if d == nil {
		return
	}
	if out.NowUS > 0 {
		d.offsetUS.Store(out.NowUS - sentUS)
	}
	if out.Admitted {
		if b.Cost > 0 && !b.DryRun {
			for _, r := range b.Requests {
				sh := d.shard(r.Key)
				sh.mu.Lock()
				delete(sh.entries, r.Key)
				sh.mu.Unlock()
			}
		}
		return
	}
	if len(out.States) != len(b.Requests) {
		return
	}
	for _, res := range out.Results {
		if res.Unknown {
			return // a tally not rebuilt yet: no state to deny on
		}
	}
	for _, r := range b.Requests {
		if r.Params.Split {
			// A global_split window decides on its share plus the units
			// the regions moved to it, which its state does not say; and
			// a check answered here would not count in the demand that
			// moves units to this region.
			return
		}
	}
	// The check is denied until every enforcing rule that denies a cost
	// of 1 admits one again.
	until := int64(-1)
	for i, r := range b.Requests {
		st := out.States[i]
		if !st.Known {
			return // its state is not reported: the store decides
		}
		if r.Shadow {
			continue
		}
		res := limiter.Decide(r.Params, st, out.NowUS, 1)
		switch {
		case res.Allowed:
		case res.RetryAfterUS < 0:
			until = out.NowUS + maxDenialLife
		default:
			until = max(until, out.NowUS+min(res.RetryAfterUS, maxDenialLife))
		}
	}
	if until <= out.NowUS {
		return
	}
	for _, r := range b.Requests {
		if d.stale(r.Key, sentUS) {
			return // units were given back while the store answered
		}
	}
	for i, r := range b.Requests {
		sh := d.shard(r.Key)
		sh.mu.Lock()
		if len(sh.entries) >= maxDenialsPerShard {
			sh.sweep(out.NowUS)
		}
		sh.entries[r.Key] = denial{params: r.Params, state: out.States[i], untilUS: until, sentUS: sentUS}
		sh.mu.Unlock()
	}
}

// sweep drops expired entries, or all of them when none has expired;
// sh.mu is held.
func (sh *denialShard) sweep(nowUS int64) {
	n := len(sh.entries)
	for k, e := range sh.entries {
		if nowUS >= e.untilUS {
			delete(sh.entries, k)
		}
	}
	if len(sh.entries) == n {
		clear(sh.entries)
	}
}

// sameState reports whether a state kept under rule parameters a means
// what it means under b: the same parameters, or fixed windows that
// differ only in limit and burst, which judge a window's count but do not
// shape it. (A bucket's state is read through its capacity, and a bucket
// that never refills keeps its tokens where one that does keeps a time.)
// A check is decided on the remembered state with its own parameters, as
// the store decides it on the stored state, so two fixed windows that
// share a key (a spend cap and the monthly quota's tally) share its
// entry.
func sameState(a, b limiter.Params) bool {
	if a.Algorithm == limiter.FixedWindow && b.Algorithm == limiter.FixedWindow {
		a.Limit, a.Burst = b.Limit, b.Burst
	}
	return a == b
}
