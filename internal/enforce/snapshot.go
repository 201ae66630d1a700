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
	d, err := h.source.LoadSnapshot(ctx)
	if err != nil {
		h.reloadErrors.Add(1)
		return fmt.Errorf("enforce: reload snapshot: %w", err)
	}
	s := NewSnapshot(d, started)
	h.mu.Lock()
	h.current.Store(s)
	h.extra = map[tenants.KeyHash]*keyView{}
	h.mu.Unlock()
	h.reloads.Add(1)
	return nil
}

// lookupKey finds a key by hash in the snapshot, then among keys found
// since, then (bounded to 50 lookups a second per process) in the source.
func (h *Holder) lookupKey(ctx context.Context, s *Snapshot, hash tenants.KeyHash) *keyView {
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

// missLookupTimeout bounds the Postgres lookup of a key not in the
// snapshot yet.
const missLookupTimeout = 100 * time.Millisecond

// coalesceWindow is how long a reload waits, after the first notification
// of a burst, for more to arrive; never longer, however many keep coming.
const coalesceWindow = 50 * time.Millisecond

// Sync keeps the holder fresh until ctx ends: it LISTENs on
// tollgate_changes and reloads at once on a notification, and reloads
// every interval anyway in case a notification was lost.
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
		_, err := pg.WaitForNotification(wait)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && wait.Err() == nil {
			return err // the connection failed
		}
		if err == nil {
			// Coalesce a burst of notifications into one reload, within
			// a fixed window so a steady stream cannot postpone it.
			window, cancel := context.WithTimeout(ctx, coalesceWindow)
			for {
				if _, err := pg.WaitForNotification(window); err != nil {
					if ctx.Err() == nil && window.Err() == nil {
						cancel()
						return err
					}
					break
				}
			}
			cancel()
		}
		if err := h.Reload(ctx); err != nil {
			h.log.Warn("snapshot reload failed", "err", err)
		}
		lastReload = h.now()
	}
}
