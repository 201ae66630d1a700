package limiter_test

import (
	"context"
	"sync"
	"testing"

	. "github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/testenv"
)

// Classic limiter behaviours, each a named test on every store.

func TestCapacity3Refilled1PerSecondAdmits3DeniesFourth(t *testing.T) {
	p := Params{Algorithm: TokenBucket, Limit: 1, PeriodUS: SecondUS, Burst: 3}
	runVector(t, p, []step{
		{0, 1, allow(2, 1*SecondUS)},
		{0, 1, allow(1, 2*SecondUS)},
		{0, 1, allow(0, 3*SecondUS)},
		{0, 1, deny(0, 1*SecondUS, 3*SecondUS)},
		{1 * SecondUS, 1, allow(0, 3*SecondUS)},
	})
}

func TestCapacity1Refilled10PerSecondAdmitsAgain100msLater(t *testing.T) {
	p := Params{Algorithm: TokenBucket, Limit: 10, PeriodUS: SecondUS, Burst: 1}
	runVector(t, p, []step{
		{0, 1, allow(0, 100*ms)},
		{0, 1, deny(0, 100*ms, 100*ms)},
		{100*ms - 1, 1, deny(0, 1, 1)},
		{100 * ms, 1, allow(0, 100*ms)},
	})
}

func TestCost5OnCapacity10AdmitsTwo(t *testing.T) {
	// The buckets (and GCRA) refill continuously, the windows at their
	// end.
	bucket := [3]Result{allow(5, 500*ms), allow(0, 1000*ms), deny(0, 500*ms, 1000*ms)}
	window := [3]Result{allow(5, 1000*ms), allow(0, 1000*ms), deny(0, 1000*ms, 1000*ms)}
	tests := []struct {
		p    Params
		want [3]Result
	}{
		{Params{Algorithm: GCRA, Limit: 10, PeriodUS: SecondUS}, bucket},
		{Params{Algorithm: TokenBucket, Limit: 10, PeriodUS: SecondUS}, bucket},
		{Params{Algorithm: LeakyBucket, Limit: 10, PeriodUS: SecondUS}, bucket},
		{Params{Algorithm: LeakyBucket, Limit: 10, PeriodUS: SecondUS, Shape: true},
			[3]Result{delayed(5, 500*ms, 0), delayed(0, 1000*ms, 500*ms), deny(0, 500*ms, 1000*ms)}},
		{Params{Algorithm: FixedWindow, Limit: 10, PeriodUS: SecondUS}, window},
		{Params{Algorithm: SlidingWindowLog, Limit: 10, PeriodUS: SecondUS}, window},
		{Params{Algorithm: SlidingWindowCounter, Limit: 10, PeriodUS: SecondUS},
			[3]Result{allow(5, 2000*ms), allow(0, 2000*ms), deny(0, 1500*ms, 2000*ms)}},
	}
	for _, tt := range tests {
		name := string(tt.p.Algorithm)
		if tt.p.Shape {
			name += "-shape"
		}
		t.Run(name, func(t *testing.T) {
			runVector(t, tt.p, []step{{0, 5, tt.want[0]}, {0, 5, tt.want[1]}, {0, 5, tt.want[2]}})
		})
	}
}

func TestShaping5SimultaneousAt2PerSecond(t *testing.T) {
	p := Params{Algorithm: LeakyBucket, Limit: 2, PeriodUS: SecondUS, Burst: 5, Shape: true}
	runVector(t, p, []step{
		{0, 1, delayed(4, 500*ms, 0)},
		{0, 1, delayed(3, 1000*ms, 500*ms)},
		{0, 1, delayed(2, 1500*ms, 1000*ms)},
		{0, 1, delayed(1, 2000*ms, 1500*ms)},
		{0, 1, delayed(0, 2500*ms, 2000*ms)},
	})
}

