package limiter

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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
}

// Store decides batches atomically. Implementations are safe for
// concurrent use.
type Store interface {
	Check(ctx context.Context, b Batch) (Outcome, error)
}

func flags(r Request) int {
	f := 0
	if r.Shadow {
		f |= 1
	}
	if r.Params.Shape {
		f |= 2
	}
	switch r.Params.Calendar {
	case CalendarDay:
		f |= 4
	case CalendarMonth:
		f |= 8
	}
	if r.Params.AnchorFirstRequest {
		f |= 16
	}
	return f
}

//go:embed check.lua
var checkLua string

// checkScript is loaded once per Redis server; go-redis falls back from
// EVALSHA to EVAL on NOSCRIPT (after SCRIPT FLUSH or a restart).
var checkScript = redis.NewScript(checkLua)

// RedisStore keeps limiter state in Redis (single server or Cluster).
type RedisStore struct {
	client redis.Scripter
	// ExtraTTL is added to every key's time to live. Tests that inject a
	// clock running slower than Redis's set it so that keys do not expire
	// in real time before they would in the test's time; production
	// leaves it 0.
	ExtraTTL time.Duration
}

// NewRedisStore returns a store on client (a *redis.Client,
// *redis.ClusterClient or anything else that runs scripts).
func NewRedisStore(client redis.Scripter) *RedisStore {
	return &RedisStore{client: client}
}

// ErrEmptyBatch is returned for a batch without requests.
var ErrEmptyBatch = errors.New("limiter: empty batch")

// ErrNegativeCost is returned for a batch whose cost is below zero: it
// would hand units back instead of consuming them.
var ErrNegativeCost = errors.New("limiter: negative cost")

func validateBatch(b Batch) error {
	switch {
	case len(b.Requests) == 0:
		return ErrEmptyBatch
	case b.Cost < 0:
		return ErrNegativeCost
	}
	return nil
}

// Check runs the batch in one script call: one round trip. It returns
// ErrEmptyBatch or ErrNegativeCost for such batches.
func (s *RedisStore) Check(ctx context.Context, b Batch) (Outcome, error) {
	if err := validateBatch(b); err != nil {
		return Outcome{}, err
	}
	keys := make([]string, len(b.Requests))
	args := make([]any, 0, 4+6*len(b.Requests))
	dry := 0
	if b.DryRun {
		dry = 1
	}
	args = append(args, b.NowUS, b.Cost, dry, s.ExtraTTL.Milliseconds())
	for i, r := range b.Requests {
		keys[i] = r.Key
		args = append(args, r.Params.Algorithm.code(), r.Params.Limit, r.Params.PeriodUS,
			r.Params.EffectiveBurst(), flags(r), 0)
	}
	raw, err := checkScript.Run(ctx, s.client, keys, args...).Int64Slice()
	if err != nil {
		return Outcome{}, fmt.Errorf("limiter: redis check: %w", err)
	}
	return decodeOutcome(raw, len(b.Requests))
}

func decodeOutcome(raw []int64, n int) (Outcome, error) {
	if len(raw) != 2+5*n {
		return Outcome{}, fmt.Errorf("limiter: redis check: %d values for %d rules", len(raw), n)
	}
	out := Outcome{NowUS: raw[0], Admitted: raw[1] == 1, Results: make([]Result, n)}
	for i := range n {
		v := raw[2+5*i:]
		out.Results[i] = Result{Allowed: v[0] == 1, Remaining: v[1], ResetAfterUS: v[2], RetryAfterUS: v[3], DelayUS: v[4]}
	}
	return out, nil
}

// LoadScript loads the check script into every server the client knows, so
// that the first checks do not pay for EVAL.
func LoadScript(ctx context.Context, client redis.Scripter) error {
	if err := checkScript.Load(ctx, client).Err(); err != nil {
		return fmt.Errorf("limiter: load script: %w", err)
	}
	return nil
}

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
	if err := validateBatch(b); err != nil {
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
	decisions := make([]decision, len(b.Requests))
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
	if !out.Admitted || b.DryRun {
		return out, nil
	}
	for i, d := range decisions {
		if d.Allowed && d.next != nil {
			e := &memoryEntry{st: *d.next}
			if d.ttl > 0 {
				// Like Redis: the TTL is whole milliseconds, rounded up.
				e.expireAt = now + ceilDiv(d.ttl, 1000)*1000
			}
			s.entries[b.Requests[i].Key] = e
		}
	}
	return out, nil
}

// sweep drops expired entries at most once a second.
func (s *MemoryStore) sweep(now int64) {
	if now-s.lastSweep < Second {
		return
	}
	s.lastSweep = now
	for k, e := range s.entries {
		if e.expireAt != 0 && now >= e.expireAt {
			delete(s.entries, k)
		}
	}
}

// Len returns the number of live state entries (for tests and metrics).
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}
