package limiter

import (
	"context"
	"errors"
	"slices"
)

// A concurrency rule limits requests in flight: at most Limit at once.
// An admitted check that costs something takes one slot of every
// concurrency rule it matched that allowed it — whatever its cost, it is
// one request — under a lease: the slot is held until the lease is
// released (Leaser.Release, or the settlement of the check's hold) or
// expires, PeriodUS after the check or its last renewal (Leaser.Renew). A
// client that dies without releasing frees its slot when its lease
// expires, with no sweeper: a rule counts only leases not yet expired.
//
// The store keeps, per rule and key, each lease's expiry (the Redis
// script: a sorted set of lease keys by expiry), and per lease a record
// of the rules it holds (the script: a hash under Lease.Key).

// MaxLeaseTTLUS bounds a concurrency rule's lease time to live (1 h): a
// longer request renews its lease.
const MaxLeaseTTLUS = HourUS

// MaxConcurrency bounds a concurrency rule's limit: its state keeps one
// entry per request in flight.
const MaxConcurrency = 100_000

// Lease names the lease an admitted check with a concurrency rule takes.
type Lease struct {
	// Key is the lease record's key. It must share the batch's hash tag;
	// it also names the lease in each concurrency rule's state.
	Key string
}

// LeaseRef names a lease to renew or release.
type LeaseRef struct {
	// Key is the lease record's key (Lease.Key).
	Key string
	// NowUS overrides the store's clock when > 0, as Batch.NowUS does.
	NowUS int64
}

// LeaseState is where a renewed lease stands.
type LeaseState struct {
	NowUS int64
	// ExpiresAtUS is when the lease's first slot is freed unless renewed
	// again: the renewal plus the shortest lease TTL of its rules.
	ExpiresAtUS int64
}

// Errors of leases.
var (
	// ErrBadLease: a batch that would take a lease has none.
	ErrBadLease = errors.New("limiter: a check with a concurrency rule needs a lease")
	// ErrLeaseNotFound: no such lease, or it was released, or it expired
	// (its slots may already be someone else's).
	ErrLeaseNotFound = errors.New("limiter: no such lease (released, or expired)")
)

// Leaser is a Store whose concurrency rules' leases can be renewed and
// released. Each call is one atomic step on the lease's record and every
// rule state it holds.
type Leaser interface {
	// Renew moves every slot of the lease to expire its rule's lease TTL
	// from now. A lease already expired (at its earliest expiry) or
	// released is ErrLeaseNotFound: its slots may have been taken since.
	Renew(ctx context.Context, ref LeaseRef) (LeaseState, error)
	// Release frees the lease's slots. released is false when none was
	// still held (released before, or expired); that is no error.
	Release(ctx context.Context, ref LeaseRef) (released bool, err error)
}

// TakesLease reports whether b, once admitted, takes a lease: it is not a
// dry run, costs something and has a concurrency rule.
func (b Batch) TakesLease() bool {
	if b.DryRun || b.Cost == 0 {
		return false
	}
	for i := range b.Requests {
		if b.Requests[i].Params.Algorithm == Concurrency {
			return true
		}
	}
	return false
}

// LeaseTTL returns the shortest lease TTL (µs) of reqs' concurrency rules:
// how long a lease they take lasts unrenewed; 0 when there is none.
func LeaseTTL(reqs []Request) int64 {
	var ttl int64
	for i := range reqs {
		if p := reqs[i].Params; p.Algorithm == Concurrency && (ttl == 0 || p.PeriodUS < ttl) {
			ttl = p.PeriodUS
		}
	}
	return ttl
}

// evalConcurrency decides a concurrency rule on its leases' expiries by
// lease (nil when none): a check that costs something needs one slot,
// free while fewer than Limit leases are live (expiry after now); cost 0
// peeks.
func evalConcurrency(p Params, leases map[string]int64, now, cost int64) decision {
	var live []int64
	for _, exp := range leases {
		if exp > now {
			live = append(live, exp)
		}
	}
	n := int64(len(live))
	var last int64
	for _, exp := range live {
		last = max(last, exp)
	}
	res := Result{Remaining: max(0, p.Limit-n)}
	if n > 0 {
		res.ResetAfterUS = last - now
	}
	switch {
	case cost == 0:
		res.Allowed = true
	case n+1 > p.Limit:
		// The (n − limit + 1)-th lease to expire frees the slot.
		slices.Sort(live)
		res.RetryAfterUS = live[n-p.Limit] - now
	default:
		res.Allowed = true
		res.Remaining = p.Limit - n - 1
		res.ResetAfterUS = max(last, now+p.PeriodUS) - now
	}
	return decision{Result: res}
}

