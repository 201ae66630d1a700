package limiter

import (
	"context"
	"slices"
	"sync"
	"time"
)

// MemoryStore keeps limiter state in this process: for single-node mode,
// tests, and as the reference the Redis script is checked against. One
// mutex makes each batch atomic.
type MemoryStore struct {
	mu        sync.Mutex
	entries   map[string]*memoryEntry
	holds     map[string]*memoryHold
	leases    map[string]*memoryLease
	slots     map[string]memorySlots
	now       func() int64
	lastSweep int64
	// credits holds the consumption counters and logs of prepaid
	// balances (Batch.Credits), by key.
	credits map[string]*memoryCredits
	// readNow is the clock ReadCredits reports (nil: now); the
	// conformance suite, whose clock refuses to be read, sets it.
	readNow func() int64
	// lostSeeds is true once the store was flushed (Flush): from then on
	// only the seed markers in seeds are present (seed.go). A new store
	// holds every marker: its process has lost nothing it knew of.
	lostSeeds bool
	seeds     map[string]bool
}

// memoryCredits is one balance's counter (Credits.Key) or log
// (Credits.Log), as the Redis script keeps them: a number and a stream.
type memoryCredits struct {
	consumed int64
	log      []CreditEntry
	last     string // the last log entry's ID, kept when the log is trimmed
}

// memoryHold is a hold's record, as the Redis script keeps it in a hash.
type memoryHold struct {
	id                            string
	openedAt                      int64 // µs, the time of the check that opened it
	estimate, expireAt, keepUntil int64 // µs
	chargeOnExpiry                bool
	lease                         string // the lease the check took, released at settlement
	status                        HoldStatus
	cost                          int64
	rules                         []heldRule
	// credits is the balance the hold drew on (nil for none); drawn and
	// overage what it took from it and past it.
	credits        *Credits
	drawn, overage int64
}

// heldRule is one rule a hold consumed from.
type heldRule struct {
	key    string
	params Params
	mark   int64
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
	return &MemoryStore{entries: map[string]*memoryEntry{}, holds: map[string]*memoryHold{}, leases: map[string]*memoryLease{},
		slots: map[string]memorySlots{}, now: now, credits: map[string]*memoryCredits{}}
}

// Check decides the batch under the store's lock. It returns
// ErrEmptyBatch or ErrNegativeCost for such batches.
func (s *MemoryStore) Check(_ context.Context, b Batch) (Outcome, error) {
	if err := b.Validate(); err != nil {
		return Outcome{}, err
	}
	now := s.at(b.NowUS)
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
		var d decision
		if r.Params.Algorithm == Concurrency {
			d = evalConcurrency(r.Params, s.liveSlots(r.Key, now), now, b.Cost)
		} else {
			d = evaluate(r.Params, s.live(r.Key, now), now, b.Cost)
		}
		if s.unknownTally(r.Params, r.Key) {
			// Its state may be lost: decided by nothing, written nowhere.
			d = decision{Result: Result{Unknown: true}}
			if r.Params.Seed == SeedClosed && !r.Shadow && b.Cost > 0 && !b.DryRun {
				out.Admitted = false
			}
		} else if !d.Allowed && !r.Shadow {
			out.Admitted = false
		}
		decisions[i] = d
		out.Results[i] = d.Result
	}
	if b.Credits != nil {
		consumed, present := s.consumed(b.Credits)
		out.Credits = decideCredits(b.Credits, consumed, present, b.Cost, b.DryRun, b.Hold != nil, now)
		if !out.Credits.Allowed {
			out.Admitted = false
		}
	}
	if !out.Admitted && b.ReportState {
		out.States = make([]RuleState, len(b.Requests))
		for i, r := range b.Requests {
			out.States[i] = observe(r.Params, s.live(r.Key, now), now)
		}
	}
	if !out.Admitted || b.DryRun {
		out.Credits.Drawn, out.Credits.Overage = 0, 0
		return out, nil
	}
	leased := b.TakesLease() && s.takeLease(b, decisions, now)
	if b.Hold != nil {
		s.openHold(b, decisions, now, out.Credits)
		if leased {
			s.holds[b.Hold.Key].lease = b.Lease.Key
		}
	}
	if c := b.Credits; c != nil {
		m := creditMove{units: out.Credits.Drawn, overage: out.Credits.Overage}
		if out.Credits.Unknown && b.Cost > 0 {
			m = creditMove{units: b.Cost, deferred: DeferredOverage}
		}
		s.draw(c, m, now, holdID(b.Hold), 0, 0)
		out.Credits.Balance -= out.Credits.Drawn
	}
	for i, d := range decisions {
		if d.Allowed && d.next != nil {
			s.put(b.Requests[i].Key, d.next, d.ttl, now)
		}
	}
	return out, nil
}

// at returns nowUS, or the store's clock when nowUS is not > 0.
func (s *MemoryStore) at(nowUS int64) int64 {
	if nowUS > 0 {
		return nowUS
	}
	return s.now()
}

