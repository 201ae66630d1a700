// Package enforce answers the hot-path question — may this caller make
// this request now? — from an in-memory snapshot of plans, tenants and keys
// and one limiter-store call per check.
package enforce

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/backoff"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
)

// compiledRule is a plan rule ready for checks.
type compiledRule struct {
	plans.Rule
	params limiter.Params
	// stateID names the rule's state in its keys (statekeys.go): from the
	// plan, rule name and algorithm (a new algorithm under the same name
	// starts from fresh state).
	stateID [3]byte
	windowS int64
	// policy is the rule's RateLimit-Policy header value, quoted its name
	// as a structured-field string.
	policy, quoted string
}

type planView struct {
	id    int64
	name  string
	rules []compiledRule
}

type tenantView struct {
	id     string
	name   string
	status string
	plan   *planView
	// tag and short are the tenant's part of its state keys.
	tag   byte
	short shortID
}

type keyView struct {
	id     string
	tenant *tenantRef
	// expiresAtUS and revokedAtUS are µs since the epoch, 0 for none.
	expiresAtUS, revokedAtUS int64
	short                    shortID // the key's part of its state keys
}

// Snapshot is an immutable view of everything a check needs (but for
// tenants, which partial reloads swap in place: see tenantRef).
type Snapshot struct {
	// keys were read by the last full load; changed holds the keys
	// changed since (nil for a key removed), see snapshotdelta.go.
	keys        map[tenants.KeyHash]*keyView
	changed     map[tenants.KeyHash]*keyView
	tenants     map[[16]byte]*tenantRef // by tenantKey of the tenant ID
	anonymous   *planView
	signingKeys map[string]ed25519.PublicKey
	tokens      map[string]auth.ServiceToken
	loadedAt    time.Time
}

// Data is what a snapshot is built from.
type Data struct {
	Plans   []plans.Plan
	Tenants []tenants.Tenant
	// Overrides are tenants' own rules by tenant ID: each replaces the plan
	// rule of the same name or adds to the plan's rules (plans.MergeRules).
	Overrides     map[string][]plans.Rule
	Keys          []tenants.Key
	SigningKeys   map[string]ed25519.PublicKey
	ServiceTokens []auth.ServiceToken
}

// compilePlan compiles p's rules. A tenant's own view of its plan (with
// overrides) passes the plan's view as base, so that its rules keep the
// plan's state IDs by name and algorithm.
func compilePlan(p plans.Plan, base *planView) *planView {
	v := &planView{id: p.ID, name: p.Name}
	rules := p.Rules
	if quota, ok := p.QuotaRule(); ok { // a monthly quota is one more rule
		rules = append(rules[:len(rules):len(rules)], quota)
	}
	taken := map[[3]byte]bool{}
	for _, r := range rules {
		params := r.Params()
		window := params.PeriodUS
		switch params.Calendar {
		case limiter.CalendarDay:
			window = limiter.DayUS
		case limiter.CalendarMonth:
			window = 30 * limiter.DayUS
		}
		id, found := [3]byte{}, false
		if base != nil {
			for _, b := range base.rules {
				if b.Name == r.Name && b.Algorithm == r.Algorithm {
					id, found = b.stateID, true
				}
			}
		}
		for salt := 0; !found || taken[id]; salt++ {
			id, found = ruleStateID(p.ID, r.Name, r.Algorithm, salt), true
		}
		taken[id] = true
		windowS := (window + limiter.SecondUS - 1) / limiter.SecondUS
		quoted := strconv.Quote(r.Name)
		v.rules = append(v.rules, compiledRule{
			Rule:    r,
			params:  params,
			stateID: id,
			windowS: windowS,
			quoted:  quoted,
			policy:  quoted + ";q=" + strconv.FormatInt(r.Limit, 10) + ";w=" + strconv.FormatInt(windowS, 10),
		})
	}
	return v
}

// NewSnapshot indexes d.
func NewSnapshot(d Data, now time.Time) *Snapshot {
	s := newMeta(d, nil, now)
	s.keys = make(map[tenants.KeyHash]*keyView, len(d.Keys))
	for _, k := range d.Keys {
		s.addKey(snapshotKey(k))
	}
	return s
}

