package limiter_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	. "github.com/tollgate/tollgate/internal/limiter"
)

// Properties over seeded random check sequences (math/rand/v2 with fixed
// seeds, so every run checks the same sequences). The differential tests
// hold every store to the model; the remaining properties are checked on
// the model, which the stores are thereby shown to share.

// TestStoresAgreeWithModel replays the same sequences through the memory
// store, a single Redis and a Redis Cluster: every outcome, field by field,
// must equal the model's.
func TestStoresAgreeWithModel(t *testing.T) {
	agreeWithModel(t, stores(), 3, "", false)
}

// TestRedisAgreesWithModelWhenClockStepsBack is the differential test with
// a clock that sometimes steps back (a Redis failover to a server whose
// clock is behind, an NTP correction). The script must still decide
// exactly as the Go code does. The memory store is left out: it forgets
// expired state, which is only sound for a clock that does not go back.
func TestRedisAgreesWithModelWhenClockStepsBack(t *testing.T) {
	agreeWithModel(t, redisStores(), 2, "/backwards", true)
}

// agreeWithModel replays seeds sequences of each rule config (seeded by
// its name and label; with a clock that steps back when backwards)
// through each of stores and the model: the outcomes must be equal and
// satisfy assertInvariants.
func agreeWithModel(t *testing.T, stores []storeCase, seeds uint64, label string, backwards bool) {
	forEachStore(t, stores, func(t *testing.T, rc ruleConfig, sc storeCase, store openStore) {
		for seed := range seeds {
			checks := genChecks(seeded(rc.name+label, seed), rc.p, 200, backwards)
			key := fmt.Sprintf("k%d", seed)
			want := replay(t, newModel(), single(key, rc.p), checks)
			assertInvariants(t, rc.p, checks, want)
			got := replay(t, store, single(store.ns+key, rc.p), checks)
			if err := sameOutcomes(got, want, checks); err != nil {
				t.Errorf("%s, seed %d: %v", sc.name, seed, err)
			}
		}
	})
}

// forEachStore runs f on each rule config, in parallel, with each of
// stores freshly opened in turn.
func forEachStore(t *testing.T, stores []storeCase, f func(t *testing.T, rc ruleConfig, sc storeCase, store openStore)) {
	for _, rc := range ruleConfigs {
		t.Run(rc.name, func(t *testing.T) {
			t.Parallel()
			for _, sc := range stores {
				f(t, rc, sc, sc.open(t))
			}
		})
	}
}

// assertInvariants checks what every single-rule outcome must satisfy:
// remaining never negative; retry 0 when allowed, -1 exactly when the
// request can never pass (above capacity, or a spent one-time allowance),
// positive otherwise; a delay only when shaping.
func assertInvariants(t testing.TB, p Params, checks []check, outs []Outcome) {
	t.Helper()
	capy := capacity(p)
	oneTime := p.Algorithm == TokenBucket && p.Limit == 0
	for i, o := range outs {
		r, c := o.Results[0], checks[i]
		var problem string
		switch {
		case o.Admitted != r.Allowed:
			problem = "admitted differs from the only rule's verdict"
		case r.Remaining < 0:
			problem = "negative remaining"
		case c.cost > capy && r.Allowed:
			problem = "a cost above capacity was allowed"
		case r.Allowed && r.RetryAfterUS != 0:
			problem = "allowed with a retry"
		case !r.Allowed && (c.cost > capy || oneTime) && r.RetryAfterUS != -1:
			problem = "a request that can never pass has a retry other than -1"
		case !r.Allowed && c.cost <= capy && !oneTime && r.RetryAfterUS <= 0:
			problem = "a request that can pass later has no positive retry"
		case r.DelayUS < 0 || (r.DelayUS != 0 && !p.Shape):
			problem = "delay out of place"
		case r.ResetAfterUS < 0 && !(oneTime && r.ResetAfterUS == -1):
			problem = "negative reset"
		}
		if problem != "" {
			t.Fatalf("check %d (cost %d): %s: %+v", i, c.cost, problem, r)
		}
	}
}

