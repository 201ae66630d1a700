package limiter

import (
	"context"
	"errors"
	"slices"
)

// Hold asks a Batch to reserve its cost as an estimate, to be settled
// later at the actual cost (Settler.Settle). The units are taken exactly
// as a plain check takes them; the store also records, under Key, what a
// settlement needs: the estimate, when the hold expires, and for each rule
// that consumed, its key, parameters and the hold's mark in its state.
type Hold struct {
	// ID names the hold to its owner; the store lists it, with Key, among
	// the holds to expire (ExpireDue).
	ID string
	// Key is the hold record's key. It must share the batch's hash tag.
	Key string
	// TTLUS is how long the hold stays open (µs, > 0); past it, the
	// hold is expired by a Settle with Expire set.
	TTLUS int64
	// ChargeOnExpiry keeps the estimate charged when the hold expires
	// unsettled; false gives it back, as a settlement at cost 0 would.
	ChargeOnExpiry bool
	// Usage, with Batch.Usage, is what the hold's record keeps for the
	// journal entry of its settlement or expiry (statekey.HoldUsage).
	Usage string
}

// HoldRetentionUS is how long a hold record outlives its expiry, so that
// a repeated settlement gets the same answer (µs).
const HoldRetentionUS = HourUS

// MaxSettleCost bounds a settlement's cost, so that every intermediate
// value stays exact in the Redis script's doubles.
const MaxSettleCost int64 = 1 << 31

// maxDebtUS bounds how far a settlement beyond its estimate pushes a
// bucket's state ahead of now (about 35 years): more would change no
// decision anyone lives to see, and would leave the exact range.
const maxDebtUS int64 = 1 << 50

// Settle sets the actual cost of a hold, or expires it.
type Settle struct {
	// Key is the hold record's key (Hold.Key).
	Key string
	// Cost is the actual cost, 0 ≤ Cost ≤ MaxSettleCost. Ignored when
	// Expire is set.
	Cost int64
	// Expire settles a hold past its expiry as Hold.ChargeOnExpiry says;
	// a hold not yet due is left alone (ErrHoldNotDue).
	Expire bool
	// NowUS overrides the store's clock when > 0, as Batch.NowUS does.
	NowUS int64
	// Credits, when set, are the current terms of the prepaid balance the
	// hold drew on: a settlement above the estimate draws on the line at
	// the store's clock (Line less its Expiring), down to −Overdraft, and
	// splits the rest by Overage, as a check sent now would. The balance
	// may have been topped up, adjusted or given another overdraft or
	// mode since the hold was opened, so the terms its check carried are
	// stale. Nil, or a Key other than the hold's balance's, settles on
	// those saved terms: what a caller that no longer knows the balance
	// can do. Log is not read: the hold's log is the one written.
	Credits *Credits
}

// HoldStatus is where a hold stands.
type HoldStatus int64

// Hold statuses, as the Redis script stores them.
const (
	HoldOpen     HoldStatus = 0
	HoldSettled  HoldStatus = 1
	HoldRefunded HoldStatus = 2 // expired unsettled, estimate given back
	HoldCharged  HoldStatus = 3 // expired unsettled, estimate kept
)

// Settlement is a store's answer to a Settle.
type Settlement struct {
	NowUS int64
	// OpenedUS is the store's time of the check that opened the hold (µs):
	// the hold's usage counts then, in that check's minute and month,
	// whenever it is settled. 0 for a record kept by an earlier version,
	// which did not save it.
	OpenedUS int64
	Estimate int64
	// Cost is the units the hold finally counts: the settled cost, 0 for
	// a refunded hold, the estimate for one charged on expiry.
	Cost   int64
	Status HoldStatus
	// Repeated is true when the hold was settled before with the same
	// cost (or expired before): nothing changed now.
	Repeated bool
	// Recorded is true when the store journaled the hold's final units
	// when it was settled or expired (its check had Batch.Usage and
	// Hold.Usage): the caller must not count them again.
	Recorded bool
}

// Errors of Settle.
var (
	// ErrHoldNotFound: no such hold, or its record's retention passed.
	ErrHoldNotFound = errors.New("limiter: hold not found")
	// ErrHoldConflict: the hold was settled with another cost, or expired.
	ErrHoldConflict = errors.New("limiter: hold already settled")
	// ErrHoldNotDue: an Expire before the hold's expiry.
	ErrHoldNotDue = errors.New("limiter: hold not yet expired")
	// ErrSettleCost: a cost below 0 or above MaxSettleCost.
	ErrSettleCost = errors.New("limiter: settle cost out of range")
)

// Settler is a Store that also settles holds. Settle is one atomic step:
// the hold's record and the states it adjusts change together.
type Settler interface {
	Settle(ctx context.Context, s Settle) (Settlement, error)
	// ExpireDue expires up to max holds past their expiry at the store's
	// clock and returns those it changed (a hold already settled or
	// expired by someone else is dropped from the list silently).
	ExpireDue(ctx context.Context, max int) ([]Expired, error)
}

// Expired is a hold ExpireDue expired.
type Expired struct {
	ID string
	Settlement
}

