package snapshot

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/backoff"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/tenants"
)

// Holder keeps the current snapshot and swaps in new ones. Keys found in
// the source after the snapshot was loaded are remembered beside it until
// the next full load, and so are keys looked up and not found (a bounded
// number of them, for a while). It is safe for concurrent use.
type Holder struct {
	current atomic.Pointer[Snapshot]
	source  Source
	log     *slog.Logger
	now     func() time.Time

	mu sync.Mutex
	// lookedUp are the keys looked up in the source since the last full
	// load: found (with their key) or not found (with when).
	lookedUp map[tenants.KeyHash]lookup
	misses   int // entries of lookedUp not found
	// lookupsPausedUntil: after a failed lookup, none until then.
	lookupsPausedUntil time.Time

	// missLimiter bounds how many unknown well-formed keys per second may
	// be looked up in Postgres, so random keys cannot load it.
	missLimiter *limiter.MemoryStore

	// postgres follows the LISTEN connection: while it is down, Postgres
	// is known to be down and unknown keys are not looked up.
	postgres *backoff.Monitor
	// sleep waits between reconnections (backoff.Sleep; tests replace it).
	sleep func(ctx context.Context, d time.Duration) error
	// monthJitter is how long after a UTC month begins this process
	// reloads (below maxMonthJitter, drawn once), so that api processes
	// do not all load at the same instant.
	monthJitter time.Duration

	reloads      atomic.Int64
	reloadErrors atomic.Int64
	lookups      lookupCounts
	// fullReloads and partialReloads split reloads (changes.go).
	fullReloads, partialReloads atomic.Int64
}

// lookup is what a lookup in the source found: key, or nothing at
// missedAt.
type lookup struct {
	key      *Key
	missedAt time.Time
}

// lookupCounts counts what became of keys not in the snapshot.
type lookupCounts struct {
	found, notFound, failed atomic.Int64
	// cachedMiss: not found lately, not looked up again; skipped:
	// Postgres known down; limited: over the lookups-per-second bound.
	cachedMiss, skipped, limited atomic.Int64
}

// Bounds of the lookups of keys not in the snapshot.
const (
	// missLookupTimeout bounds one Postgres lookup: a hung Postgres must
	// not hang checks with unknown keys.
	missLookupTimeout = 100 * time.Millisecond
	// missTTL is how long a key not found is answered as unknown without
	// another lookup. Reloads forget every miss sooner: a key issued since
	// is in the new snapshot.
	missTTL = 10 * time.Second
	// maxMisses bounds the keys remembered as not found; past it they are
	// all forgotten (random keys are bounded by the lookup rate anyway).
	maxMisses = 10_000
	// lookupPause is how long lookups stop after one failed (not "not
	// found": failed), while Postgres is unreachable but the LISTEN
	// connection has not noticed yet.
	lookupPause = time.Second
	// lookupsPerSecond bounds the lookups of keys not in the snapshot, per
	// process.
	lookupsPerSecond = 50
)

// NewHolder returns a Holder that loads from source. Its snapshot is nil
// until the first Reload (or Sync's first load).
func NewHolder(source Source, log *slog.Logger) *Holder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Holder{source: source, log: log, now: time.Now,
		lookedUp:    map[tenants.KeyHash]lookup{},
		missLimiter: limiter.NewMemoryStore(nil),
		postgres: backoff.NewMonitor(backoff.MonitorConfig{Component: "snapshot_listener", Dependency: "postgres",
			Log: log}),
		sleep: backoff.Sleep, monthJitter: rand.N(maxMonthJitter)}
}

// maxMonthJitter bounds Holder.monthJitter. Until a process reloads, the
// new month's checks run with the last month's spend cap units, which
// differ only for a plan in force for part of that month (its prorated
// included units were fewer: the cap binds early).
const maxMonthJitter = 10 * time.Second

// Current returns the current snapshot, or nil before the first load.
func (h *Holder) Current() *Snapshot { return h.current.Load() }

// Reload reads a fresh snapshot and swaps it in.
func (h *Holder) Reload(ctx context.Context) error {
	started := h.now()
	s, err := h.load(ctx, started)
	if err != nil {
		h.reloadErrors.Add(1)
		return fmt.Errorf("snapshot: reload: %w", err)
	}
	h.mu.Lock()
	h.current.Store(s)
	clear(h.lookedUp)
	h.misses = 0
	h.mu.Unlock()
	h.reloads.Add(1)
	h.fullReloads.Add(1)
	return nil
}