// TestTokenBucketDecidesAsGCRA: with the same parameters a token bucket
// must decide exactly as GCRA for any sequence, including clocks that step
// back. On the stores both run as shadow rules of one batch, so each is
// decided on its own state in the same script call.
func TestTokenBucketDecidesAsGCRA(t *testing.T) {
	for _, rc := range ruleConfigs {
		if rc.p.Algorithm != GCRA {
			continue
		}
		gcra := rc.p
		bucket := gcra
		bucket.Algorithm = TokenBucket
		t.Run(rc.name+"/model", func(t *testing.T) {
			for seed := range uint64(40) {
				checks := genChecks(seeded(rc.name+"/tb", seed), gcra, 1000, seed%2 == 1)
				want := replay(t, newModel(), single("k", gcra), checks)
				got := replay(t, newModel(), single("k", bucket), checks)
				if err := sameOutcomes(got, want, checks); err != nil {
					t.Fatalf("seed %d: token bucket vs GCRA: %v", seed, err)
				}
			}
		})
		for _, sc := range stores() {
			t.Run(rc.name+"/"+sc.name, func(t *testing.T) {
				t.Parallel()
				store := sc.open(t)
				for seed := range uint64(2) {
					backwards := sc.name != "memory" && seed == 1
					checks := genChecks(seeded(rc.name+"/tb-store", seed), gcra, 200, backwards)
					reqs := []Request{
						{Key: fmt.Sprintf("%sg%d", store.ns, seed), Params: gcra, Shadow: true},
						{Key: fmt.Sprintf("%st%d", store.ns, seed), Params: bucket, Shadow: true},
					}
					for i, o := range replay(t, store, reqs, checks) {
						if o.Results[1] != o.Results[0] {
							t.Fatalf("seed %d, check %d %+v: token bucket %+v, GCRA %+v", seed, i, checks[i], o.Results[1], o.Results[0])
						}
					}
				}
			})
		}
	}
}

// unit is an admitted check in a reference's history.
type unit struct{ at, cost int64 }

// propertySeeds is how many sequences each reference property replays.
const propertySeeds = 30

// forEachSequence runs f on propertySeeds sequences of p's checks (clock
// never going back) with the model's outcomes.
func forEachSequence(t *testing.T, name string, p Params, f func(t *testing.T, checks []check, outs []Outcome)) {
	t.Helper()
	for seed := range uint64(propertySeeds) {
		checks := genChecks(seeded(name+"/reference", seed), p, 1000, false)
		outs := replay(t, newModel(), single("k", p), checks)
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) { f(t, checks, outs) })
		if t.Failed() {
			return
		}
	}
}

// consumed reports whether a check stored anything.
func consumed(c check, o Outcome) bool { return o.Admitted && !c.dry && c.cost > 0 }

// TestSlidingWindowLogIsTheTrueSlidingWindow compares the log with a brute
// force count over the true sliding window (now − period, now]: same
// verdict, remaining, reset and retry (found by trying every instant at
// which an admitted unit leaves the window).
func TestSlidingWindowLogIsTheTrueSlidingWindow(t *testing.T) {
	for _, rc := range ruleConfigs {
		if rc.p.Algorithm != SlidingWindowLog {
			continue
		}
		p := rc.p
		t.Run(rc.name, func(t *testing.T) {
			forEachSequence(t, rc.name, p, func(t *testing.T, checks []check, outs []Outcome) {
				var admitted []unit
				inWindow := func(now int64) (units, newest int64) {
					for _, u := range admitted {
						if u.at > now-p.PeriodUS && u.at <= now {
							units += u.cost
							newest = max(newest, u.at)
						}
					}
					return units, newest
				}
				for i, c := range checks {
					count, newest := inWindow(c.at)
					want := Result{Allowed: c.cost <= p.Limit && count+c.cost <= p.Limit}
					switch {
					case want.Allowed:
						want.Remaining = p.Limit - count - c.cost
						if c.cost > 0 {
							newest = c.at
						}
					case c.cost > p.Limit:
						want.Remaining, want.RetryAfterUS = max(0, p.Limit-count), -1
					default:
						want.Remaining = max(0, p.Limit-count)
						for _, u := range admitted { // admitted is in time order
							if leave := u.at + p.PeriodUS; leave > c.at {
								if n, _ := inWindow(leave); n+c.cost <= p.Limit {
									want.RetryAfterUS = leave - c.at
									break
								}
							}
						}
					}
					if count > 0 || (want.Allowed && c.cost > 0) {
						want.ResetAfterUS = newest + p.PeriodUS - c.at
					}
					if got := outs[i].Results[0]; got != want {
						t.Fatalf("check %d %+v: got %+v, want %+v", i, c, got, want)
					}
					if consumed(c, outs[i]) {
						admitted = append(admitted, unit{c.at, c.cost})
					}
				}
			})
		})
	}
}

