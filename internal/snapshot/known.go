package snapshot

import "github.com/tollgate/tollgate/internal/tenants"

// KnownKey returns the key with hash and its tenant as FindKey does, but
// from s and the keys this holder has already looked up only: it never
// queries Postgres, so that a caller may ask it as often as it likes. It
// returns nil, nil for a key it does not know.
func (h *Holder) KnownKey(s *Snapshot, hash tenants.KeyHash) (*Key, *Tenant) {
	if k, known := s.key(hash); known {
		if k == nil {
			return nil, nil
		}
		return k, s.tenantOf(k)
	}
	h.mu.Lock()
	l := h.lookedUp[hash]
	h.mu.Unlock()
	if l.key == nil {
		return nil, nil
	}
	return l.key, h.Current().tenantOf(l.key)
}
