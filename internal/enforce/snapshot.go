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
	// keyPart identifies the rule's state: plan, rule name and algorithm
	// (a new algorithm under the same name starts from fresh state).
	keyPart string
	windowS int64
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
}

type keyView struct {
	id        string
	tenant    *tenantView
	expiresAt *time.Time
	revokedAt *time.Time
}

// Snapshot is an immutable view of everything a check needs.
type Snapshot struct {
	keys        map[tenants.KeyHash]*keyView
	tenants     map[string]*tenantView
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

func compilePlan(p plans.Plan) *planView {
	v := &planView{id: p.ID, name: p.Name}
	rules := p.Rules
	if quota, ok := p.QuotaRule(); ok { // a monthly quota is one more rule
		rules = append(rules[:len(rules):len(rules)], quota)
	}
	for _, r := range rules {
		params := r.Params()
		window := params.PeriodUS
		switch params.Calendar {
		case limiter.CalendarDay:
			window = limiter.DayUS
		case limiter.CalendarMonth:
			window = 30 * limiter.DayUS
		}
		v.rules = append(v.rules, compiledRule{
			Rule:    r,
			params:  params,
			keyPart: strconv.FormatInt(p.ID, 10) + ":" + r.Name + ":" + string(r.Algorithm),
			windowS: (window + limiter.SecondUS - 1) / limiter.SecondUS,
		})
	}
	return v
}

// NewSnapshot indexes d.
func NewSnapshot(d Data, now time.Time) *Snapshot {
	s := &Snapshot{
		keys:        make(map[tenants.KeyHash]*keyView, len(d.Keys)),
		tenants:     make(map[string]*tenantView, len(d.Tenants)),
		signingKeys: d.SigningKeys,
		tokens:      make(map[string]auth.ServiceToken, len(d.ServiceTokens)),
		loadedAt:    now,
	}
	byID := map[int64]*planView{}
	planByID := map[int64]plans.Plan{}
	for _, p := range d.Plans {
		v := compilePlan(p)
		byID[p.ID] = v
		planByID[p.ID] = p
		if p.Name == plans.AnonymousPlan && p.ArchivedAt == nil {
			s.anonymous = v
		}
	}
	for _, t := range d.Tenants {
		plan := byID[t.PlanID]
		if over := d.Overrides[t.ID]; len(over) > 0 && plan != nil {
			// A tenant with overrides gets a plan view of its own. Its rules
			// keep the plan's state keys by name, so an override of a plan
			// rule continues from the usage counted so far.
			p := planByID[t.PlanID]
			p.Rules = plans.MergeRules(p.Rules, over)
			plan = compilePlan(p)
		}
		s.tenants[t.ID] = &tenantView{id: t.ID, name: t.Name, status: t.Status, plan: plan}
	}
	for _, k := range d.Keys {
		s.addKey(k)
	}
	for _, st := range d.ServiceTokens {
		s.tokens[st.ID] = st
	}
	return s
}

func (s *Snapshot) addKey(k tenants.Key) *keyView {
	t := s.tenants[k.TenantID]
	if t == nil {
		return nil
	}
	v := &keyView{id: k.ID, tenant: t, expiresAt: k.ExpiresAt, revokedAt: k.RevokedAt}
	s.keys[k.Hash] = v
	return v
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
	d, err := h.source.LoadSnapshot(ctx)
	if err != nil {
		h.reloadErrors.Add(1)
		return fmt.Errorf("enforce: reload snapshot: %w", err)
	}
	s := NewSnapshot(d, started)
	h.mu.Lock()
	h.current.Store(s)
	h.extra = map[tenants.KeyHash]*keyView{}
	clear(h.misses)
	h.mu.Unlock()
	h.reloads.Add(1)
	return nil
}

// lookupKey finds a key by hash in the snapshot, then among keys found
// since, then in the source — unless it was not found there lately, or
// Postgres is known to be down, or more than 50 lookups a second per
// process were asked for.
func (h *Holder) lookupKey(ctx context.Context, s *Snapshot, hash tenants.KeyHash) *keyView {
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
	t := cur.tenants[k.TenantID]
	if t == nil {
		return nil
	}
	v = &keyView{id: k.ID, tenant: t, expiresAt: k.ExpiresAt, revokedAt: k.RevokedAt}
	if _, loaded := cur.keys[hash]; !loaded {
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
// tollgate_changes and reloads at once on a notification, and reloads
// every interval anyway in case a notification was lost.
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
		_, err := pg.WaitForNotification(wait)
		timedOut := wait.Err() != nil // read before cancel, which sets it
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && (!timedOut || pg.IsClosed()) {
			return fmt.Errorf("enforce: wait for notification: %w", err) // the connection failed
		}
		if err == nil {
			// Coalesce a burst of notifications into one reload, within
			// a fixed window so a steady stream cannot postpone it.
			window, cancel := context.WithTimeout(ctx, coalesceWindow)
			for {
				_, err := pg.WaitForNotification(window)
				if err == nil {
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
		// A failed reload with LISTEN still up is retried at the next
		// notification or interval; the monitor keeps the log short.
		if err := h.Reload(ctx); err != nil {
			h.postgres.Failure(err)
		} else {
			h.postgres.Success()
		}
		lastReload = h.now()
	}
}
