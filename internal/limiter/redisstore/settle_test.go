package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/testenv"
)

// scriptCounter counts the script calls a client makes (not those
// answered NOSCRIPT, which go again as EVAL; a test loads its scripts
// first all the same).
type scriptCounter struct{ n atomic.Int64 }

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(cmd)
		return err
	}
}

func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return err
	}
}

func (h *scriptCounter) count(cmd redis.Cmder) {
	name := cmd.Name()
	if (name == "evalsha" || name == "eval") && !redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		h.n.Add(1)
	}
}

// TestSettlementsShareACall: the checks, settlements and lease operations
// a batching store takes together go out in two script calls, the
// checks' and the operations', and each operation is answered as if it
// had been alone, in order, whatever credit terms the settlements before
// it carry: a repeat is repeated, another cost for a hold
// settled earlier in the call conflicts, a lease is renewed then
// released, and the window moves by each actual cost less its estimate
// once.
func TestSettlementsShareACall(t *testing.T) {
	for _, c := range testenv.RedisTopologies(t) {
		t.Run(c.Name, func(t *testing.T) {
			ctx := context.Background()
			counter := &scriptCounter{}
			c.Client.AddHook(counter)
			s := NewBatching(c.Client, BatchConfig{})
			window := limiter.Params{Algorithm: limiter.FixedWindow, Limit: 100, PeriodUS: limiter.HourUS}
			key := c.Prefix + "{t}w"
			check := func(cost int64, hold *limiter.Hold) *pending {
				return &pending{batch: limiter.Batch{Requests: []limiter.Request{{Key: key, Params: window}}, Cost: cost, Hold: hold}}
			}
			const holds = 10
			for i := range holds {
				hold := &limiter.Hold{Key: fmt.Sprintf("%s{t}h%d", c.Prefix, i), ID: fmt.Sprint(i), TTLUS: limiter.HourUS}
				out, err := s.Check(ctx, check(5, hold).batch)
				if err != nil || !out.Admitted {
					t.Fatalf("hold %d: %+v, %v", i, out, err)
				}
			}
			settle := func(i int, cost int64) *pending {
				return &pending{op: opSettle, opKey: fmt.Sprintf("%s{t}h%d", c.Prefix, i), opCost: cost}
			}
			settled := func(p *pending) (limiter.Settlement, string, error) {
				if p.err != nil {
					return limiter.Settlement{}, "", p.err
				}
				return decodeSettlement(p.reply)
			}
			// A lease of one slot of two, renewed and then released in
			// the call: the renewal goes first, as it was queued first.
			slots := limiter.Params{Algorithm: limiter.Concurrency, Limit: 2, PeriodUS: limiter.HourUS}
			leaseKey := c.Prefix + "{t}l"
			if out, err := s.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: c.Prefix + "{t}c", Params: slots}}, Cost: 1,
				Lease: &limiter.Lease{Key: leaseKey}}); err != nil || !out.Admitted {
				t.Fatalf("lease: %+v, %v", out, err)
			}
			renew := &pending{op: opRenew, opKey: leaseKey}
			release := &pending{op: opRelease, opKey: leaseKey}
			var run, settles []*pending
			for i := range holds {
				p := settle(i, int64(i+1))
				if i%2 == 1 {
					// Credit terms of some length (these holds draw on no
					// balance): the operations after them read their own
					// arguments all the same.
					p.opCredits = &limiter.Credits{Key: c.Prefix + "{t}c", Line: 5, Overdraft: 1, Overage: true,
						Expiring: make([]limiter.CreditExpiry, i%4)}
				}
				settles = append(settles, p)
			}
			repeat, conflict := settle(0, 1), settle(1, 3)
			checks := []*pending{check(1, nil), check(1, nil)}
			run = append(run, checks[0], settles[0], renew, settles[1], repeat, conflict, release)
			run = append(run, settles[2:]...)
			run = append(run, checks[1])
			// Load settle.lua where the holds are: settle one that is not.
			if _, err := s.Settle(ctx, limiter.Settle{Key: c.Prefix + "{t}none", Cost: 1}); !errors.Is(err, limiter.ErrHoldNotFound) {
				t.Fatalf("settling no hold: %v", err)
			}
			counter.n.Store(0)
			s.execute(run)
			if n := counter.n.Load(); n != 2 {
				t.Errorf("%d script calls, want 2: the checks', the operations'", n)
			}
			for i, p := range settles {
				got, id, err := settled(p)
				if err != nil || got.Cost != int64(i+1) || got.Status != limiter.HoldSettled || got.Repeated || id != fmt.Sprint(i) {
					t.Errorf("settlement %d: %+v (hold %q), %v", i, got, id, err)
				}
			}
			if got, _, err := settled(repeat); err != nil || !got.Repeated || got.Cost != 1 {
				t.Errorf("repeat: %+v, %v; want repeated at 1", got, err)
			}
			if _, _, err := settled(conflict); !errors.Is(err, limiter.ErrHoldConflict) {
				t.Errorf("another cost: %v, want ErrHoldConflict", err)
			}
			renewed, err := decodeLease(renew.reply)
			if renew.err != nil || err != nil || renewed[0] != 0 || renewed[2] <= renewed[1] {
				t.Errorf("renewal: %v, %v, %v; want the lease renewed", renewed, renew.err, err)
			}
			released, err := decodeLease(release.reply)
			if release.err != nil || err != nil || released[2] != 1 {
				t.Errorf("release: %v, %v, %v; want a slot freed", released, release.err, err)
			}
			for i, p := range checks {
				if p.err != nil || !p.out.Admitted {
					t.Errorf("check %d: %+v, %v", i, p.out, p.err)
				}
			}
			// 10 × 5 held, settled at 1 + … + 10 = 55, and 2 checked.
			out, err := s.Check(ctx, check(0, nil).batch)
			if err != nil || out.Results[0].Remaining != 100-57 {
				t.Errorf("the window after: %+v, %v; want 43 left", out, err)
			}
		})
	}
}

