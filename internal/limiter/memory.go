package limiter

import (
	"context"
	"sync"
	"time"
)

// MemoryStore keeps limiter state in this process: for single-node mode,
// tests, and as the reference the Redis script is checked against. One
// mutex makes each batch atomic.
type MemoryStore struct {
	mu        sync.Mutex
	entries   map[string]*memoryEntry
	now       func() int64
	lastSweep int64
}

type memoryEntry struct {
	st       state
	expireAt int64 // µs; 0 = never
}

// NewMemoryStore returns an empty store whose clock is now (µs since the
// epoch); nil means the wall clock.
func NewMemoryStore(now func() int64) *MemoryStore {
	if now == nil {
		now = func() int64 { return time.Now().UnixMicro() }
	}
	return &MemoryStore{entries: map[string]*memoryEntry{}, now: now}
}

// Check decides the batch under the store's lock. It returns
// ErrEmptyBatch or ErrNegativeCost for such batches.
func (s *MemoryStore) Check(_ context.Context, b Batch) (Outcome, error) {
	if err := b.Validate(); err != nil {
		return Outcome{}, err
	}
	now := b.NowUS
	if now <= 0 {
		now = s.now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	out := Outcome{NowUS: now, Admitted: true, Results: make([]Result, len(b.Requests))}
	var stack [4]decision
	decisions := stack[:0]
	if len(b.Requests) > len(stack) {
		decisions = make([]decision, 0, len(b.Requests))
	}
	decisions = decisions[:len(b.Requests)]
	for i, r := range b.Requests {
		var st *state
		if e, ok := s.entries[r.Key]; ok && (e.expireAt == 0 || now < e.expireAt) {
			st = &e.st
		}
		d := evaluate(r.Params, st, now, b.Cost)
		decisions[i] = d
		out.Results[i] = d.Result
		if !d.Allowed && !r.Shadow {
			out.Admitted = false
		}
	}
	if !out.Admitted && b.ReportState {
		out.States = make([]RuleState, len(b.Requests))
		for i, r := range b.Requests {
			var st *state
			if e, ok := s.entries[r.Key]; ok && (e.expireAt == 0 || now < e.expireAt) {
				st = &e.st
			}
			out.States[i] = observe(r.Params, st, now)
		}
	}
	if !out.Admitted || b.DryRun {
		return out, nil
	}
	for i, d := range decisions {
		if d.Allowed && d.next != nil {
			e := s.entries[b.Requests[i].Key]
			if e == nil {
				e = &memoryEntry{}
				s.entries[b.Requests[i].Key] = e
			}
			*e = memoryEntry{st: *d.next}
			if d.ttl > 0 {
				// Like Redis: the TTL is whole milliseconds, rounded up.
				e.expireAt = now + CeilDiv(d.ttl, 1000)*1000
			}
		}
	}
	return out, nil
}

// sweep drops expired entries at most once a second.
func (s *MemoryStore) sweep(now int64) {
	if now-s.lastSweep < SecondUS {
		return
	}
	s.lastSweep = now
	for k, e := range s.entries {
		if e.expireAt != 0 && now >= e.expireAt {
			delete(s.entries, k)
		}
	}
}

// CheckTimeout makes the store a SelfTimed one: a check never waits but
// for the store's lock.
func (s *MemoryStore) CheckTimeout() (time.Duration, bool) { return 0, true }

// Len returns the number of live state entries (for tests and metrics).
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}
