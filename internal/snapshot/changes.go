package snapshot

import (
	"context"
	"fmt"
	"strings"

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
//     thousands of rows, not the keys — into the next snapshot, which
//     shares the keys: a key names its tenant by ID, found in the
//     snapshot it is read from, so keys need not change when their
//     tenant does;
//   - "api_keys" alone (more keys changed than a notification holds), an
//     overlay grown past maxChangedKeys, the periodic reload and a new LISTEN connection load everything.

// maxChangedKeys bounds the keys laid over a full load: each change copies
// them, so past this a full load is cheaper.
const maxChangedKeys = 50_000

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
					h, ok := tenants.ParseKeyHash(hexHash)
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

// applyChanges reloads what the notifications' payloads say changed: all
// of it, the tables other than keys, and/or some keys.
func (h *Holder) applyChanges(ctx context.Context, payloads []string) error {
	c := parseChanges(payloads)
	cur := h.Current()
	if c.full || cur == nil || len(cur.changed)+len(c.keyIDs)+len(c.removed) > maxChangedKeys {
		return h.Reload(ctx)
	}
	started := h.now()
	next := cur
	if c.meta {
		d, err := h.source.LoadMeta(ctx)
		if err != nil {
			h.reloadErrors.Add(1)
			return fmt.Errorf("snapshot: reload plans and tenants: %w", err)
		}
		next = cur.withMetaOf(d, started)
	}
	if len(c.keyIDs) > 0 || len(c.removed) > 0 {
		var read []tenants.SnapshotKey
		err := h.source.LoadKeys(ctx, c.keyIDs, func(k tenants.SnapshotKey) error {
			read = append(read, k)
			return nil
		})
		if err != nil {
			h.reloadErrors.Add(1)
			return fmt.Errorf("snapshot: reload keys: %w", err)
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
