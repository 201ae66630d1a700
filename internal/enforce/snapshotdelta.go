package enforce

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
)

// Partial reloads. A full load of a million keys takes seconds, so a
// change reloads only what changed:
//
//   - a change to api_keys names the keys (tollgate_notify_keys in
//     migration 6: "api_keys:" then key IDs, and "-" and the hex hash of
//     each key removed); those keys are read and laid over the keys of the
//     last full load (Snapshot.changed);
//   - a change to any other table (plans, rules, tenants, overrides,
//     signing keys, service tokens) reloads all of those — some
//     thousands of rows, not the keys — and swaps each tenant's view in
//     place (tenantRef), so that keys need not change when their tenant
//     does;
//   - "api_keys" alone (more keys changed than a notification holds), an
//     overlay grown past maxChangedKeys, a source that cannot load parts,
//     the periodic reload and a new LISTEN connection load everything.

// tenantRef is a tenant as keys point to it: partial reloads swap its view.
type tenantRef struct{ view atomic.Pointer[tenantView] }

// maxChangedKeys bounds the keys laid over a full load: each change copies
// them, so past this a full load is cheaper.
const maxChangedKeys = 50_000

// newMeta builds a snapshot of d without keys. Tenants known to prev keep
// their tenantRef, which gets the new view.
func newMeta(d Data, prev *Snapshot, now time.Time) *Snapshot {
	s := &Snapshot{
		tenants:     make(map[[16]byte]*tenantRef, len(d.Tenants)),
		signingKeys: d.SigningKeys,
		tokens:      make(map[string]auth.ServiceToken, len(d.ServiceTokens)),
		loadedAt:    now,
	}
	byID := map[int64]*planView{}
	planByID := map[int64]plans.Plan{}
	for _, p := range d.Plans {
		v := compilePlan(p, nil)
		byID[p.ID] = v
		planByID[p.ID] = p
		if p.Name == plans.AnonymousPlan && p.ArchivedAt == nil {
			s.anonymous = v
		}
	}
	type update struct {
		ref  *tenantRef
		view *tenantView
	}
	updates := make([]update, 0, len(d.Tenants))
	for _, t := range d.Tenants {
		id := tenantKey(t.ID)
		plan := byID[t.PlanID]
		if over := d.Overrides[t.ID]; len(over) > 0 && plan != nil {
			// A tenant with overrides gets a plan view of its own. Its rules
			// keep the plan's state keys by name, so an override of a plan
			// rule continues from the usage counted so far.
			p := planByID[t.PlanID]
			p.Rules = plans.MergeRules(p.Rules, over)
			plan = compilePlan(p, plan)
		}
		tv := &tenantView{id: t.ID, name: t.Name, status: t.Status, plan: plan}
		tv.tag, tv.short = compactID(t.ID)
		var ref *tenantRef
		if prev != nil {
			ref = prev.tenants[id]
		}
		if ref == nil {
			ref = &tenantRef{}
		}
		s.tenants[id] = ref
		updates = append(updates, update{ref, tv})
	}
	// Views are swapped only now, all built: a check never sees a tenant
	// half made.
	for _, u := range updates {
		u.ref.view.Store(u.view)
	}
	if prev != nil {
		// Tenants gone: their keys stay until their own change arrives,
		// and are refused meanwhile.
		for id, ref := range prev.tenants {
			if _, ok := s.tenants[id]; !ok {
				ref.view.Store(nil)
			}
		}
	}
	for _, st := range d.ServiceTokens {
		s.tokens[st.ID] = st
	}
	return s
}

// tenantKey returns the bytes of a tenant ID, a UUID; other IDs (as tests
// use) are hashed into as many bytes.
func tenantKey(id string) [16]byte {
	if u, ok := tenants.ParseUUID(id); ok {
		return u
	}
	sum := sha256.Sum256([]byte(id))
	return [16]byte(sum[:16])
}

// key returns the key with hash, or nil.
func (s *Snapshot) key(hash tenants.KeyHash) *keyView {
	if v, ok := s.changed[hash]; ok {
		return v
	}
	return s.keys[hash]
}

// withKeys returns a copy of s with keys read again and keys removed.
func (s *Snapshot) withKeys(read []tenants.SnapshotKey, removed []tenants.KeyHash, now time.Time) *Snapshot {
	next := *s
	next.loadedAt = now
	next.changed = make(map[tenants.KeyHash]*keyView, len(s.changed)+len(read)+len(removed))
	for h, v := range s.changed {
		next.changed[h] = v
	}
	for _, h := range removed {
		next.changed[h] = nil
	}
	for _, k := range read {
		next.changed[k.Hash] = next.newKeyView(k) // nil: its tenant is gone
	}
	return &next
}

// StreamingSource is a Source that also loads parts of the data and streams
// keys (PostgresSource is one): the holder then loads a million keys
// without holding them twice, and reloads only what changed.
type StreamingSource interface {
	Source
	// LoadSnapshotStream is LoadSnapshot with the keys handed to key one by
	// one instead of returned, after the rest to meta, all in the same
	// consistent read.
	LoadSnapshotStream(ctx context.Context, meta func(Data), key func(tenants.SnapshotKey) error) error
	// LoadMeta is LoadSnapshot without keys.
	LoadMeta(ctx context.Context) (Data, error)
	// LoadKeys hands key the keys with the given IDs that exist.
	LoadKeys(ctx context.Context, ids []string, key func(tenants.SnapshotKey) error) error
}

