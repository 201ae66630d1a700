package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testenv"
)

// storeCase names a store under test and makes a fresh key prefix for it.
type storeCase struct {
	name string
	// open returns the store and a unique key namespace with a hash tag.
	open func(t *testing.T) (Store, string)
}

// epoch is an arbitrary, realistic start time for injected clocks.
const epoch int64 = 1_767_225_600_000_000 // 2026-01-01T00:00:00Z

func stores() []storeCase {
	return []storeCase{
		{"memory", func(t *testing.T) (Store, string) {
			return NewMemoryStore(func() int64 { panic("tests inject time") }), "{m}:"
		}},
		{"redis", func(t *testing.T) (Store, string) {
			c, prefix := testenv.Redis(t)
			s := NewRedisStore(c)
			s.ExtraTTL = time.Minute
			return s, prefix + "{r}:"
		}},
		{"cluster", func(t *testing.T) (Store, string) {
			c, prefix := testenv.RedisCluster(t)
			s := NewRedisStore(c)
			s.ExtraTTL = time.Minute
			return s, prefix + "{c}:"
		}},
	}
}

// step is one row of a vector table: at t (µs after epoch) a check of cost
// expects the result.
type step struct {
	t    int64
	cost int64
	want Result
}

func runVector(t *testing.T, p Params, steps []step) {
	t.Helper()
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			store, ns := sc.open(t)
			for i, s := range steps {
				out, err := store.Check(context.Background(), Batch{
					Requests: []Request{{Key: ns + "k", Params: p}},
					Cost:     s.cost,
					NowUS:    epoch + s.t,
				})
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := out.Results[0]; got != s.want {
					t.Errorf("step %d (t=%dµs cost=%d): got %+v, want %+v", i, s.t, s.cost, got, s.want)
				}
				if out.Admitted != s.want.Allowed {
					t.Errorf("step %d: admitted %v, want %v", i, out.Admitted, s.want.Allowed)
				}
			}
		})
	}
}

const ms = int64(1000)

func allow(remaining, resetAfter int64) Result {
	return Result{Allowed: true, Remaining: remaining, ResetAfterUS: resetAfter}
}

func deny(remaining, retryAfter, resetAfter int64) Result {
	return Result{Remaining: remaining, RetryAfterUS: retryAfter, ResetAfterUS: resetAfter}
}

// TestGCRAVectors is the table of design/algorithms.md: 10/s, burst 5.
func TestGCRAVectors(t *testing.T) {
	p := Params{Algorithm: GCRA, Limit: 10, PeriodUS: Second, Burst: 5}
	runVector(t, p, []step{
		{0, 1, allow(4, 100*ms)},
		{0, 1, allow(3, 200*ms)},
		{0, 1, allow(2, 300*ms)},
		{0, 1, allow(1, 400*ms)},
		{0, 1, allow(0, 500*ms)},
		{0, 1, deny(0, 100*ms, 500*ms)},
		{50 * ms, 1, deny(0, 50*ms, 450*ms)},
		{100 * ms, 1, allow(0, 500*ms)},
		{350 * ms, 1, allow(1, 350*ms)},
		{350 * ms, 0, allow(1, 350*ms)},
		{1000 * ms, 1, allow(4, 100*ms)},
		{1000 * ms, 6, deny(4, -1, 100*ms)},
	})
}
