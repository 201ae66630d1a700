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

	"github.com/tollgate/tollgate/internal/auth"
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
// after the snapshot was loaded are kept beside it until the next reload.
type Holder struct {
	current atomic.Pointer[Snapshot]
	source  Source
	log     *slog.Logger
	now     func() time.Time

	mu    sync.Mutex
	extra map[tenants.KeyHash]*keyView

	// missLimiter bounds how many unknown well-formed keys per second may
	// be looked up in Postgres, so random keys cannot load it.
	missLimiter *limiter.MemoryStore

	reloads      atomic.Int64
	reloadErrors atomic.Int64
	// fullReloads and partialReloads split reloads (snapshotdelta.go).
	fullReloads, partialReloads atomic.Int64
}

// NewHolder returns a Holder that loads from source.
func NewHolder(source Source, log *slog.Logger) *Holder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Holder{source: source, log: log, now: time.Now, extra: map[tenants.KeyHash]*keyView{},
		missLimiter: limiter.NewMemoryStore(nil)}
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
// since, then (bounded to 50 lookups a second per process) in the source.
func (h *Holder) lookupKey(ctx context.Context, s *Snapshot, hash tenants.KeyHash) *keyView {
	if v, changed := s.changed[hash]; changed {
		return v // nil: removed
	}
	if v := s.keys[hash]; v != nil {
		return v
	}
	h.mu.Lock()
	v, seen := h.extra[hash]
	h.mu.Unlock()
	if seen {
		return v
	}
	out, err := h.missLimiter.Check(ctx, limiter.Batch{Cost: 1, Requests: []limiter.Request{{
		Key: "miss", Params: limiter.Params{Algorithm: limiter.GCRA, Limit: 50, PeriodUS: limiter.SecondUS, Burst: 50},
	}}})
	if err != nil || !out.Admitted {
		return nil
	}
	// A hung Postgres must not hang checks with unknown keys.
	lookupCtx, cancel := context.WithTimeout(ctx, missLookupTimeout)
	k, err := h.source.FindKey(lookupCtx, hash)
	cancel()
	if err != nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
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

// missLookupTimeout bounds the Postgres lookup of a key not in the
// snapshot yet.
const missLookupTimeout = 100 * time.Millisecond

// coalesceWindow is how long a reload waits, after the first notification
// of a burst, for more to arrive; never longer, however many keep coming.
const coalesceWindow = 50 * time.Millisecond

// Sync keeps the holder fresh until ctx ends: it LISTENs on
// tollgate_changes and on a notification reloads at once what changed
// (snapshotdelta.go), and reloads everything every interval anyway in
// case a notification was lost.
func (h *Holder) Sync(ctx context.Context, db *pgxpool.Pool, interval time.Duration) {
	for ctx.Err() == nil {
		err := h.listen(ctx, db, interval)
		if ctx.Err() != nil {
			return
		}
		h.log.Warn("snapshot listener stopped; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		if err := h.Reload(ctx); err != nil {
			h.log.Warn("snapshot reload failed", "err", err)
		}
	}
}

func (h *Holder) listen(ctx context.Context, db *pgxpool.Pool, interval time.Duration) error {
	conn, err := db.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN tollgate_changes"); err != nil {
		return err
	}
	defer conn.Exec(context.Background(), "UNLISTEN *") //nolint:errcheck
	// Changes made between the last load and LISTEN would be missed.
	if err := h.Reload(ctx); err != nil {
		return err
	}
	pg := conn.Conn()
	lastReload := h.now()
	for {
		// Wait for a notification, but no longer than until the next
		// periodic reload is due.
		wait, cancel := context.WithTimeout(ctx, max(interval-h.now().Sub(lastReload), time.Millisecond))
		n, err := pg.WaitForNotification(wait)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && wait.Err() == nil {
			return err // the connection failed
		}
		var payloads []string // what changed; nil: reload everything
		if err == nil {
			payloads = append(payloads, n.Payload)
			// Coalesce a burst of notifications into one reload, within
			// a fixed window so a steady stream cannot postpone it.
			window, cancel := context.WithTimeout(ctx, coalesceWindow)
			for {
				n, err := pg.WaitForNotification(window)
				if err != nil {
					if ctx.Err() == nil && window.Err() == nil {
						cancel()
						return err
					}
					break
				}
				payloads = append(payloads, n.Payload)
			}
			cancel()
		}
		reload := h.Reload
		if payloads != nil {
			reload = func(ctx context.Context) error { return h.applyChanges(ctx, payloads) }
		}
		if err := reload(ctx); err != nil {
			h.log.Warn("snapshot reload failed", "err", err)
		}
		lastReload = h.now()
	}
}
