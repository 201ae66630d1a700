package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"

	. "github.com/tollgate/tollgate/internal/limiter"
)

// model is the reference every store is held to: evaluate applied to
// states kept in a map, with the all-or-nothing and shadow rules of a
// batch. It never forgets state, so unlike a store with expiring keys it
// is defined for clocks that step backwards too.
type model struct{ states map[string]State }

func newModel() *model { return &model{states: map[string]State{}} }

// Check decides b as docs/algorithms.md says a check is decided: every
// rule is evaluated; the check is admitted when every non-shadow rule
// allows it; only then (and not on a dry run) does every rule that allowed
// it, shadow or not, store its new state.
func (m *model) Check(_ context.Context, b Batch) (Outcome, error) {
	if len(b.Requests) == 0 {
		return Outcome{}, ErrEmptyBatch
	}
	out := Outcome{NowUS: b.NowUS, Admitted: true, Results: make([]Result, len(b.Requests))}
	decisions := make([]Decision, len(b.Requests))
	for i, r := range b.Requests {
		var st *State
		if s, ok := m.states[r.Key]; ok {
			st = &s
		}
		decisions[i] = Evaluate(r.Params, st, b.NowUS, b.Cost)
		out.Results[i] = decisions[i].Result
		if !decisions[i].Allowed && !r.Shadow {
			out.Admitted = false
		}
	}
	if out.Admitted && !b.DryRun {
		for i, d := range decisions {
			if d.Allowed && d.Next() != nil {
				m.states[b.Requests[i].Key] = *d.Next()
			}
		}
	}
	return out, nil
}

// ruleConfig is a named rule used by the property tests.
type ruleConfig struct {
	name string
	p    Params
}

// ruleConfigs covers every algorithm and mode, with periods that divide
// evenly and periods that do not (emission intervals rounded up, windows
// not aligned to the test clock's start).
var ruleConfigs = []ruleConfig{
	{"gcra/10-per-s-burst-5", Params{Algorithm: GCRA, Limit: 10, PeriodUS: SecondUS, Burst: 5}},
	{"gcra/7-per-s", Params{Algorithm: GCRA, Limit: 7, PeriodUS: SecondUS}},
	{"gcra/3-per-min-burst-1", Params{Algorithm: GCRA, Limit: 3, PeriodUS: MinuteUS, Burst: 1}},
	{"token_bucket/10-per-s-burst-5", Params{Algorithm: TokenBucket, Limit: 10, PeriodUS: SecondUS, Burst: 5}},
	{"token_bucket/7-per-s", Params{Algorithm: TokenBucket, Limit: 7, PeriodUS: SecondUS}},
	{"token_bucket/limit-0-burst-5", Params{Algorithm: TokenBucket, Limit: 0, PeriodUS: SecondUS, Burst: 5}},
	{"leaky_bucket/police-5-per-s-burst-3", Params{Algorithm: LeakyBucket, Limit: 5, PeriodUS: SecondUS, Burst: 3}},
	{"leaky_bucket/shape-2-per-s-burst-5", Params{Algorithm: LeakyBucket, Limit: 2, PeriodUS: SecondUS, Burst: 5, Shape: true}},
	{"fixed_window/5-per-s", Params{Algorithm: FixedWindow, Limit: 5, PeriodUS: SecondUS}},
	{"fixed_window/3-per-11s", Params{Algorithm: FixedWindow, Limit: 3, PeriodUS: 11 * SecondUS}},
	{"fixed_window/day-40", Params{Algorithm: FixedWindow, Limit: 40, Calendar: CalendarDay}},
	{"fixed_window/month-60", Params{Algorithm: FixedWindow, Limit: 60, Calendar: CalendarMonth}},
	{"fixed_window/anchor-4-per-s", Params{Algorithm: FixedWindow, Limit: 4, PeriodUS: SecondUS, AnchorFirstRequest: true}},
	{"sliding_window_log/5-per-s", Params{Algorithm: SlidingWindowLog, Limit: 5, PeriodUS: SecondUS}},
	{"sliding_window_log/10-per-700ms", Params{Algorithm: SlidingWindowLog, Limit: 10, PeriodUS: 700 * ms}},
	{"sliding_window_counter/5-per-s", Params{Algorithm: SlidingWindowCounter, Limit: 5, PeriodUS: SecondUS}},
	{"sliding_window_counter/7-per-900ms", Params{Algorithm: SlidingWindowCounter, Limit: 7, PeriodUS: 900 * ms}},
}

// capacity returns the most units p can ever admit at once.
func capacity(p Params) int64 {
	switch p.Algorithm {
	case GCRA, TokenBucket, LeakyBucket:
		return p.EffectiveBurst()
	}
	return p.Limit
}