// Validate returns ErrSettleCost for a cost no store accepts, and
// ErrBadCredits for credit terms no check would carry.
func (s Settle) Validate() error {
	if !s.Expire && (s.Cost < 0 || s.Cost > MaxSettleCost) {
		return ErrSettleCost
	}
	if s.Credits != nil {
		return s.Credits.validTerms()
	}
	return nil
}

// holdMark returns the hold's mark in rule p's state after admitting cost
// at now, from the decision d that admitted it: gcra and leaky_bucket the
// new TAT; a refilling token_bucket the TAT it stands for (the time it was
// empty plus its capacity); the windows their window (fixed: start;
// counter: index); the log the time of its entries.
func holdMark(p Params, st *state, now int64, d decision) int64 {
	switch p.Algorithm {
	case GCRA, LeakyBucket, TokenBucket:
		if p.EmissionInterval() == 0 {
			return 0 // a bucket that never refills needs no mark
		}
		return now + d.ResetAfterUS
	case FixedWindow:
		if p.AnchorFirstRequest {
			if st != nil && now < st.window+p.PeriodUS {
				return st.window
			}
			return now
		}
		start, _ := windowBounds(p, now)
		return start
	case SlidingWindowCounter:
		return FloorDiv(now, p.PeriodUS)
	}
	return now
}

// shiftTAT moves a TAT-like state stored (now when absent or passed) by
// delta units of interval µs, for a hold whose units end at mark: units
// given back (delta < 0) free only the part of [mark+interval×delta, mark)
// still ahead of now; units taken (delta > 0) occupy only the part of
// [mark, mark+interval×delta) ahead of now. Units whose time has passed
// would have been replenished by now had they been charged at the check.
func shiftTAT(stored, mark, now, interval, delta int64) int64 {
	stored = max(stored, now)
	if delta < 0 {
		freed := max(0, mark-max(now, mark+interval*delta))
		return max(now, stored-freed)
	}
	taken := max(0, mark+min(interval*delta, maxDebtUS)-max(now, mark))
	return stored + taken
}

// settleRule returns the state of rule p after settling delta units of a
// hold with mark at now, and its time to live (µs; 0 = keep forever, -1 =
// keep the current one); nil when the state is empty (delete it).
// changed is false when nothing is to be written.
func settleRule(p Params, st *state, mark, now, delta int64) (next *state, ttl int64, changed bool) {
	switch p.Algorithm {
	case GCRA, LeakyBucket:
		stored := now
		if st != nil {
			stored = st.tat
		}
		tat := shiftTAT(stored, mark, now, p.EmissionInterval(), delta)
		if tat <= now {
			return nil, 0, st != nil
		}
		return &state{tat: tat}, tat - now, true
	case TokenBucket:
		interval := p.EmissionInterval()
		capacity := max(1, interval) * p.EffectiveBurst()
		if interval == 0 {
			return &state{tokens: min(capacity, st.tokensAt(false, capacity, now)-delta), once: true}, 0, true
		}
		stored := now
		if st != nil {
			stored = st.bucketNumber() + capacity // the TAT it stands for
		}
		tat := shiftTAT(stored, mark, now, interval, delta)
		if tat <= now {
			return nil, 0, st != nil
		}
		return &state{tokens: capacity - (tat - now), stamp: now}, tat - now, true
	case FixedWindow:
		end := mark + p.PeriodUS
		if !p.AnchorFirstRequest {
			_, end = windowBounds(p, mark)
		}
		switch {
		case st != nil && st.window == mark:
			return &state{window: mark, count: max(0, st.count+delta)}, -1, true
		case (st == nil || st.window < mark) && delta > 0 && end > now:
			// A hold of 0 wrote nothing: its window starts now.
			return &state{window: mark, count: delta}, end - now, true
		}
		return nil, 0, false
	case SlidingWindowCounter:
		end := (mark + 2) * p.PeriodUS
		switch {
		case st != nil && st.window == mark:
			return &state{window: st.window, count: max(0, st.count+delta), prev: st.prev}, -1, true
		case st != nil && st.window == mark+1:
			return &state{window: st.window, count: st.count, prev: max(0, st.prev+delta)}, -1, true
		case (st == nil || st.window < mark) && delta > 0 && end > now:
			// A hold of 0 wrote nothing: its window starts now.
			var prev int64
			if st != nil && st.window == mark-1 {
				prev = st.count
			}
			return &state{window: mark, count: delta, prev: prev}, end - now, true
		}
		return nil, 0, false
	case SlidingWindowLog:
		if mark <= now-p.PeriodUS || st == nil && delta < 0 {
			return nil, 0, false
		}
		var log []int64
		if st != nil {
			log = st.log
		}
		from, _ := slices.BinarySearch(log, mark)
		to, _ := slices.BinarySearch(log, mark+1)
		at := int64(to - from)
		keep := max(0, at+delta)
		if delta > 0 {
			keep = at + min(delta, p.Limit)
		}
		next := make([]int64, 0, len(log)-int(at)+int(keep))
		next = append(next, log[:from]...)
		for range keep {
			next = append(next, mark)
		}
		next = append(next, log[to:]...)
		if len(next) == 0 {
			return nil, 0, st != nil
		}
		return &state{log: next}, next[len(next)-1] + p.PeriodUS - now, true
	}
	return nil, 0, false
}