// addKey indexes k among the snapshot's keys; a key of an unknown tenant
// is left out.
func (s *Snapshot) addKey(k tenants.SnapshotKey) *keyView {
	v := s.newKeyView(k)
	if v != nil {
		s.keys[k.Hash] = v
	}
	return v
}

func (s *Snapshot) newKeyView(k tenants.SnapshotKey) *keyView {
	t := s.tenants[k.TenantUUID]
	if t == nil {
		return nil
	}
	v := &keyView{id: k.ID, tenant: t, expiresAtUS: k.ExpiresAtUS, revokedAtUS: k.RevokedAtUS}
	_, v.short = compactID(k.ID)
	return v
}

func snapshotKey(k tenants.Key) tenants.SnapshotKey {
	sk := tenants.SnapshotKey{ID: k.ID, Hash: k.Hash, TenantUUID: tenantKey(k.TenantID)}
	if k.ExpiresAt != nil {
		sk.ExpiresAtUS = k.ExpiresAt.UnixMicro()
	}
	if k.RevokedAt != nil {
		sk.RevokedAtUS = k.RevokedAt.UnixMicro()
	}
	return sk
}

// LoadedAt is when the snapshot's data was read.
func (s *Snapshot) LoadedAt() time.Time { return s.loadedAt }

// Source reads snapshot data from the source of truth.
type Source interface {
	LoadSnapshot(ctx context.Context) (Data, error)
	// FindKey looks up one key that is not in the snapshot yet.
	FindKey(ctx context.Context, hash tenants.KeyHash) (tenants.Key, error)
}

// StaticSource serves fixed snapshot data and finds no key outside it:
// for tests and benchmarks of the check path without Postgres.
type StaticSource struct{ Data Data }

// LoadSnapshot returns the data.
func (s StaticSource) LoadSnapshot(context.Context) (Data, error) { return s.Data, nil }

// FindKey finds nothing: every key is in the data or unknown.
func (s StaticSource) FindKey(_ context.Context, hash tenants.KeyHash) (tenants.Key, error) {
	return tenants.Key{}, tollgate.Errorf(tollgate.ENOTFOUND, "key not found")
}

// PostgresSource reads snapshot data through the feature stores.
type PostgresSource struct {
	db *pgxpool.Pool
}

// NewPostgresSource returns a Source on db.
func NewPostgresSource(db *pgxpool.Pool) *PostgresSource { return &PostgresSource{db: db} }

// LoadSnapshot reads every plan, tenant, rule override, key and service
// token in one read-only, repeatable-read transaction, so the snapshot is
// consistent: no tenant without its plan, no key without its tenant.
func (p *PostgresSource) LoadSnapshot(ctx context.Context) (Data, error) {
	var d Data
	err := postgres.ReadTx(ctx, p.db, func(tx pgx.Tx) error {
		ps, ts, as := plans.NewStore(tx), tenants.NewStore(tx), auth.NewStore(tx)
		var err error
		if d.Plans, err = ps.List(ctx); err != nil {
			return err
		}
		if d.Tenants, err = ts.List(ctx); err != nil {
			return err
		}
		if d.Overrides, err = ts.AllOverrides(ctx); err != nil {
			return err
		}
		if d.Keys, err = ts.ListKeys(ctx, ""); err != nil {
			return err
		}
		if d.SigningKeys, err = as.PublicKeys(ctx); err != nil {
			return err
		}
		d.ServiceTokens, err = as.ListServiceTokens(ctx)
		return err
	})
	return d, err
}

// FindKey looks up one key by hash.
func (p *PostgresSource) FindKey(ctx context.Context, hash tenants.KeyHash) (tenants.Key, error) {
	return tenants.NewStore(p.db).FindKeyByHash(ctx, hash)
}

// Holder keeps the current snapshot and swaps in new ones. Keys found
// after the snapshot was loaded are kept beside it until the next reload,
// and so are keys looked up and not found (a bounded number of them).
type Holder struct {
	current atomic.Pointer[Snapshot]
	source  Source
	log     *slog.Logger
	now     func() time.Time

	mu     sync.Mutex
	extra  map[tenants.KeyHash]*keyView
	misses map[tenants.KeyHash]time.Time // when the key was not found
	// lookupsPausedUntil: after a failed lookup, none until then.
	lookupsPausedUntil time.Time

	// missLimiter bounds how many unknown well-formed keys per second may
	// be looked up in Postgres, so random keys cannot load it.
	missLimiter *limiter.MemoryStore

	// postgres follows the LISTEN connection: while it is down, Postgres
	// is known to be down and unknown keys are not looked up.
	postgres *backoff.Monitor
	// listenBackoff spaces the reconnections of the LISTEN connection.
	listenBackoff backoff.Policy

	reloads      atomic.Int64
	reloadErrors atomic.Int64
	lookups      lookupCounts
	// fullReloads and partialReloads split reloads (snapshotdelta.go).
	fullReloads, partialReloads atomic.Int64
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
)