func TestShapingQueueOf2At1PerSecondTakesTwoOfThree(t *testing.T) {
	p := Params{Algorithm: LeakyBucket, Limit: 1, PeriodUS: SecondUS, Burst: 2, Shape: true}
	runVector(t, p, []step{
		{0, 1, delayed(1, 1000*ms, 0)},
		{0, 1, delayed(0, 2000*ms, 1000*ms)},
		{0, 1, deny(0, 1000*ms, 2000*ms)},
	})
}

// TestFixedWindowAdmitsTwiceLimitAroundBoundary documents the known
// property of fixed windows: a full window's worth just before a boundary
// and another just after pass within 1 µs. The sliding algorithms refuse
// the second burst.
func TestFixedWindowAdmitsTwiceLimitAroundBoundary(t *testing.T) {
	tests := []struct {
		p      Params
		second Result
	}{
		{Params{Algorithm: FixedWindow, Limit: 5, PeriodUS: SecondUS}, allow(0, SecondUS)},
		{Params{Algorithm: SlidingWindowLog, Limit: 5, PeriodUS: SecondUS}, deny(0, SecondUS-1, SecondUS-1)},
		{Params{Algorithm: SlidingWindowCounter, Limit: 5, PeriodUS: SecondUS}, deny(0, SecondUS, SecondUS)},
	}
	for _, tt := range tests {
		t.Run(string(tt.p.Algorithm), func(t *testing.T) {
			runVector(t, tt.p, []step{
				{SecondUS - 1, 5, allow(0, resetAfterFirst(tt.p))},
				{SecondUS, 5, tt.second},
			})
		})
	}
}

func resetAfterFirst(p Params) int64 {
	switch p.Algorithm {
	case FixedWindow:
		return 1
	case SlidingWindowCounter:
		return SecondUS + 1
	}
	return SecondUS
}

// TestProPlanSearchBurstDeniesWithoutChargingHourly is the example plan of
// docs/algorithms.md: hourly GCRA 5000/hour burst 100 plus search-burst
// token bucket 10/second, in one check. When search-burst denies, hourly
// is not charged.
func TestProPlanSearchBurstDeniesWithoutChargingHourly(t *testing.T) {
	hourly := Params{Algorithm: GCRA, Limit: 5000, PeriodUS: HourUS, Burst: 100}
	search := Params{Algorithm: TokenBucket, Limit: 10, PeriodUS: SecondUS}
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			store := sc.open(t)
			ctx := context.Background()
			batch := Batch{Requests: []Request{
				{Key: store.ns + "hourly", Params: hourly},
				{Key: store.ns + "search-burst", Params: search},
			}, Cost: 1, NowUS: epoch}
			for i := range 10 {
				out, err := store.Check(ctx, batch)
				if err != nil {
					t.Fatal(err)
				}
				if !out.Admitted {
					t.Fatalf("search %d: got denied, want admitted", i+1)
				}
			}
			out, err := store.Check(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			if out.Admitted || out.Results[1].Allowed || !out.Results[0].Allowed {
				t.Fatalf("11th search: got %+v, want denied by search-burst only", out)
			}
			peek, err := store.Check(ctx, Batch{Requests: batch.Requests[:1], NowUS: epoch})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := peek.Results[0].Remaining, int64(90); got != want {
				t.Errorf("hourly remaining after 10 admitted and 1 denied search: got %d, want %d", got, want)
			}
		})
	}
}

