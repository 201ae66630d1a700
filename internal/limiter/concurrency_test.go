package limiter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	. "github.com/tollgate/tollgate/internal/limiter"
)

// TestConcurrentChecksOnOneKeyAdmitExactlyTheLimit fires many checks on
// one key at once from many goroutines, with Redis's own clock (as in
// production), through every Redis store: batching stores put many of
// them in one script call. Exactly the limit is admitted. With two rules
// of one check, the tighter one decides and the other is charged exactly
// for the checks admitted (all-or-nothing inside a batch too).
func TestConcurrentChecksOnOneKeyAdmitExactlyTheLimit(t *testing.T) {
	const goroutines, perGoroutine = 50, 8
	for _, sc := range redisStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			store := sc.open(t)
			hourly := Params{Algorithm: GCRA, Limit: 100, PeriodUS: HourUS}
			window := Params{Algorithm: FixedWindow, Limit: 30, PeriodUS: 366 * DayUS}
			for _, tc := range []struct {
				name string
				reqs []Request
				want int64
			}{
				{"one rule", single(store.ns+"one", Params{Algorithm: GCRA, Limit: 60, PeriodUS: HourUS}), 60},
				{"two rules", []Request{{Key: store.ns + "hourly", Params: hourly}, {Key: store.ns + "window", Params: window}}, 30},
			} {
				var admitted atomic.Int64
				var wg sync.WaitGroup
				start := make(chan struct{})
				for range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						for range perGoroutine {
							out, err := store.Check(context.Background(), Batch{Requests: tc.reqs, Cost: 1})
							if err != nil {
								t.Error(err)
								return
							}
							if out.Admitted {
								admitted.Add(1)
							}
						}
					}()
				}
				close(start)
				wg.Wait()
				if got := admitted.Load(); got != tc.want {
					t.Errorf("%s: %d of %d admitted, want exactly %d", tc.name, got, goroutines*perGoroutine, tc.want)
				}
				if len(tc.reqs) == 2 {
					out, err := store.Check(context.Background(), Batch{Requests: tc.reqs[:1]})
					if err != nil {
						t.Fatal(err)
					}
					if got, want := out.Results[0].Remaining, hourly.Limit-tc.want; got != want {
						t.Errorf("%s: hourly remaining %d, want %d (charged only for admitted checks)", tc.name, got, want)
					}
				}
			}
		})
	}
}

// TestBatchingStoresAgreeWithModelUnderConcurrency replays one sequence
// per key from many goroutines at once through the batching stores, so
// that checks of different keys, times and costs share script calls. Each
// key's outcomes must equal the model's for its sequence.
func TestBatchingStoresAgreeWithModelUnderConcurrency(t *testing.T) {
	for _, sc := range redisStores()[2:] {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			store := sc.open(t)
			var wg sync.WaitGroup
			for _, rc := range ruleConfigs {
				for seed := range uint64(4) {
					wg.Add(1)
					go func() {
						defer wg.Done()
						checks := genChecks(seeded(rc.name+"/concurrent", seed), rc.p, 150, seed%2 == 1)
						key := fmt.Sprintf("%s%s-%d", store.ns, rc.name, seed)
						want := replay(t, newModel(), single(key, rc.p), checks)
						got := replay(t, store, single(key, rc.p), checks)
						if err := sameOutcomes(got, want, checks); err != nil {
							t.Errorf("%s, seed %d: %v", rc.name, seed, err)
						}
					}()
				}
			}
			wg.Wait()
		})
	}
}

// TestReportedStateDecidesAsTheStore: when a check is not admitted and
// the batch asked, every store reports the state each rule was decided
// on; Decide on that state, at the same time and cost, gives exactly the
// store's result, and so does any later check of the same key that the
// store has not been asked meanwhile.
func TestReportedStateDecidesAsTheStore(t *testing.T) {
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			store := sc.open(t)
			for _, rc := range ruleConfigs {
				for seed := range uint64(2) {
					key := fmt.Sprintf("%sstate-%s-%d", store.ns, rc.name, seed)
					checks := genChecks(seeded(rc.name+"/state", seed), rc.p, 200, false)
					denials := 0
					for i, c := range checks {
						b := Batch{Requests: single(key, rc.p), Cost: c.cost, DryRun: c.dry, NowUS: c.at, ReportState: true}
						out, err := store.Check(context.Background(), b)
						if err != nil {
							t.Fatal(err)
						}
						if out.Admitted {
							if out.States != nil {
								t.Fatalf("%s check %d: states reported for an admitted check", rc.name, i)
							}
							continue
						}
						if len(out.States) != 1 {
							t.Fatalf("%s check %d: %d states, want 1", rc.name, i, len(out.States))
						}
						st := out.States[0]
						if !st.Known {
							if rc.p.Algorithm != SlidingWindowLog {
								t.Fatalf("%s check %d: state not known", rc.name, i)
							}
							continue
						}
						denials++
						if got := Decide(rc.p, st, c.at, c.cost); got != out.Results[0] {
							t.Fatalf("%s check %d %+v: Decide on the reported state %+v gives %+v, the store %+v", rc.name, i, c, st, got, out.Results[0])
						}
						// Peeking does not change the state: a peek at a later
						// time agrees with Decide on the same state.
						later := c.at + 1 + int64(i)*997%(rc.p.PeriodUS+1)
						peek, err := store.Check(context.Background(), Batch{Requests: single(key, rc.p), Cost: c.cost, DryRun: true, NowUS: later})
						if err != nil {
							t.Fatal(err)
						}
						if got := Decide(rc.p, st, later, c.cost); got != peek.Results[0] {
							t.Fatalf("%s check %d: at %d Decide gives %+v, the store %+v", rc.name, i, later, got, peek.Results[0])
						}
					}
					if denials == 0 && rc.p.Algorithm != SlidingWindowLog {
						t.Errorf("%s seed %d: no denial to check", rc.name, seed)
					}
				}
			}
		})
	}
}