// TestFixedWindowCountsPerWindow compares epoch and calendar windows with
// a reference that finds each window with package time and counts units
// per window: same verdicts and results, and no window above limit.
func TestFixedWindowCountsPerWindow(t *testing.T) {
	for _, rc := range ruleConfigs {
		if rc.p.Algorithm != FixedWindow || rc.p.AnchorFirstRequest {
			continue
		}
		p := rc.p
		bounds := func(now int64) (start, end int64) {
			tm := time.UnixMicro(now).UTC()
			switch p.Calendar {
			case CalendarDay:
				s := time.Date(tm.Year(), tm.Month(), tm.Day(), 0, 0, 0, 0, time.UTC)
				return s.UnixMicro(), s.AddDate(0, 0, 1).UnixMicro()
			case CalendarMonth:
				s := time.Date(tm.Year(), tm.Month(), 1, 0, 0, 0, 0, time.UTC)
				return s.UnixMicro(), s.AddDate(0, 1, 0).UnixMicro()
			}
			start = now - ((now%p.PeriodUS)+p.PeriodUS)%p.PeriodUS
			return start, start + p.PeriodUS
		}
		t.Run(rc.name, func(t *testing.T) {
			forEachSequence(t, rc.name, p, func(t *testing.T, checks []check, outs []Outcome) {
				counts := map[int64]int64{}
				for i, c := range checks {
					start, end := bounds(c.at)
					want := fixedWindowAnswer(p, c, counts[start], end)
					if got := outs[i].Results[0]; got != want {
						t.Fatalf("check %d %+v: got %+v, want %+v", i, c, got, want)
					}
					if consumed(c, outs[i]) {
						counts[start] += c.cost
						if counts[start] > p.Limit {
							t.Fatalf("window at %d holds %d units, limit %d", start, counts[start], p.Limit)
						}
					}
				}
			})
		})
	}
}

// fixedWindowAnswer is the reference answer to c of p's window that holds
// count units and ends at end.
func fixedWindowAnswer(p Params, c check, count, end int64) Result {
	want := Result{Allowed: c.cost <= p.Limit && count+c.cost <= p.Limit}
	after := count
	switch {
	case want.Allowed:
		want.Remaining = p.Limit - count - c.cost
		after += c.cost
	case c.cost > p.Limit:
		want.Remaining, want.RetryAfterUS = max(0, p.Limit-count), -1
	default:
		want.Remaining, want.RetryAfterUS = max(0, p.Limit-count), end-c.at
	}
	if after > 0 {
		want.ResetAfterUS = end - c.at
	}
	return want
}

// TestFixedWindowAnchoredAtFirstRequest compares an anchored window with a
// reference: a window opens at the first admitted unit after the previous
// one closed and holds at most limit units for period.
func TestFixedWindowAnchoredAtFirstRequest(t *testing.T) {
	for _, rc := range ruleConfigs {
		if !rc.p.AnchorFirstRequest {
			continue
		}
		p := rc.p
		t.Run(rc.name, func(t *testing.T) {
			forEachSequence(t, rc.name, p, func(t *testing.T, checks []check, outs []Outcome) {
				var open bool
				var start, count int64
				for i, c := range checks {
					live := open && c.at < start+p.PeriodUS
					current, end := int64(0), c.at+p.PeriodUS
					if live {
						current, end = count, start+p.PeriodUS
					}
					want := fixedWindowAnswer(p, c, current, end)
					if got := outs[i].Results[0]; got != want {
						t.Fatalf("check %d %+v: got %+v, want %+v", i, c, got, want)
					}
					if consumed(c, outs[i]) {
						if !live {
							open, start, count = true, c.at, 0
						}
						count += c.cost
					}
				}
			})
		})
	}
}

