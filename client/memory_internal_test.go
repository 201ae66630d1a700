package client

import (
	"testing"
	"time"
)

// TestMemoryCostsNoAllocationWhenAllowed: what remembering adds to a
// check the server allows, without a hold or lease (a lookup that finds
// nothing, the give-back count, the decision looked at), allocates
// nothing.
func TestMemoryCostsNoAllocationWhenAllowed(t *testing.T) {
	m := newDenials(DefaultMemorySize)
	k := newDenialKey(CheckRequest{Key: "tg_k", Resource: "GET /repos"})
	now := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	d := &Decision{Allowed: true, Reason: ReasonOK, Rules: []RuleResult{{Name: "hourly", Algorithm: "gcra", Allowed: true}}}
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok := m.lookup(k, now); ok {
			t.Fatal("remembered a denial never seen")
		}
		_ = m.sent()
		if remembers(d) {
			t.Fatal("remembers an allowed decision")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per allowed check, want 0", allocs)
	}
}