// TestSettlementsFromManyCallers: settlements sent at once through a
// batching store with one call in flight are each answered, and the
// state they move ends exact.
func TestSettlementsFromManyCallers(t *testing.T) {
	c, prefix := testenv.Redis(t)
	ctx := context.Background()
	s := NewBatching(c, BatchConfig{Operations: true})
	window := limiter.Params{Algorithm: limiter.FixedWindow, Limit: 10_000, PeriodUS: limiter.HourUS}
	reqs := []limiter.Request{{Key: prefix + "w", Params: window}}
	const holds = 200
	for i := range holds {
		hold := &limiter.Hold{Key: fmt.Sprintf("%sh%d", prefix, i), ID: fmt.Sprint(i), TTLUS: limiter.HourUS}
		if out, err := s.Check(ctx, limiter.Batch{Requests: reqs, Cost: 10, Hold: hold}); err != nil || !out.Admitted {
			t.Fatalf("hold %d: %+v, %v", i, out, err)
		}
	}
	calls := s.batcher.calls.Load()
	var wg sync.WaitGroup
	for i := range holds {
		wg.Go(func() {
			got, err := s.Settle(ctx, limiter.Settle{Key: fmt.Sprintf("%sh%d", prefix, i), Cost: int64(i % 7)})
			if err != nil || got.Cost != int64(i%7) || got.Status != limiter.HoldSettled {
				t.Errorf("settlement %d: %+v, %v", i, got, err)
			}
		})
	}
	wg.Wait()
	want := int64(0)
	for i := range holds {
		want += int64(i % 7)
	}
	out, err := s.Check(ctx, limiter.Batch{Requests: reqs})
	if err != nil || out.Results[0].Remaining != 10_000-want {
		t.Errorf("the window after: %+v, %v; want %d left", out, err, 10_000-want)
	}
	t.Logf("%d settlements in %d calls", holds, s.batcher.calls.Load()-calls-1)
}

// TestAHoldNotListedIsAnsweredAndListedLater: on a Cluster the index of
// holds lives on its own node. When listing a hold there fails, the
// admitted check is answered all the same, with ErrHoldNotListed beside
// it (the hold stands, charged, and its caller can settle it), and the
// store lists the hold once the index takes writes again, so it expires.
func TestAHoldNotListedIsAnsweredAndListedLater(t *testing.T) {
	ctx := context.Background()
	cluster, prefix := testenv.RedisCluster(t)
	s := New(cluster)
	s.HoldIndex = prefix + "holds"
	// Fault injection: the index holds a string, so ZADD fails on it.
	testenv.Must(t, cluster.Set(ctx, s.HoldIndex, "not a sorted set", 0).Err())
	tag := prefix + "{h}"
	hold := &limiter.Hold{ID: tag, Key: tag + "hold", TTLUS: limiter.HourUS}
	out, err := s.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: tag + "w", Params: replicaWindow}}, Cost: 4, Hold: hold})
	if !out.Admitted || !errors.Is(err, limiter.ErrHoldNotListed) {
		t.Fatalf("check with the index failing: admitted %v, err %v; want admitted with ErrHoldNotListed", out.Admitted, err)
	}
	testenv.Must(t, cluster.Del(ctx, s.HoldIndex).Err())
	testenv.Eventually(t, time.Now(), 10*time.Second, "the hold listed once the index takes writes", func() (bool, string) {
		score, err := cluster.ZScore(ctx, s.HoldIndex, hold.Key).Result()
		return err == nil && int64(score) == out.NowUS+hold.TTLUS, fmt.Sprint(score, err)
	})
}