// NewHolder returns a Holder that loads from source.
func NewHolder(source Source, log *slog.Logger) *Holder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Holder{source: source, log: log, now: time.Now,
		extra: map[tenants.KeyHash]*keyView{}, misses: map[tenants.KeyHash]time.Time{},
		missLimiter: limiter.NewMemoryStore(nil),
		postgres: backoff.NewMonitor(backoff.MonitorConfig{Component: "snapshot_listener", Dependency: "postgres",
			Log: log}),
		listenBackoff: backoff.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second}}
}

// Current returns the current snapshot, or nil before the first load.
func (h *Holder) Current() *Snapshot { return h.current.Load() }

// Reload reads a fresh snapshot and swaps it in.
func (h *Holder) Reload(ctx context.Context) error {
	started := h.now()
	s, err := h.load(ctx, started)
	if err != nil {
		h.reloadErrors.Add(1)
		return fmt.Errorf("enforce: reload snapshot: %w", err)
	}
	h.mu.Lock()
	h.current.Store(s)
	h.extra = map[tenants.KeyHash]*keyView{}
	clear(h.misses)
	h.mu.Unlock()
	h.reloads.Add(1)
	h.fullReloads.Add(1)
	return nil
}

// load reads everything; keys one by one from a StreamingSource.
func (h *Holder) load(ctx context.Context, started time.Time) (*Snapshot, error) {
	src, ok := h.source.(StreamingSource)
	if !ok {
		d, err := h.source.LoadSnapshot(ctx)
		if err != nil {
			return nil, err
		}
		return NewSnapshot(d, started), nil
	}
	size := 0
	if cur := h.Current(); cur != nil {
		size = len(cur.keys) + len(cur.changed)
	}
	var s *Snapshot
	err := src.LoadSnapshotStream(ctx, func(d Data) {
		s = newMeta(d, nil, started)
		s.keys = make(map[tenants.KeyHash]*keyView, size)
	}, func(k tenants.SnapshotKey) error {
		s.addKey(k)
		return nil
	})
	return s, err
}

// lookupKey finds a key by hash in the snapshot, then among keys found
// since, then in the source — unless it was not found there lately, or
// Postgres is known to be down, or more than 50 lookups a second per
// process were asked for.
func (h *Holder) lookupKey(ctx context.Context, s *Snapshot, hash tenants.KeyHash) *keyView {
	if v, changed := s.changed[hash]; changed {
		return v // nil: removed
	}
	if v := s.keys[hash]; v != nil {
		return v
	}
	now := h.now()
	h.mu.Lock()
	v, seen := h.extra[hash]
	missedAt, missed := h.misses[hash]
	paused := now.Before(h.lookupsPausedUntil)
	h.mu.Unlock()
	switch {
	case seen:
		return v
	case missed && now.Sub(missedAt) < missTTL:
		h.lookups.cachedMiss.Add(1)
		return nil
	case paused || h.postgres.Down():
		h.lookups.skipped.Add(1)
		return nil
	}
	out, err := h.missLimiter.Check(ctx, limiter.Batch{Cost: 1, Requests: []limiter.Request{{
		Key: "miss", Params: limiter.Params{Algorithm: limiter.GCRA, Limit: 50, PeriodUS: limiter.SecondUS, Burst: 50},
	}}})
	if err != nil || !out.Admitted {
		h.lookups.limited.Add(1)
		return nil
	}
	lookupCtx, cancel := context.WithTimeout(ctx, missLookupTimeout)
	k, err := h.source.FindKey(lookupCtx, hash)
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
	// A reload may have landed meanwhile: attach the key to the newest
	// snapshot, and remember it only beside that one.
	cur := h.current.Load()
	v = cur.newKeyView(snapshotKey(k))
	if v == nil {
		return nil
	}
	if cur.key(hash) == nil {
		h.extra[hash] = v
	}
	return v
}

