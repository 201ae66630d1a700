package limiter

import (
	"fmt"
	"slices"
)

// Internals the conformance suite (package limiter_test, which also
// imports redisstore) holds every store to.

// State is a rule's stored state.
type State = state

// Decision is what evaluating one rule produced.
type Decision = decision

// Evaluate is the pure algorithm step every store applies.
func Evaluate(p Params, st *State, now, cost int64) Decision { return evaluate(p, st, now, cost) }

// Next is the state the decision stores when its check is admitted.
func (d decision) Next() *State { return d.next }

// CopyEntry returns n copies of the store's entry for key under other
// keys, so that a test can measure their heap.
func CopyEntry(s *MemoryStore, key string, n int) map[string]*memoryEntry {
	template := *s.entries[key]
	entries := make(map[string]*memoryEntry)
	for i := range n {
		e := template
		e.st.log = slices.Clone(template.st.log)
		entries[fmt.Sprintf("{t:%08x}:k:7c9e6679:r:hourly", i)] = &e
	}
	return entries
}

// DropCounter forgets the counter at key, as a Redis server that lost it
// does (its log stays).
func DropCounter(s *MemoryStore, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.credits, key)
}

// SetReadClock makes ReadCredits report now instead of the store's clock.
func SetReadClock(s *MemoryStore, now func() int64) { s.readNow = now }