// put stores st under key with a time to live of ttl µs (0: forever; -1:
// the entry's current one).
func (s *MemoryStore) put(key string, st *state, ttl, now int64) {
	e := s.entries[key]
	if e == nil {
		e = &memoryEntry{}
		s.entries[key] = e
	}
	expireAt := e.expireAt
	switch {
	case ttl == 0:
		expireAt = 0
	case ttl > 0:
		// Like Redis: the TTL is whole milliseconds, rounded up.
		expireAt = now + CeilDiv(ttl, 1000)*1000
	}
	*e = memoryEntry{st: *st, expireAt: expireAt}
}

// live returns key's state at now, nil when absent or expired.
func (s *MemoryStore) live(key string, now int64) *state {
	if e, ok := s.entries[key]; ok && (e.expireAt == 0 || now < e.expireAt) {
		return &e.st
	}
	return nil
}

// openHold records b's hold, admitted at now with decisions; s.mu is
// held and the states are not yet written.
func (s *MemoryStore) openHold(b Batch, decisions []decision, now int64, cr CreditResult) {
	h := &memoryHold{
		credits:        savedCredits(b.Credits),
		drawn:          cr.Drawn,
		overage:        cr.Overage,
		id:             b.Hold.ID,
		estimate:       b.Cost,
		openedAt:       now,
		expireAt:       now + b.Hold.TTLUS,
		keepUntil:      now + b.Hold.TTLUS + HoldRetentionUS,
		chargeOnExpiry: b.Hold.ChargeOnExpiry,
	}
	for i, r := range b.Requests {
		// A key two rules share (a spend cap and the quota's tally) is
		// held once: settling moves each state once.
		if decisions[i].Allowed && !slices.ContainsFunc(h.rules, func(hr heldRule) bool { return hr.key == r.Key }) {
			mark := holdMark(r.Params, s.live(r.Key, now), now, decisions[i])
			h.rules = append(h.rules, heldRule{key: r.Key, params: r.Params, mark: mark})
		}
	}
	s.holds[b.Hold.Key] = h
}

// savedCredits returns a copy of c for a hold's record, as the Redis
// script keeps the terms in the hold's hash: the caller may reuse c.
func savedCredits(c *Credits) *Credits {
	if c == nil {
		return nil
	}
	saved := *c
	saved.Expiring = slices.Clone(c.Expiring)
	return &saved
}

// Settle sets a hold's actual cost, or expires it, under the store's
// lock. See Settle and Settler for its errors.
func (s *MemoryStore) Settle(_ context.Context, req Settle) (Settlement, error) {
	if err := req.Validate(); err != nil {
		return Settlement{}, err
	}
	now := s.at(req.NowUS)
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.holds[req.Key]
	if !ok || now >= h.keepUntil {
		return Settlement{}, ErrHoldNotFound
	}
	out := Settlement{NowUS: now, OpenedUS: h.openedAt, Estimate: h.estimate, Cost: h.cost, Status: h.status}
	cost, status, err := settleTarget(h.status, h.estimate, h.cost, h.expireAt, h.chargeOnExpiry, req, now)
	if err != nil || status == h.status {
		out.Repeated = err == nil
		return out, err
	}
	for _, r := range h.rules {
		next, ttl, changed := settleRule(r.params, s.live(r.key, now), r.mark, now, cost-h.estimate)
		switch {
		case !changed:
		case next == nil:
			delete(s.entries, r.key)
		default:
			s.put(r.key, next, ttl, now)
		}
	}
	if c := h.credits; c != nil && cost != h.estimate {
		terms := c
		if req.Credits != nil && req.Credits.Key == c.Key {
			terms = req.Credits
		}
		consumed, present := s.consumed(c)
		m := settleCredits(terms.LineAt(now), terms.Overdraft, terms.Overage, consumed, present, h.drawn, h.overage, cost-h.estimate)
		before := h.overage
		h.drawn, h.overage = h.drawn+m.units, h.overage+m.overage
		s.draw(c, m, now, h.id, h.openedAt, before)
	}
	if status == HoldSettled && h.lease != "" {
		s.releaseLocked(h.lease, now)
	}
	h.status, h.cost = status, cost
	out.Cost, out.Status = cost, status
	return out, nil
}

// consumed returns the counter of c's balance; present is false when it
// is missing. s.mu is held.
func (s *MemoryStore) consumed(c *Credits) (consumed int64, present bool) {
	if m, ok := s.credits[c.Key]; ok {
		return m.consumed, true
	}
	return 0, false
}

// draw adds m's units to c's counter when it exists and m is not
// deferred and, when anything moved, logs m at now for the hold holdID
// (a settlement's entry with openedUS, its hold's opening, and when it
// gives overage back holdOverage, the hold's overage before; else 0).
// s.mu is held.
func (s *MemoryStore) draw(c *Credits, m creditMove, now int64, holdID string, openedUS, holdOverage int64) {
	counter := s.credits[c.Key]
	if counter != nil && m.deferred == NotDeferred {
		counter.consumed += m.units
	}
	if m.units != 0 || m.overage != 0 || m.unpaid != 0 {
		log := s.credits[c.Log]
		if log == nil {
			log = &memoryCredits{}
			s.credits[c.Log] = log
		}
		log.last = nextEntryID(log.last, now)
		e := CreditEntry{ID: log.last, Units: m.units, Overage: m.overage, Unpaid: m.unpaid,
			Deferred: m.deferred, AtUS: now, OpenedUS: openedUS, HoldID: holdID}
		if m.overage < 0 {
			e.HoldOverage = holdOverage
		}
		log.log = append(log.log, e)
	}
}