// scale returns p's window and the typical time between its units, µs.
func scale(p Params) (window, interval int64) {
	window = p.PeriodUS
	switch p.Calendar {
	case CalendarDay:
		window = DayUS
	case CalendarMonth:
		window = 30 * DayUS
	}
	return window, max(1, window/max(1, p.Limit, capacity(p)))
}

// check is one generated check of a sequence.
type check struct {
	at   int64 // µs since the Unix epoch
	cost int64
	dry  bool
}

// hugeCosts can never fit; several overflow int64 when multiplied by an
// emission interval or a period.
var hugeCosts = []int64{1 << 31, 1 << 53, 1<<53 + 1, 1 << 62, math.MaxInt64}

// genChecks returns n checks for p: bursts at one instant, gaps around the
// emission interval and the window, landings right at window boundaries,
// peeks, dry runs, costs up to and beyond capacity. When backwards is set,
// about one gap in ten steps the clock back by up to a window.
func genChecks(r *rand.Rand, p Params, n int, backwards bool) []check {
	window, interval := scale(p)
	return genChecksScaled(r, window, interval, capacity(p), n, backwards)
}

func genChecksScaled(r *rand.Rand, window, interval, capacity int64, n int, backwards bool) []check {
	now := epoch + r.Int64N(window)
	checks := make([]check, 0, n)
	for range n {
		var gap int64
		switch x := r.IntN(100); {
		case x < 30:
			gap = 0
		case x < 60:
			gap = r.Int64N(interval + 1)
		case x < 80:
			gap = r.Int64N(3*interval + 1)
		case x < 90:
			gap = r.Int64N(window + 1)
		case x < 94:
			gap = r.Int64N(3*window + 1)
		default: // right at the next epoch-aligned boundary, ±1 µs
			gap = (FloorDiv(now, window)+1)*window - now + r.Int64N(3) - 1
		}
		if backwards && r.IntN(10) == 0 {
			gap = -r.Int64N(window + 1)
		}
		now += gap
		var cost int64
		switch x := r.IntN(100); {
		case x < 12:
			cost = 0
		case x < 70:
			cost = 1
		case x < 88:
			cost = 1 + r.Int64N(capacity) // 1..capacity
		case x < 96:
			cost = capacity + 1 + r.Int64N(capacity)
		default:
			cost = hugeCosts[r.IntN(len(hugeCosts))]
		}
		checks = append(checks, check{at: now, cost: cost, dry: r.IntN(100) < 4})
	}
	return checks
}

// seeded returns a deterministic generator for a test and a seed.
func seeded(name string, seed uint64) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(h.Sum64(), seed))
}

// replay runs checks against store, one batch of reqs per check, and
// returns the outcomes.
func replay(t testing.TB, store Store, reqs []Request, checks []check) []Outcome {
	t.Helper()
	outs := make([]Outcome, len(checks))
	for i, c := range checks {
		out, err := store.Check(context.Background(), Batch{Requests: reqs, Cost: c.cost, DryRun: c.dry, NowUS: c.at})
		if err != nil {
			t.Fatalf("check %d %+v: %v", i, c, err)
		}
		outs[i] = out
	}
	return outs
}

// single is a batch of one rule.
func single(key string, p Params) []Request { return []Request{{Key: key, Params: p}} }

// sameOutcomes reports the first check where got and want differ.
func sameOutcomes(got, want []Outcome, checks []check) error {
	if len(got) != len(want) {
		return fmt.Errorf("got %d outcomes, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		same := g.NowUS == w.NowUS && g.Admitted == w.Admitted && len(g.Results) == len(w.Results)
		for j := 0; same && j < len(g.Results); j++ {
			same = g.Results[j] == w.Results[j]
		}
		if !same {
			return fmt.Errorf("check %d (at %+dµs, cost %d, dry %v): got %+v, want %+v",
				i, checks[i].at-checks[0].at, checks[i].cost, checks[i].dry, g, w)
		}
	}
	return nil
}

// rawKey is a Redis key as stored: its serialized value and absolute
// expiry (ms; -1 none, -2 no key).
type rawKey struct {
	dump     string
	expireAt int64
}

// rawKeys reads keys byte for byte.
func rawKeys(t testing.TB, rdb redis.UniversalClient, keys []string) []rawKey {
	t.Helper()
	ctx := context.Background()
	out := make([]rawKey, len(keys))
	for i, k := range keys {
		dump, err := rdb.Dump(ctx, k).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("DUMP %s: %v", k, err)
		}
		at, err := rdb.Do(ctx, "PEXPIRETIME", k).Int64()
		if err != nil {
			t.Fatalf("PEXPIRETIME %s: %v", k, err)
		}
		out[i] = rawKey{dump, at}
	}
	return out
}

func keysOf(reqs []Request) []string {
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = r.Key
	}
	return keys
}