// TestSlidingWindowCounterFollowsItsEstimate recomputes the estimate from
// the admitted history (previous and current epoch window) and finds retry
// and reset by searching time, independently of the closed forms in the
// implementation. No fixed window ever holds more than limit.
func TestSlidingWindowCounterFollowsItsEstimate(t *testing.T) {
	for _, rc := range ruleConfigs {
		if rc.p.Algorithm != SlidingWindowCounter {
			continue
		}
		p := rc.p
		period := p.PeriodUS
		t.Run(rc.name, func(t *testing.T) {
			forEachSequence(t, rc.name, p, func(t *testing.T, checks []check, outs []Outcome) {
				perWindow := map[int64]int64{}
				// weighted returns estimate × period at now.
				weighted := func(now int64) int64 {
					index := FloorDiv(now, period)
					return perWindow[index-1]*(period-(now-index*period)) + perWindow[index]*period
				}
				fits := func(now, cost int64) bool { return weighted(now)+cost*period <= p.Limit*period }
				// lastNonEmpty is the newest window holding units.
				lastNonEmpty := func() (int64, bool) {
					var last int64
					found := false
					for w, n := range perWindow {
						if n > 0 && (!found || w > last) {
							last, found = w, true
						}
					}
					return last, found
				}
				for i, c := range checks {
					want := Result{Allowed: c.cost <= p.Limit && fits(c.at, c.cost)}
					switch {
					case want.Allowed:
						want.Remaining = FloorDiv(p.Limit*period-weighted(c.at)-c.cost*period, period)
					case c.cost > p.Limit:
						want.Remaining, want.RetryAfterUS = max(0, FloorDiv(p.Limit*period-weighted(c.at), period)), -1
					default:
						want.Remaining = max(0, FloorDiv(p.Limit*period-weighted(c.at), period))
						// The estimate never grows without admissions: search.
						lo, hi := int64(1), 2*period
						for lo < hi {
							mid := lo + (hi-lo)/2
							if fits(c.at+mid, c.cost) {
								hi = mid
							} else {
								lo = mid + 1
							}
						}
						want.RetryAfterUS = lo
					}
					// reset_after describes the state as if this check was taken
					// (a dry run reports what it would have done).
					index := FloorDiv(c.at, period)
					taken := int64(0)
					if want.Allowed {
						taken = c.cost
					}
					perWindow[index] += taken
					if last, ok := lastNonEmpty(); ok && (last+2)*period > c.at {
						want.ResetAfterUS = (last+2)*period - c.at
					}
					if c.dry {
						perWindow[index] -= taken
					}
					if got := outs[i].Results[0]; got != want {
						t.Fatalf("check %d %+v: got %+v, want %+v", i, c, got, want)
					}
					if perWindow[index] > p.Limit {
						t.Fatalf("window %d holds %d units, limit %d", index, perWindow[index], p.Limit)
					}
				}
			})
		})
	}
}

// TestCellRateBoundHolds: GCRA, token bucket and policing leaky bucket
// admit at most burst + d/T units in any interval of length d (T the
// emission interval).
func TestCellRateBoundHolds(t *testing.T) {
	for _, rc := range ruleConfigs {
		switch {
		case rc.p.Algorithm == GCRA, rc.p.Algorithm == TokenBucket && rc.p.Limit > 0,
			rc.p.Algorithm == LeakyBucket && !rc.p.Shape:
		default:
			continue
		}
		p := rc.p
		interval, burst := p.EmissionInterval(), p.EffectiveBurst()
		t.Run(rc.name, func(t *testing.T) {
			forEachSequence(t, rc.name, p, func(t *testing.T, checks []check, outs []Outcome) {
				var admitted []unit
				for i, c := range checks {
					if consumed(c, outs[i]) {
						admitted = append(admitted, unit{c.at, c.cost})
					}
				}
				for i := range admitted {
					var units int64
					for j := i; j < len(admitted); j++ {
						units += admitted[j].cost
						d := admitted[j].at - admitted[i].at
						if bound := burst + d/interval; units > bound {
							t.Fatalf("%d units admitted in %dµs, bound %d", units, d, bound)
						}
					}
				}
			})
		})
	}
}