// rememberMiss notes that hash was not found at now; h.mu must be held.
func (h *Holder) rememberMiss(hash tenants.KeyHash, now time.Time) {
	if len(h.misses) >= maxMisses {
		clear(h.misses)
	}
	h.misses[hash] = now
}

// coalesceWindow is how long a reload waits, after the first notification
// of a burst, for more to arrive; never longer, however many keep coming.
const coalesceWindow = 50 * time.Millisecond

// listenAcquireTimeout bounds connecting for LISTEN, so that an
// unreachable (rather than refusing) Postgres is retried too.
const listenAcquireTimeout = 10 * time.Second

// Sync keeps the holder fresh until ctx ends: it LISTENs on
// tollgate_changes and on a notification reloads at once what changed
// (snapshotdelta.go), and reloads everything every interval anyway in
// case a notification was lost.
//
// When the LISTEN connection fails (Postgres stopped, restarted or
// unreachable) Sync connects again after a wait that doubles from 100ms
// to 2s, with jitter, logging the outage once when it starts, every 10s
// while it lasts and once when it ends; as soon as LISTEN is back it
// reloads, so that no change made meanwhile is missed, and changes arrive
// by notification again. Checks go on from the last snapshot throughout.
func (h *Holder) Sync(ctx context.Context, db *pgxpool.Pool, interval time.Duration) {
	retry := backoff.New(h.listenBackoff)
	for {
		err := h.listen(ctx, db, interval, retry.Reset)
		if ctx.Err() != nil {
			return
		}
		h.postgres.Failure(err)
		if retry.Wait(ctx) != nil {
			return
		}
	}
}

// listen holds one LISTEN connection until it fails or ctx ends, and
// returns why. It calls listening once LISTEN is set up and the snapshot
// reloaded.
func (h *Holder) listen(ctx context.Context, db *pgxpool.Pool, interval time.Duration, listening func()) error {
	acquireCtx, cancel := context.WithTimeout(ctx, listenAcquireTimeout)
	conn, err := db.Acquire(acquireCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("enforce: connect for LISTEN: %w", err)
	}
	// The connection is this loop's alone and closed when it ends: a
	// connection that LISTENs must not go back to the pool.
	pg := conn.Hijack()
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		pg.Close(closeCtx) //nolint:errcheck // closing a connection that may be dead
	}()
	if _, err := pg.Exec(ctx, "LISTEN tollgate_changes"); err != nil {
		return fmt.Errorf("enforce: LISTEN: %w", err)
	}
	// Changes made between the last load and LISTEN would be missed.
	if err := h.Reload(ctx); err != nil {
		return err
	}
	h.postgres.Success()
	listening()
	lastReload := h.now()
	for {
		// Wait for a notification, but no longer than until the next
		// periodic reload is due.
		wait, cancel := context.WithTimeout(ctx, max(interval-h.now().Sub(lastReload), time.Millisecond))
		n, err := pg.WaitForNotification(wait)
		timedOut := wait.Err() != nil // read before cancel, which sets it
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && (!timedOut || pg.IsClosed()) {
			return fmt.Errorf("enforce: wait for notification: %w", err) // the connection failed
		}
		var payloads []string // what changed; nil: reload everything
		if err == nil {
			payloads = append(payloads, n.Payload)
			// Coalesce a burst of notifications into one reload, within
			// a fixed window so a steady stream cannot postpone it.
			window, cancel := context.WithTimeout(ctx, coalesceWindow)
			for {
				n, err := pg.WaitForNotification(window)
				if err == nil {
					payloads = append(payloads, n.Payload)
					continue
				}
				closedEarly := window.Err() == nil || pg.IsClosed()
				cancel()
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if closedEarly {
					return fmt.Errorf("enforce: wait for notification: %w", err)
				}
				break
			}
		}
		reload := h.Reload
		if payloads != nil {
			reload = func(ctx context.Context) error { return h.applyChanges(ctx, payloads) }
		}
		// A failed reload with LISTEN still up is retried at the next
		// notification or interval; the monitor keeps the log short.
		if err := reload(ctx); err != nil {
			h.postgres.Failure(err)
		} else {
			h.postgres.Success()
		}
		lastReload = h.now()
	}
}
