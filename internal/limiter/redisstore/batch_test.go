package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestLingerOnlyWhenBusy: a batching store with a linger sends a lone
// check out at once while checks arrive less often than twice per linger
// (arrival times come from an injected clock); when they arrive more
// often, a lone check waits for as many as the rate promises and goes out
// with them as soon as they are there; and every check is decided
// exactly: of checks from many goroutines on one GCRA key, exactly its
// burst are admitted.
func TestLingerOnlyWhenBusy(t *testing.T) {
	c, prefix := testenv.Redis(t)
	// A linger longer than the checks' deadline: a check that waited it
	// out would fail, so each must be sent when company arrives.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := NewBatching(c, BatchConfig{Linger: 20 * time.Second})
	s.ExtraTTL = time.Minute
	var clock atomic.Int64 // ns from start
	start := time.Now()
	s.batcher.clock = func() time.Time { return start.Add(time.Duration(clock.Load())) }
	check := func(key string, gap time.Duration) limiter.Outcome {
		t.Helper()
		clock.Add(int64(gap))
		out, err := s.Check(ctx, limiter.Batch{Cost: 1, Requests: []limiter.Request{{
			Key:    prefix + key,
			Params: limiter.Params{Algorithm: limiter.GCRA, Limit: 100, PeriodUS: limiter.HourUS},
		}}})
		if err != nil {
			t.Error(err) // not Fatal: callers run in goroutines too
		}
		return out
	}

	// Quiet: an arrival every 15 s, more than half the linger apart.
	for range 20 {
		check("quiet", 15*time.Second)
	}
	if calls := s.batcher.calls.Load(); calls != 20 {
		t.Fatalf("quiet: %d calls for 20 lone checks; want one each", calls)
	}
	if s.batcher.meanGap <= 10*time.Second {
		t.Fatalf("quiet: mean gap %v, want > 10s", s.batcher.meanGap)
	}

	// Company: arrivals 6 s apart on average promise 4 checks a linger
	// (the first and three more); the first waits, and goes out with the
	// other three the moment the third has queued.
	s.batcher.meanGap = 6 * time.Second
	s.batcher.calls.Store(0)
	lingering := func() bool {
		s.batcher.mu.Lock()
		defer s.batcher.mu.Unlock()
		return s.batcher.lingering
	}
	var wg sync.WaitGroup
	wg.Go(func() { check("company", 6*time.Second) })
	testenv.WaitFor(t, 5*time.Second, "the first check to linger", lingering)
	for range 3 {
		wg.Go(func() { check("company", 6*time.Second) })
	}
	wg.Wait()
	if calls := s.batcher.calls.Load(); calls != 1 {
		t.Fatalf("company: %d calls for 4 checks, want 1", calls)
	}

	// Busy: 8 callers, an arrival every 100 µs, a linger of 2 ms.
	s.batcher.mu.Lock()
	s.batcher.linger = 2 * time.Millisecond
	s.batcher.mu.Unlock()
	s.batcher.calls.Store(0)
	var admitted atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 40 {
				if check("busy", 100*time.Microsecond).Admitted {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n != 100 {
		t.Fatalf("busy: %d of 320 checks admitted, want exactly the burst, 100", n)
	}
	if calls := s.batcher.calls.Load(); calls*2 > 320 {
		t.Fatalf("busy: %d calls for 320 checks; want them shared (at most 160)", calls)
	}
	t.Logf("busy: %d calls for 320 checks", s.batcher.calls.Load())
}

// TestLingerWithTwoLanes: with two calls under way at most, a check that
// arrives while another lingers takes it along in the other lane; the
// lingering one is decided in that call, does not wait out its linger
// (longer than the checks' deadline), and frees its lane.
func TestLingerWithTwoLanes(t *testing.T) {
	c, prefix := testenv.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := NewBatching(c, BatchConfig{Linger: 20 * time.Second, MaxInFlight: 2})
	s.ExtraTTL = time.Minute
	s.batcher.meanGap = time.Second // a rate that promises company
	check := func() {
		_, err := s.Check(ctx, limiter.Batch{Cost: 1, Requests: []limiter.Request{{
			Key: prefix + "k", Params: limiter.Params{Algorithm: limiter.GCRA, Limit: 100, PeriodUS: limiter.HourUS},
		}}})
		if err != nil {
			t.Error(err)
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(check)
	testenv.WaitFor(t, 5*time.Second, "the first check to linger", func() bool {
		s.batcher.mu.Lock()
		defer s.batcher.mu.Unlock()
		return s.batcher.lingering
	})
	wg.Go(check)
	wg.Wait()
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("the lingering check returned after %v: it waited out its 20 s linger", waited)
	}
	s.batcher.mu.Lock()
	defer s.batcher.mu.Unlock()
	if s.batcher.busy != 0 || s.batcher.lingering {
		t.Fatalf("after both checks: %d lanes busy, lingering %v; want 0, false", s.batcher.busy, s.batcher.lingering)
	}
}