// TestOneTimeAllowanceOf50UnderConcurrency sends real concurrent requests
// at a token bucket of capacity 50 that never refills: 50 concurrent
// requests are all admitted, each seeing a different remaining count, and
// then nothing more is; a fresh bucket hit by 200 at once admits exactly
// 50. Redis stores take the time from TIME, as in production.
func TestOneTimeAllowanceOf50UnderConcurrency(t *testing.T) {
	p := Params{Algorithm: TokenBucket, Limit: 0, PeriodUS: SecondUS, Burst: 50}
	cases := []storeCase{
		{"memory", func(testing.TB) openStore { return openStore{Store: NewMemoryStore(nil), ns: "{m}:"} }},
		redisStoreCase(), clusterStoreCase(),
	}
	for _, sc := range cases {
		t.Run(sc.name, func(t *testing.T) {
			store := sc.open(t)
			burst := func(key string, n int) []Outcome {
				t.Helper()
				outs := make([]Outcome, n)
				errs := make([]error, n)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						outs[i], errs[i] = store.Check(context.Background(), Batch{
							Requests: []Request{{Key: key, Params: p}}, Cost: 1,
						})
					}()
				}
				close(start)
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				return outs
			}

			first := burst(store.ns+"a", 50)
			seen := map[int64]bool{}
			for _, out := range first {
				if !out.Admitted {
					t.Fatalf("first 50: got a denial %+v, want all admitted", out.Results[0])
				}
				seen[out.Results[0].Remaining] = true
			}
			if got, want := len(seen), 50; got != want {
				t.Errorf("distinct remaining counts: got %d, want %d (checks were not serialized)", got, want)
			}
			for _, out := range burst(store.ns+"a", 50) {
				if got, want := out.Results[0], deny(0, -1, -1); got != want {
					t.Fatalf("after the allowance: got %+v, want %+v", got, want)
				}
			}

			admitted := 0
			for _, out := range burst(store.ns+"b", 200) {
				if out.Admitted {
					admitted++
				}
			}
			if admitted != 50 {
				t.Errorf("200 concurrent on a fresh bucket: got %d admitted, want 50", admitted)
			}
		})
	}
}

// TestTokenBucketEditedBetweenRefillingAndNot: a token bucket's rule
// edited from refilling to a one-time allowance (limit 0), or back, keeps
// its key, whose stored number meant something else under the old rule.
// Every store reads it as its own, at most full: a caller gets at most one
// burst, never an endless allowance, and the stores agree.
func TestTokenBucketEditedBetweenRefillingAndNot(t *testing.T) {
	refilling := Params{Algorithm: TokenBucket, Limit: 10, PeriodUS: SecondUS, Burst: 5}
	once := Params{Algorithm: TokenBucket, Limit: 0, PeriodUS: SecondUS, Burst: 5}
	used := func(remaining int64) Result { return Result{Allowed: true, Remaining: remaining, ResetAfterUS: -1} }
	spent := Result{ResetAfterUS: -1, RetryAfterUS: -1}
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			store := sc.open(t)
			check := func(key string, p Params, at int64) Result {
				t.Helper()
				out, err := store.Check(context.Background(), Batch{
					Requests: []Request{{Key: store.ns + key, Params: p}}, Cost: 1, NowUS: epoch + at})
				testenv.Must(t, err)
				return out.Results[0]
			}
			// Refilling, then a one-time allowance of 5: five more, then none.
			if got := check("a", refilling, 0); got != allow(4, 100*ms) {
				t.Fatalf("refilling: %+v", got)
			}
			for i, want := range []Result{used(4), used(3), used(2), used(1), used(0), spent, spent} {
				if got := check("a", once, ms); got != want {
					t.Errorf("allowance check %d: %+v, want %+v", i, got, want)
				}
			}
			// A hold of 0 on the allowance over a refilling state, settled
			// at 3: the allowance starts full, then loses 3.
			check("c", refilling, 0)
			hold := &Hold{Key: store.ns + "c-hold", TTLUS: HourUS}
			if out := mustCheck(t, store, Batch{Requests: single(store.ns+"c", once), Cost: 0, NowUS: epoch + ms, Hold: hold}); !out.Admitted {
				t.Fatalf("hold of 0: %+v", out)
			}
			_, err := store.Settle(context.Background(), Settle{Key: hold.Key, Cost: 3, NowUS: epoch + 2*ms})
			testenv.Must(t, err)
			if got := check("c", once, 3*ms); got != used(1) {
				t.Errorf("after a hold settled at 3 on a full allowance of 5: %+v, want %+v", got, used(1))
			}
			// An allowance with 2 left, then refilling: it starts full.
			for range 3 {
				check("b", once, 0)
			}
			if got := check("b", refilling, 0); got != allow(4, 100*ms) {
				t.Errorf("refilling after an allowance: %+v, want %+v", got, allow(4, 100*ms))
			}
		})
	}
}