// TestShapingReleasesEvenly: a shaping leaky bucket releases each admitted
// request (at now + delay) exactly one emission interval per unit after
// the previous release, or at once when the queue is empty, and never
// holds a request longer than the queue.
func TestShapingReleasesEvenly(t *testing.T) {
	for _, rc := range ruleConfigs {
		if !rc.p.Shape {
			continue
		}
		p := rc.p
		interval, burst := p.EmissionInterval(), p.EffectiveBurst()
		t.Run(rc.name, func(t *testing.T) {
			forEachSequence(t, rc.name, p, func(t *testing.T, checks []check, outs []Outcome) {
				var next int64 // when the queue is free again
				for i, c := range checks {
					r := outs[i].Results[0]
					if !r.Allowed || c.cost == 0 {
						continue
					}
					if want := max(next, c.at) - c.at; r.DelayUS != want {
						t.Fatalf("check %d %+v: delay %d, want %d", i, c, r.DelayUS, want)
					}
					if r.DelayUS > (burst-c.cost)*interval {
						t.Fatalf("check %d: delay %d exceeds the queue", i, r.DelayUS)
					}
					if !c.dry {
						next = c.at + r.DelayUS + c.cost*interval
					}
				}
			})
		})
	}
}

// TestResultsAreExact checks, for every check of every sequence, that the
// numbers a caller acts on are neither early nor late:
//   - retry_after: the same request passes at now + retry and not 1 µs
//     earlier;
//   - remaining: exactly that many units would pass right now;
//   - reset_after: the state is as good as empty at now + reset and not
//     1 µs earlier (0 means empty now).
func TestResultsAreExact(t *testing.T) {
	for _, rc := range ruleConfigs {
		p := rc.p
		t.Run(rc.name, func(t *testing.T) {
			for seed := range uint64(propertySeeds) {
				checks := genChecks(seeded(rc.name+"/exact", seed), p, 500, false)
				var st *State
				for i, c := range checks {
					d := Evaluate(p, st, c.at, c.cost)
					fail := func(format string, args ...any) {
						t.Fatalf("seed %d, check %d %+v → %+v: %s", seed, i, c, d.Result, fmt.Sprintf(format, args...))
					}
					after := st
					if d.Allowed && d.Next() != nil {
						after = d.Next()
					}
					if retry := d.RetryAfterUS; !d.Allowed && retry > 0 {
						if !Evaluate(p, st, c.at+retry, c.cost).Allowed {
							fail("denied at now + retry")
						}
						if Evaluate(p, st, c.at+retry-1, c.cost).Allowed {
							fail("allowed 1 µs before now + retry")
						}
					}
					if r := d.Remaining; !Evaluate(p, after, c.at, r).Allowed || Evaluate(p, after, c.at, r+1).Allowed {
						fail("remaining %d is not the number of units that fit now", r)
					}
					if reset := d.ResetAfterUS; reset >= 0 {
						at := c.at + reset
						for _, cost := range []int64{0, 1, capacity(p)} {
							if got, fresh := Evaluate(p, after, at, cost).Result, Evaluate(p, nil, at, cost).Result; got != fresh {
								fail("not empty at now + reset (cost %d): %+v, empty %+v", cost, got, fresh)
							}
						}
						if reset > 0 && Evaluate(p, after, at-1, 0).Remaining == Evaluate(p, nil, at-1, 0).Remaining {
							fail("already empty 1 µs before now + reset")
						}
					}
					if !c.dry {
						st = after
					}
				}
			}
		})
	}
}

// overCapacity returns costs that can never fit p.
func overCapacity(p Params) []int64 {
	return append([]int64{capacity(p) + 1, 2*capacity(p) + 3}, hugeCosts...)
}