// memorySlots is a concurrency rule's state in the memory store: each
// lease's expiry (µs) by its key, never changed in place (a write stores
// a new map), and when the entry expires, after its last lease.
type memorySlots struct {
	leases   map[string]int64
	expireAt int64
}

// liveSlots returns the leases of the concurrency state under key at now,
// nil when there is none; s.mu is held.
func (s *MemoryStore) liveSlots(key string, now int64) map[string]int64 {
	if e, ok := s.slots[key]; ok && now < e.expireAt {
		return e.leases
	}
	return nil
}

// memoryLease is a lease's record in the memory store: the rules' state
// keys it holds a slot of, each with its rule's lease TTL.
type memoryLease struct {
	keys []string
	ttls []int64
}

// takeLease records b's lease, admitted at now with decisions, and takes
// a slot of every concurrency rule that allowed; s.mu is held.
func (s *MemoryStore) takeLease(b Batch, decisions []decision, now int64) bool {
	var l memoryLease
	for i, r := range b.Requests {
		if r.Params.Algorithm != Concurrency || !decisions[i].Allowed {
			continue
		}
		l.keys = append(l.keys, r.Key)
		l.ttls = append(l.ttls, r.Params.PeriodUS)
		s.putSlot(r.Key, b.Lease.Key, now+r.Params.PeriodUS, now)
	}
	if len(l.keys) == 0 {
		return false
	}
	s.leases[b.Lease.Key] = &l
	return true
}

// putSlot sets lease's expiry in the concurrency state under key to
// expireAt (removing it when expireAt is 0), dropping expired leases, as
// the script does when it writes; s.mu is held.
func (s *MemoryStore) putSlot(key, lease string, expireAt, now int64) {
	leases := map[string]int64{}
	for k, exp := range s.liveSlots(key, now) {
		if exp > now {
			leases[k] = exp
		}
	}
	if expireAt > 0 {
		leases[lease] = expireAt
	} else {
		delete(leases, lease)
	}
	var last int64
	for _, exp := range leases {
		last = max(last, exp)
	}
	if last <= now {
		delete(s.slots, key)
		return
	}
	// Like Redis: the TTL is whole milliseconds, rounded up.
	s.slots[key] = memorySlots{leases: leases, expireAt: now + CeilDiv(last-now, 1000)*1000}
}

// leaseExpiries returns the expiry of each slot lease l holds (0 for one
// gone) and the earliest; s.mu is held.
func (s *MemoryStore) leaseExpiries(l *memoryLease, key string, now int64) (exps []int64, first int64) {
	exps = make([]int64, len(l.keys))
	for i, k := range l.keys {
		exps[i] = s.liveSlots(k, now)[key]
		if i == 0 || exps[i] < first {
			first = exps[i]
		}
	}
	return exps, first
}

// Renew moves the lease's slots to expire their rules' lease TTL from
// now, under the store's lock.
func (s *MemoryStore) Renew(_ context.Context, ref LeaseRef) (LeaseState, error) {
	now := s.at(ref.NowUS)
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[ref.Key]
	if !ok {
		return LeaseState{NowUS: now}, ErrLeaseNotFound
	}
	if _, first := s.leaseExpiries(l, ref.Key, now); first <= now {
		return LeaseState{NowUS: now}, ErrLeaseNotFound
	}
	out := LeaseState{NowUS: now}
	for i, k := range l.keys {
		s.putSlot(k, ref.Key, now+l.ttls[i], now)
		if i == 0 || now+l.ttls[i] < out.ExpiresAtUS {
			out.ExpiresAtUS = now + l.ttls[i]
		}
	}
	return out, nil
}

// Release frees the lease's slots under the store's lock.
func (s *MemoryStore) Release(_ context.Context, ref LeaseRef) (bool, error) {
	now := s.at(ref.NowUS)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.releaseLocked(ref.Key, now), nil
}

// releaseLocked frees lease key's slots and forgets it; it reports
// whether a slot was still held. s.mu is held.
func (s *MemoryStore) releaseLocked(key string, now int64) bool {
	l, ok := s.leases[key]
	if !ok {
		return false
	}
	exps, _ := s.leaseExpiries(l, key, now)
	held := false
	for i, k := range l.keys {
		held = held || exps[i] > now
		if exps[i] > 0 {
			s.putSlot(k, key, 0, now)
		}
	}
	delete(s.leases, key)
	return held
}
