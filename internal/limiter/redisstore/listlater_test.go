package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/testenv"
)

// unlistable returns a store on the test Cluster whose index of holds
// refuses every hold (it holds a string, so ZADD fails), logging to the
// buffer returned, and a check that opens hold n of one tag.
func unlistable(t *testing.T) (*Store, *testenv.LogBuffer, func(n int) error) {
	t.Helper()
	ctx := context.Background()
	cluster, prefix := testenv.RedisCluster(t)
	logs := &testenv.LogBuffer{}
	s := New(cluster)
	s.HoldIndex = prefix + "holds"
	s.Log = slog.New(slog.NewTextHandler(logs, nil))
	testenv.Must(t, cluster.Set(ctx, s.HoldIndex, "not a sorted set", 0).Err())
	tag := prefix + "{h}"
	hold := func(n int) error {
		h := &limiter.Hold{ID: fmt.Sprint(tag, n), Key: fmt.Sprint(tag, "hold", n), TTLUS: limiter.HourUS}
		out, err := s.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: tag + "w", Params: replicaWindow}}, Cost: 1, Hold: h})
		if !out.Admitted || !errors.Is(err, limiter.ErrHoldNotListed) {
			return fmt.Errorf("hold %d: admitted %v, err %v; want admitted with ErrHoldNotListed", n, out.Admitted, err)
		}
		return nil
	}
	return s, logs, hold
}

// listingNow returns how many holds s is listing in the background.
func listingNow(s *Store) int {
	s.background.mu.Lock()
	defer s.background.mu.Unlock()
	return len(s.background.listing)
}

// TestAHoldNeverListedIsLogged: a hold the index keeps refusing is tried
// for listLaterFor (of an injected clock that each wait moves on), then
// given up with an error line naming the hold, its expiry, the index and
// the last error: it will not expire unless settled.
func TestAHoldNeverListedIsLogged(t *testing.T) {
	s, logs, hold := unlistable(t)
	clock := testenv.NewClock(time.Unix(1_800_000_000, 0))
	var attempts atomic.Int64
	s.background.now = clock.Now
	s.background.sleep = func(ctx context.Context, d time.Duration) error {
		attempts.Add(1)
		clock.Advance(d)
		return ctx.Err()
	}
	t.Cleanup(s.Close)
	testenv.Must(t, hold(1))
	testenv.Eventually(t, time.Now(), 30*time.Second, "the listing given up", func() (bool, string) {
		return listingNow(s) == 0 && strings.Contains(logs.String(), "gave up"), logs.String()
	})
	line := logs.String()
	for _, want := range []string{"level=ERROR", `msg="redisstore: hold not listed for expiry`, `reason="gave up after 10m0s"`,
		"index=" + s.HoldIndex, "hold_key=" + strings.Replace(s.HoldIndex, "holds", "{h}hold1", 1), "expire_us=", "WRONGTYPE"} {
		if !strings.Contains(line, want) {
			t.Errorf("log %q does not contain %q", line, want)
		}
	}
	// Waits of 50 ms doubling to 5 s: 7 before the cap, then 5 s each.
	if n, want := attempts.Load(), int64(7+(listLaterFor-6350*time.Millisecond)/maxListWait+1); n != want {
		t.Errorf("%d attempts in %v; want %d", n, listLaterFor, want)
	}
}

// TestHoldsPastTheBoundAreLoggedAndCloseStopsTheListing: past the bound
// of holds listed at once, a hold is not tried at all and is logged,
// each with its key (the key lists it by hand);
// Close ends the goroutines still listing, waits for them and logs their
// holds as not listed, and a hold after Close is not tried.
func TestHoldsPastTheBoundAreLoggedAndCloseStopsTheListing(t *testing.T) {
	s, logs, hold := unlistable(t)
	clock := testenv.NewClock(time.Unix(1_800_000_000, 0))
	var waiting atomic.Int64
	s.background.now = clock.Now
	s.background.max = 2
	// Every wait lasts until Close: the listing never ends by itself.
	s.background.sleep = func(ctx context.Context, _ time.Duration) error {
		waiting.Add(1)
		defer waiting.Add(-1)
		<-ctx.Done()
		return ctx.Err()
	}
	for n := 1; n <= 2; n++ {
		testenv.Must(t, hold(n))
	}
	testenv.WaitFor(t, 10*time.Second, "both listings waiting", func() bool { return waiting.Load() == 2 })
	for n := 3; n <= 5; n++ { // past the bound: each logged, with its key
		testenv.Must(t, hold(n))
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("log %q; want 3 lines", logs.String())
	}
	for i, want := range [][]string{{"hold3"}, {"hold4"}, {"hold5"}} {
		for _, w := range append(want, "level=ERROR", `reason="2 holds are being listed already"`) {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q does not contain %q", i, lines[i], w)
			}
		}
	}

	s.Close()
	if n, w := listingNow(s), waiting.Load(); n != 0 || w != 0 {
		t.Errorf("after Close: %d holds listed, %d goroutines waiting; want none", n, w)
	}
	lines = strings.Split(strings.TrimSpace(logs.String()), "\n")[3:]
	if len(lines) != 2 || !strings.Contains(strings.Join(lines, ""), "hold1") || !strings.Contains(strings.Join(lines, ""), "hold2") {
		t.Fatalf("log after Close %q; want a line for each of hold1 and hold2", lines)
	}
	for _, line := range lines {
		if !strings.Contains(line, `reason="the store closed"`) {
			t.Errorf("line %q does not say the store closed", line)
		}
	}
	testenv.Must(t, hold(6))
	if waiting.Load() != 0 || listingNow(s) != 0 || !strings.Contains(logs.String(), "hold6") {
		t.Errorf("a hold after Close was tried in the background, or not logged: %q", logs.String())
	}
	s.Close() // again: nothing more
}