// TestCostAboveCapacityNeverPasses asks every store, at random points of a
// sequence, for costs above capacity (up to MaxInt64, where Go arithmetic
// would overflow): always denied with retry -1, and nothing consumed, so
// the sequence's own checks decide as they do without the probes.
func TestCostAboveCapacityNeverPasses(t *testing.T) {
	forEachStore(t, stores(), func(t *testing.T, rc ruleConfig, sc storeCase, store openStore) {
		r := seeded(rc.name+"/over", 0)
		checks := genChecks(r, rc.p, 60, false)
		want := replay(t, newModel(), single("k", rc.p), checks)
		var probed []check
		original := map[int]int{} // index in probed → index in checks
		for i, c := range checks {
			original[len(probed)] = i
			probed = append(probed, c)
			for _, cost := range overCapacity(rc.p) {
				if r.IntN(3) == 0 {
					probed = append(probed, check{at: c.at, cost: cost})
				}
			}
		}
		got := replayWatching(t, store, single(store.ns+"k", rc.p), probed)
		for i, c := range probed {
			j, ok := original[i]
			if !ok {
				if res := got[i].Results[0]; res.Allowed || res.RetryAfterUS != -1 {
					t.Fatalf("%s: cost %d at %+dµs: got %+v, want denied with retry -1", sc.name, c.cost, c.at-checks[0].at, res)
				}
				continue
			}
			if err := sameOutcomes(got[i:i+1], want[j:j+1], checks[j:j+1]); err != nil {
				t.Fatalf("%s: check %d among the probes: %v", sc.name, j, err)
			}
		}
	})
}

// TestRejectedAndPeekingChecksConsumeNothing: removing every check that
// was denied, was a dry run or cost 0 from a sequence changes no other
// outcome; on Redis each of those checks leaves every key byte for byte
// as it was, expiry included.
func TestRejectedAndPeekingChecksConsumeNothing(t *testing.T) {
	forEachStore(t, stores(), func(t *testing.T, rc ruleConfig, sc storeCase, store openStore) {
		checks := genChecks(seeded(rc.name+"/nothing", 0), rc.p, 150, false)
		// Probe between checks with peeks and dry runs of any cost.
		r := seeded(rc.name+"/probes", 0)
		var probed []check
		for i, c := range checks {
			probed = append(probed, c)
			if r.IntN(2) == 0 {
				at := c.at
				if i+1 < len(checks) {
					at += r.Int64N(checks[i+1].at - c.at + 1)
				}
				probe := check{at: at, cost: 0}
				if r.IntN(2) == 0 {
					probe = check{at: at, cost: 1 + r.Int64N(capacity(rc.p)+1), dry: true}
				}
				probed = append(probed, probe)
			}
		}
		all := replayWatching(t, store, single(store.ns+"a", rc.p), probed)
		var kept []check
		var keptOuts []Outcome
		for i, c := range probed {
			if consumed(c, all[i]) {
				kept = append(kept, c)
				keptOuts = append(keptOuts, all[i])
			}
		}
		got := replay(t, store, single(store.ns+"b", rc.p), kept)
		if err := sameOutcomes(got, keptOuts, kept); err != nil {
			t.Errorf("%s: without the checks that consume nothing: %v", sc.name, err)
		}
	})
}

// replayWatching is replay that, on Redis, reads every key of the batch
// before and after each check and fails when a check that admits nothing
// (denied, dry run or cost 0) changed any of them.
func replayWatching(t testing.TB, store openStore, reqs []Request, checks []check) []Outcome {
	t.Helper()
	if store.rdb == nil {
		return replay(t, store, reqs, checks)
	}
	keys := keysOf(reqs)
	outs := make([]Outcome, len(checks))
	for i, c := range checks {
		before := rawKeys(t, store.rdb, keys)
		out, err := store.Check(context.Background(), Batch{Requests: reqs, Cost: c.cost, DryRun: c.dry, NowUS: c.at})
		if err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		outs[i] = out
		if consumed(c, out) {
			continue
		}
		if after := rawKeys(t, store.rdb, keys); !slices.Equal(after, before) {
			t.Fatalf("check %d %+v admitted nothing (%+v) but changed keys:\nbefore %+v\nafter  %+v", i, c, out, before, after)
		}
	}
	return outs
}
