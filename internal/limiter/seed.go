package limiter

import (
	"context"
	"strings"
)

// SeedMode says what a store does with a tally (Params.Seed) whose seed
// marker is missing: its state may have been lost (a Redis restarted
// empty), and restarting it from zero would admit a month's money again.
type SeedMode uint8

// Seed modes.
const (
	// SeedNone: the rule is not a tally; stores decide it as always.
	SeedNone SeedMode = iota
	// SeedOpen: without the marker the rule is Unknown and does not stop
	// the check (a rule that fails open: the others decide).
	SeedOpen
	// SeedClosed: without the marker the rule is Unknown and a check that
	// costs something (not a dry run) is not admitted (a rule that fails
	// closed, as the spend cap does).
	SeedClosed
)

// seedMarkerSuffix ends a seed marker's key: six bytes, shorter than any
// state's or record's part after its hash tag, so no state can meet it.
const seedMarkerSuffix = "seeded"

// SeedKeyOf returns the key of the seed marker of state key key: the key
// up to its hash tag's closing brace and "seeded", so that the marker
// shares the Redis Cluster slot of every state under that tag. A key
// without a hash tag has the marker "seeded". check.lua and lean.lua
// derive it the same way.
func SeedKeyOf(key string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if closing := strings.IndexByte(key[open+1:], '}'); closing >= 0 {
			return key[:open+1+closing+1] + seedMarkerSuffix
		}
	}
	return seedMarkerSuffix
}

// TallySeed is the count of one tally for the month being rebuilt: the
// units the rollups hold for it.
type TallySeed struct {
	Key   string
	Count int64
}

// TallySeeder rebuilds the tallies (Params.Seed) of a store that lost
// them, then sets their seed markers. The Redis store and the memory
// store implement it; the rebuild (package quota) reads the counts from
// the rollups.
type TallySeeder interface {
	// MissingSeeds returns those of markers (keys SeedKeyOf returns) the
	// store does not hold, in order. The markers may lie in different
	// hash slots.
	MissingSeeds(ctx context.Context, markers []string) ([]string, error)
	// SeedTallies writes, only while marker is missing, each tally as
	// the window of the calendar month that starts at monthStartUS (µs)
	// with its count, never lowering a count the store holds for that
	// month; then, when last is true, it sets marker. All of tallies'
	// keys share marker's hash tag. It reports whether it wrote: false
	// when the marker was there already, or the store's clock is in
	// another month (the caller tries again with that month's counts).
	SeedTallies(ctx context.Context, marker string, monthStartUS int64, tallies []TallySeed, last bool) (bool, error)
}

// seeded reports whether the seed marker of key is present; s.mu is
// held.
func (s *MemoryStore) seeded(key string) bool {
	return !s.lostSeeds || s.seeds[SeedKeyOf(key)]
}

// unknownTally reports whether a request of p at key is a tally the store
// cannot decide (its seed marker missing); s.mu is held.
func (s *MemoryStore) unknownTally(p Params, key string) bool {
	return p.Seed != SeedNone && !s.seeded(key)
}

// MissingSeeds returns the markers the store lacks: none until Flush.
func (s *MemoryStore) MissingSeeds(_ context.Context, markers []string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var missing []string
	for _, m := range markers {
		if s.lostSeeds && !s.seeds[m] {
			missing = append(missing, m)
		}
	}
	return missing, nil
}

// SeedTallies is TallySeeder's, at the store's clock.
func (s *MemoryStore) SeedTallies(_ context.Context, marker string, monthStartUS int64, tallies []TallySeed, last bool) (bool, error) {
	var now int64
	if s.readNow != nil {
		now = s.readNow()
	} else {
		now = s.at(0)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.lostSeeds || s.seeds[marker] {
		return false, nil
	}
	start, end := windowBounds(Params{Calendar: CalendarMonth}, now)
	if start != monthStartUS {
		return false, nil
	}
	for _, t := range tallies {
		count := t.Count
		if st := s.live(t.Key, now); st != nil && st.window == start {
			count = max(count, st.count)
		}
		s.put(t.Key, &state{window: start, count: count}, end-now, now)
	}
	if last {
		s.seeds[marker] = true
	}
	return true, nil
}

// Flush forgets every state, hold, lease, balance and seed marker, as a
// Redis server restarted without persistence does: tallies are then
// Unknown until SeedTallies sets their markers again.
func (s *MemoryStore) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.entries)
	clear(s.holds)
	clear(s.leases)
	clear(s.slots)
	clear(s.credits)
	s.lostSeeds = true
	s.seeds = map[string]bool{}
}