// load reads everything, the keys streamed one by one.
func (h *Holder) load(ctx context.Context, started time.Time) (*Snapshot, error) {
	size := 0
	if cur := h.Current(); cur != nil {
		size = len(cur.keys) + len(cur.changed)
	}
	var s *Snapshot
	err := h.source.LoadSnapshotStream(ctx, func(d Data) {
		s = withMeta(d, started)
		s.keys = make(map[tenants.KeyHash]*Key, size)
	}, func(k tenants.SnapshotKey) error {
		s.addKey(k)
		return nil
	})
	return s, err
}

// FindKey returns the key with hash and its tenant: from s, or else from
// the source — unless the key was not found there lately, or Postgres is
// known to be down, or more than 50 lookups a second were asked for in
// this process. It returns nil, nil for a key unknown (or removed); a key
// and nil for a key whose tenant is gone.
func (h *Holder) FindKey(ctx context.Context, s *Snapshot, hash tenants.KeyHash) (*Key, *Tenant) {
	if k, known := s.key(hash); known {
		if k == nil {
			return nil, nil
		}
		return k, s.tenantOf(k)
	}
	k := h.lookUp(ctx, hash)
	if k == nil {
		return nil, nil
	}
	// Looked up after s was taken: its tenant is in the newest snapshot.
	return k, h.Current().tenantOf(k)
}

// lookUp finds a key that is not in the snapshot: among the keys looked up
// since the last full load, else in the source, within the bounds above.
func (h *Holder) lookUp(ctx context.Context, hash tenants.KeyHash) *Key {
	now := h.now()
	h.mu.Lock()
	l, seen := h.lookedUp[hash]
	paused := now.Before(h.lookupsPausedUntil)
	h.mu.Unlock()
	switch {
	case seen && l.key != nil:
		return l.key
	case seen && now.Sub(l.missedAt) < missTTL:
		h.lookups.cachedMiss.Add(1)
		return nil
	case paused || h.postgres.Down():
		h.lookups.skipped.Add(1)
		return nil
	}
	out, err := h.missLimiter.Check(ctx, limiter.Batch{Cost: 1, Requests: []limiter.Request{{
		Key: "miss", Params: limiter.Params{Algorithm: limiter.GCRA, Limit: lookupsPerSecond,
			PeriodUS: limiter.SecondUS, Burst: lookupsPerSecond},
	}}})
	if err != nil || !out.Admitted {
		h.lookups.limited.Add(1)
		return nil
	}
	lookupCtx, cancel := context.WithTimeout(ctx, missLookupTimeout)
	found, err := h.source.FindKey(lookupCtx, hash)
	cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		switch {
		case tollgate.ErrorCode(err) == tollgate.ENOTFOUND:
			h.lookups.notFound.Add(1)
			h.rememberMiss(hash, now)
		case ctx.Err() == nil: // not the caller going away: Postgres failing
			h.lookups.failed.Add(1)
			h.lookupsPausedUntil = h.now().Add(lookupPause)
		}
		return nil
	}
	h.lookups.found.Add(1)
	k := h.current.Load().newKey(snapshotKey(found))
	// A reload may have landed meanwhile: remember the key only if the
	// newest snapshot does not know it.
	if _, known := h.current.Load().key(hash); !known {
		if l, was := h.lookedUp[hash]; was && l.key == nil {
			h.misses--
		}
		h.lookedUp[hash] = lookup{key: k}
	}
	return k
}

// rememberMiss notes that hash was not found at now; h.mu must be held.
// Past maxMisses, every miss is forgotten (keys found are kept).
func (h *Holder) rememberMiss(hash tenants.KeyHash, now time.Time) {
	if h.misses >= maxMisses {
		for hash, l := range h.lookedUp {
			if l.key == nil {
				delete(h.lookedUp, hash)
			}
		}
		h.misses = 0
	}
	if _, was := h.lookedUp[hash]; !was {
		h.misses++
	}
	h.lookedUp[hash] = lookup{missedAt: now}
}