// LoadSnapshotStream reads every plan, tenant, override and service token
// and streams every key, in one read-only, repeatable-read transaction.
func (p *PostgresSource) LoadSnapshotStream(ctx context.Context, meta func(Data), key func(tenants.SnapshotKey) error) error {
	return postgres.ReadTx(ctx, p.db, func(tx pgx.Tx) error {
		d, err := loadMeta(ctx, tx)
		if err != nil {
			return err
		}
		meta(d)
		return tenants.NewStore(tx).ScanSnapshotKeys(ctx, nil, key)
	})
}

// LoadMeta reads everything but the keys in one consistent read.
func (p *PostgresSource) LoadMeta(ctx context.Context) (Data, error) {
	var d Data
	err := postgres.ReadTx(ctx, p.db, func(tx pgx.Tx) error {
		var err error
		d, err = loadMeta(ctx, tx)
		return err
	})
	return d, err
}

// LoadKeys reads the keys with the given IDs.
func (p *PostgresSource) LoadKeys(ctx context.Context, ids []string, key func(tenants.SnapshotKey) error) error {
	return tenants.NewStore(p.db).ScanSnapshotKeys(ctx, ids, key)
}

func loadMeta(ctx context.Context, tx pgx.Tx) (Data, error) {
	var d Data
	ps, ts, as := plans.NewStore(tx), tenants.NewStore(tx), auth.NewStore(tx)
	var err error
	if d.Plans, err = ps.List(ctx); err != nil {
		return d, err
	}
	if d.Tenants, err = ts.List(ctx); err != nil {
		return d, err
	}
	if d.Overrides, err = ts.AllOverrides(ctx); err != nil {
		return d, err
	}
	if d.SigningKeys, err = as.PublicKeys(ctx); err != nil {
		return d, err
	}
	d.ServiceTokens, err = as.ListServiceTokens(ctx)
	return d, err
}

// changes is what a burst of notifications asks to reload.
type changes struct {
	full, meta bool
	keyIDs     []string
	removed    []tenants.KeyHash
}

// parseChanges reads the payloads of tollgate_changes notifications.
func parseChanges(payloads []string) changes {
	var c changes
	for _, p := range payloads {
		table, items, named := strings.Cut(p, ":")
		switch {
		case table == "api_keys" && named:
			for item := range strings.SplitSeq(items, ",") {
				if hexHash, ok := strings.CutPrefix(item, "-"); ok {
					h, ok := parseHash(hexHash)
					if !ok {
						c.full = true
						continue
					}
					c.removed = append(c.removed, h)
				} else if item != "" {
					c.keyIDs = append(c.keyIDs, item)
				}
			}
		case table == "api_keys":
			c.full = true // more keys changed than one notification names
		default:
			c.meta = true
		}
	}
	return c
}

func parseHash(s string) (h tenants.KeyHash, ok bool) {
	if len(s) != 2*len(h) {
		return h, false
	}
	for i := range h {
		hi, lo := unhexByte(s[2*i]), unhexByte(s[2*i+1])
		if hi > 15 || lo > 15 {
			return h, false
		}
		h[i] = hi<<4 | lo
	}
	return h, true
}

func unhexByte(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return 255
}

// applyChanges reloads what the notifications' payloads say changed: all
// of it, the tables other than keys, and/or some keys.
func (h *Holder) applyChanges(ctx context.Context, payloads []string) error {
	c := parseChanges(payloads)
	src, partial := h.source.(StreamingSource)
	cur := h.Current()
	if c.full || !partial || cur == nil || len(cur.changed)+len(c.keyIDs)+len(c.removed) > maxChangedKeys {
		return h.Reload(ctx)
	}
	started := h.now()
	next := cur
	if c.meta {
		d, err := src.LoadMeta(ctx)
		if err != nil {
			h.reloadErrors.Add(1)
			return fmt.Errorf("enforce: reload plans and tenants: %w", err)
		}
		meta := newMeta(d, cur, started)
		meta.keys, meta.changed = cur.keys, cur.changed
		next = meta
	}
	if len(c.keyIDs) > 0 || len(c.removed) > 0 {
		var read []tenants.SnapshotKey
		err := src.LoadKeys(ctx, c.keyIDs, func(k tenants.SnapshotKey) error {
			read = append(read, k)
			return nil
		})
		if err != nil {
			h.reloadErrors.Add(1)
			return fmt.Errorf("enforce: reload keys: %w", err)
		}
		next = next.withKeys(read, c.removed, started)
	}
	h.mu.Lock()
	if h.current.Load() == cur { // else a full load got there first
		h.current.Store(next)
	}
	h.mu.Unlock()
	h.reloads.Add(1)
	h.partialReloads.Add(1)
	return nil
}