func holdID(h *Hold) string {
	if h == nil {
		return ""
	}
	return h.ID
}

// ReadCredits returns the counter at key and up to max entries of the log
// at log after the entry after ("" or "0-0": from the start), with the
// store's clock, read together, as the Redis store's ReadCredits does.
func (s *MemoryStore) ReadCredits(_ context.Context, key, log, after string, max int) (CreditRead, error) {
	now := s.now
	if s.readNow != nil {
		now = s.readNow
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := CreditRead{NowUS: now()}
	if c, ok := s.credits[key]; ok {
		r.Consumed, r.Present = c.consumed, true
	}
	if l := s.credits[log]; l != nil {
		for _, e := range l.log {
			if len(r.Entries) == max {
				break
			}
			if EntryAfter(e.ID, after) {
				r.Entries = append(r.Entries, e)
			}
		}
	}
	return r, nil
}

// TrimCredits drops the entries of the log at log up to and including
// through.
func (s *MemoryStore) TrimCredits(_ context.Context, log, through string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.credits[log]; l != nil {
		keep := l.log[:0]
		for _, e := range l.log {
			if EntryAfter(e.ID, through) {
				keep = append(keep, e)
			}
		}
		l.log = keep
	}
	return nil
}

// AdjustCredits adds delta to the counter at key when it exists.
func (s *MemoryStore) AdjustCredits(_ context.Context, key string, delta int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.credits[key]; ok {
		c.consumed += delta
	}
	return nil
}

// ReclaimCredits takes back up to want units of what the counter at key
// leaves below zero, as the Redis store's ReclaimCredits does.
func (s *MemoryStore) ReclaimCredits(_ context.Context, key string, want int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.credits[key]
	if !ok || c.consumed >= 0 || want <= 0 {
		return 0, nil
	}
	taken := min(want, -c.consumed)
	c.consumed += taken
	return taken, nil
}

// RebuildCredits sets the missing counter at key to consumed when the log
// at log holds no entry after the entry after, as the Redis store's
// RebuildCredits does.
func (s *MemoryStore) RebuildCredits(_ context.Context, key, log, after string, consumed int64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.credits[key]; ok {
		return false, nil
	}
	if l := s.credits[log]; l != nil {
		for _, e := range l.log {
			if EntryAfter(e.ID, after) {
				return false, nil
			}
		}
	}
	s.credits[key] = &memoryCredits{consumed: consumed}
	return true, nil
}

// FlushCredits forgets every counter and log, as a Redis server restarted
// without persistence does.
func (s *MemoryStore) FlushCredits() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.credits)
}

// ExpireDue expires up to max open holds past their expiry at the store's
// clock.
func (s *MemoryStore) ExpireDue(ctx context.Context, max int) ([]Expired, error) {
	now := s.now()
	s.mu.Lock()
	var due []string
	for k, h := range s.holds {
		if h.status == HoldOpen && now >= h.expireAt && len(due) < max {
			due = append(due, k)
		}
	}
	s.mu.Unlock()
	var out []Expired
	for _, k := range due {
		st, err := s.Settle(ctx, Settle{Key: k, Expire: true, NowUS: now})
		if err != nil || st.Repeated {
			continue
		}
		s.mu.Lock()
		id := s.holds[k].id
		s.mu.Unlock()
		out = append(out, Expired{ID: id, Settlement: st})
	}
	return out, nil
}

// settleTarget returns the cost and status a hold (status, estimate, cost
// so far, expiry) moves to for req at now, the current ones when the
// request repeats an earlier settlement, or the error refusing it.
func settleTarget(status HoldStatus, estimate, cost, expireAt int64, chargeOnExpiry bool, req Settle, now int64) (int64, HoldStatus, error) {
	switch {
	case status == HoldOpen && now >= expireAt && chargeOnExpiry:
		if !req.Expire {
			return 0, 0, ErrHoldConflict
		}
		return estimate, HoldCharged, nil
	case status == HoldOpen && now >= expireAt:
		if !req.Expire {
			return 0, 0, ErrHoldConflict
		}
		return 0, HoldRefunded, nil
	case status == HoldOpen && req.Expire:
		return 0, 0, ErrHoldNotDue
	case status == HoldOpen:
		return req.Cost, HoldSettled, nil
	case req.Expire || status == HoldSettled && req.Cost == cost:
		return cost, status, nil
	}
	return 0, 0, ErrHoldConflict
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
	for k, h := range s.holds {
		if now >= h.keepUntil {
			delete(s.holds, k)
		}
	}
	for k, e := range s.slots {
		if now >= e.expireAt {
			delete(s.slots, k)
		}
	}
	for k, l := range s.leases {
		if exps, _ := s.leaseExpiries(l, k, now); slices.Max(exps) <= now {
			delete(s.leases, k)
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
