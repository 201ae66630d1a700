package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/testenv"
)

// replicated is a Redis primary and a replica of it, both of one test's
// own, with a client of each.
type replicated struct {
	primary, replica *testenv.RedisServer
	pc, rc           *redis.Client
}

// startReplicated starts a primary and a replica of it and waits until
// the replica has synced. The replica is resumed when the test ends (a
// test may pause it).
func startReplicated(t *testing.T) *replicated {
	t.Helper()
	r := &replicated{primary: testenv.StartRedisServer(t)}
	host, port, _ := net.SplitHostPort(r.primary.Addr())
	r.replica = testenv.StartRedisServer(t, "--replicaof", host, port)
	// The store's client: no retries (as cmd/api's), and a read timeout
	// longer than any wait below.
	r.pc = redis.NewClient(&redis.Options{Addr: r.primary.Addr(), MaxRetries: -1, ReadTimeout: 10 * time.Second})
	r.rc = redis.NewClient(&redis.Options{Addr: r.replica.Addr(), MaxRetries: -1, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { r.pc.Close(); r.rc.Close() })
	ctx := context.Background()
	testenv.WaitFor(t, 30*time.Second, "the replica in sync with the primary", func() bool {
		info, err := r.rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	testenv.Must(t, LoadScript(ctx, r.pc))
	testenv.Must(t, opsScript.Load(ctx, r.pc).Err())
	return r
}

// pause stops the replica until the returned function (also run when
// the test ends) resumes it.
func (r *replicated) pause(t *testing.T) (resume func()) {
	t.Helper()
	r.replica.Pause()
	resumed := false
	resume = func() {
		if !resumed {
			resumed = true
			r.replica.Resume()
		}
	}
	t.Cleanup(resume)
	return resume
}

// The checks of the replica tests, all under the tag {m}: a credit draw,
// a hold (on a window, with a hold record), a rule that counts money,
// and a plain rate limit.
var (
	replicaWindow = limiter.Params{Algorithm: limiter.FixedWindow, Limit: 1000, PeriodUS: limiter.HourUS}
	replicaRate   = limiter.Params{Algorithm: limiter.GCRA, Limit: 1000, PeriodUS: limiter.HourUS}
)

func creditDraw(cost int64) limiter.Batch {
	return limiter.Batch{Cost: cost, Credits: &limiter.Credits{Key: "{m}credits", Log: "{m}log", Line: 1000}}
}

func holdCheck(id string, estimate int64) limiter.Batch {
	return limiter.Batch{Requests: []limiter.Request{{Key: "{m}window", Params: replicaWindow}}, Cost: estimate,
		Hold: &limiter.Hold{ID: id, Key: "{m}hold:" + id, TTLUS: limiter.HourUS}}
}

func tallyCheck(cost int64) limiter.Batch {
	return limiter.Batch{Requests: []limiter.Request{{Key: "{m}tally", Params: replicaWindow}}, Cost: cost, Money: true}
}

func plainCheck() limiter.Batch {
	return limiter.Batch{Requests: []limiter.Request{{Key: "{m}rate", Params: replicaRate}}, Cost: 1}
}

// TestMoneyAnsweredOnceTheReplicaHasIt: with WaitReplicas 1, a credit
// draw, a hold, its settlement and a check of a rule that counts money
// are answered only once the replica has their writes: while the replica
// is paused none is answered, and right after the answer the replica
// holds the draw, the hold, the settled count and the tally.
func TestMoneyAnsweredOnceTheReplicaHasIt(t *testing.T) {
	ctx := context.Background()
	r := startReplicated(t)
	testenv.Must(t, r.pc.Set(ctx, "{m}credits", 0, 0).Err()) // the drainer's counter
	for _, batching := range []bool{false, true} {
		name := map[bool]string{false: "alone", true: "batching"}[batching]
		t.Run(name, func(t *testing.T) {
			s := New(r.pc)
			if batching {
				s = NewBatching(r.pc, BatchConfig{Operations: true})
			}
			s.WaitReplicas, s.WaitTimeout = 1, 5*time.Second
			id := name
			for _, step := range []struct {
				what string
				call func() error
				// onReplica is true once the replica has the step's writes.
				onReplica func() bool
			}{
				{"credit draw", func() error {
					out, err := s.Check(ctx, creditDraw(7))
					if err == nil && !out.Admitted {
						err = errors.New("not admitted")
					}
					return err
				}, func() bool {
					n, _ := r.rc.Get(ctx, "{m}credits").Int64()
					want := int64(7)
					if batching {
						want = 14
					}
					return n == want
				}},
				{"hold", func() error {
					out, err := s.Check(ctx, holdCheck(id, 10))
					if err == nil && !out.Admitted {
						err = errors.New("not admitted")
					}
					return err
				}, func() bool { return r.rc.Exists(ctx, "{m}hold:"+id).Val() == 1 }},
				{"settlement", func() error {
					_, err := s.Settle(ctx, limiter.Settle{Key: "{m}hold:" + id, Cost: 3})
					return err
				}, func() bool {
					// Each hold of 10 settled at 3.
					n, _ := r.rc.HGet(ctx, "{m}window", "count").Int64()
					want := int64(3)
					if batching {
						want = 6
					}
					return n == want
				}},
				{"tally", func() error { _, err := s.Check(ctx, tallyCheck(5)); return err }, func() bool {
					n, _ := r.rc.HGet(ctx, "{m}tally", "count").Int64()
					want := int64(5)
					if batching {
						want = 10
					}
					return n == want
				}},
			} {
				resume := r.pause(t)
				done := make(chan error, 1)
				go func() { done <- step.call() }()
				select {
				case err := <-done:
					resume()
					t.Fatalf("%s answered while the replica was paused (err %v)", step.what, err)
				case <-time.After(300 * time.Millisecond): // nothing may answer meanwhile
				}
				resume()
				if err := <-done; err != nil {
					t.Fatalf("%s: %v", step.what, err)
				}
				if !step.onReplica() {
					t.Errorf("%s answered, and the replica does not have it", step.what)
				}
			}
		})
	}
}

// TestMoneyPastTheBound: with the replica paused and WaitReplicas 1, a
// check that carries money fails within the bound (plus a margin) with
// limiter.ErrNotReplicated, its writes standing on the primary, while a
// plain rate limit, a dry run and a peek at a balance answer at once. With
// WaitReplicas 0 nothing waits.
func TestMoneyPastTheBound(t *testing.T) {
	ctx := context.Background()
	r := startReplicated(t)
	testenv.Must(t, r.pc.Set(ctx, "{m}credits", 0, 0).Err())
	// The margin only tells a call that honours the bound from one that
	// waits for the paused replica (until the test resumes it): a loaded machine
	// stretches the rest.
	const bound, margin = 300 * time.Millisecond, 5 * time.Second
	for _, batching := range []bool{false, true} {
		name := map[bool]string{false: "alone", true: "batching"}[batching]
		t.Run(name, func(t *testing.T) {
			s, off := New(r.pc), New(r.pc)
			if batching {
				s, off = NewBatching(r.pc, BatchConfig{Operations: true}), NewBatching(r.pc, BatchConfig{Operations: true})
			}
			// A hold opened while the replica is up, to settle below; on a
			// loaded machine the replica may take longer than the bound to
			// acknowledge it, which is not what is tested here.
			s.WaitReplicas, s.WaitTimeout = 1, 10*time.Second
			if _, err := s.Check(ctx, holdCheck(name+"h", 10)); err != nil {
				t.Fatal(err)
			}
			s.WaitTimeout = bound
			drawn, _ := r.pc.Get(ctx, "{m}credits").Int64()
			resume := r.pause(t)
			defer resume()

			for _, tc := range []struct {
				what string
				call func() error
			}{
				{"credit draw", func() error { _, err := s.Check(ctx, creditDraw(7)); return err }},
				{"hold", func() error { _, err := s.Check(ctx, holdCheck(name+"h2", 10)); return err }},
				{"settlement", func() error {
					_, err := s.Settle(ctx, limiter.Settle{Key: "{m}hold:" + name + "h", Cost: 3})
					return err
				}},
				{"tally", func() error { _, err := s.Check(ctx, tallyCheck(5)); return err }},
			} {
				start := time.Now()
				err := tc.call()
				took := time.Since(start)
				if !errors.Is(err, limiter.ErrNotReplicated) {
					t.Errorf("%s with the replica paused: %v, want limiter.ErrNotReplicated", tc.what, err)
				}
				if took < bound || took > bound+margin {
					t.Errorf("%s answered after %v, want between %v and %v", tc.what, took, bound, bound+margin)
				}
			}
			// The draw stands on the primary though unconfirmed.
			if n, _ := r.pc.Get(ctx, "{m}credits").Int64(); n != drawn+7 {
				t.Errorf("the primary's counter is %d after an unconfirmed draw of 7 on %d", n, drawn)
			}
			// A refusal wrote nothing to confirm: it is answered as the
			// store refused it, with no error (its caller must not turn it
			// into a rule's failure mode, which may admit). An admitted
			// check keeps its outcome beside the error: its units stand.
			if out, err := s.Check(ctx, tallyCheck(5000)); err != nil || out.Admitted {
				t.Errorf("a refused money check with the replica paused: %+v, %v; want refused, no error", out.Admitted, err)
			}
			if out, err := s.Check(ctx, creditDraw(1)); !errors.Is(err, limiter.ErrNotReplicated) || !out.Admitted {
				t.Errorf("an admitted, unconfirmed draw: admitted %v, %v; want admitted beside limiter.ErrNotReplicated", out.Admitted, err)
			}

			for _, tc := range []struct {
				what  string
				store *Store
				b     limiter.Batch
			}{
				{"plain rate limit", s, plainCheck()},
				{"dry run of a credit draw", s, func() limiter.Batch { b := creditDraw(7); b.DryRun = true; return b }()},
				{"peek at a balance", s, creditDraw(0)},
				{"credit draw, wait off", off, creditDraw(1)},
				{"hold, wait off", off, holdCheck(name+"h3", 1)},
			} {
				start := time.Now()
				_, err := tc.store.Check(ctx, tc.b)
				if took := time.Since(start); err != nil || took >= bound {
					t.Errorf("%s with the replica paused: %v after %v, want an answer before %v", tc.what, err, took, bound)
				}
			}
		})
	}
}

// TestNotReplicatedFailsOnlyMoney: in one call of a batching store, a
// plain check beside a credit draw keeps its answer when the replica does
// not confirm; only the draw fails.
func TestNotReplicatedFailsOnlyMoney(t *testing.T) {
	ctx := context.Background()
	r := startReplicated(t)
	testenv.Must(t, r.pc.Set(ctx, "{m}credits", 0, 0).Err())
	s := NewBatching(r.pc, BatchConfig{})
	s.WaitReplicas, s.WaitTimeout = 1, 100*time.Millisecond
	resume := r.pause(t)
	defer resume()
	money, plain := &pending{batch: creditDraw(1)}, &pending{batch: plainCheck()}
	s.execute([]*pending{money, plain})
	if !errors.Is(money.err, limiter.ErrNotReplicated) {
		t.Errorf("credit draw: %v, want limiter.ErrNotReplicated", money.err)
	}
	if plain.err != nil || !plain.out.Admitted {
		t.Errorf("plain check beside it: %+v, %v; want admitted", plain.out, plain.err)
	}
}

// TestNotReplicatedOnACluster: on a Cluster whose masters have no
// replica, with WaitReplicas 1, a batch spread over many hash slots (so
// over every master) fails its credit draws and settlements within the
// bound, each draw taken on its own master, while the plain checks and a
// lease-free peek beside them keep their answers.
func TestNotReplicatedOnACluster(t *testing.T) {
	ctx := context.Background()
	cluster, prefix := testenv.RedisCluster(t)
	// The margin only tells a call that honours the bound from one that
	// does not (a WAIT with no timeout blocks for good): a loaded machine
	// stretches the rest.
	const bound, margin = 200 * time.Millisecond, 5 * time.Second
	s := NewBatching(cluster, BatchConfig{Operations: true})
	s.HoldIndex = prefix + "holds"
	open := New(cluster) // holds opened without waiting, to settle below
	open.HoldIndex = s.HoldIndex
	s.WaitReplicas, s.WaitTimeout = 1, bound
	var run []*pending
	for i := range 12 {
		tag := prefix + "{" + string(rune('a'+i)) + "}"
		testenv.Must(t, cluster.Set(ctx, tag+"credits", 0, 0).Err())
		hold := &limiter.Hold{ID: tag, Key: tag + "hold", TTLUS: limiter.HourUS}
		if _, err := open.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: tag + "w", Params: replicaWindow}}, Cost: 4, Hold: hold}); err != nil {
			t.Fatal(err)
		}
		run = append(run,
			&pending{batch: limiter.Batch{Cost: 2, Credits: &limiter.Credits{Key: tag + "credits", Log: tag + "log", Line: 100}}},
			&pending{batch: limiter.Batch{Requests: []limiter.Request{{Key: tag + "rate", Params: replicaRate}}, Cost: 1}},
			&pending{op: opSettle, opKey: tag + "hold", opCost: 1})
	}
	start := time.Now()
	s.execute(run)
	if took := time.Since(start); took < bound || took > bound+margin {
		t.Errorf("the call took %v, want between %v and %v", took, bound, bound+margin)
	}
	for i, p := range run {
		money := p.carriesMoney()
		switch {
		case money && !errors.Is(p.err, limiter.ErrNotReplicated):
			t.Errorf("%d (%s, money): %v, want limiter.ErrNotReplicated", i, p.what(), p.err)
		case !money && (p.err != nil || !p.out.Admitted):
			t.Errorf("%d (%s): %+v, %v; want admitted", i, p.what(), p.out, p.err)
		}
		if p.batch.Credits != nil {
			if n, _ := cluster.Get(ctx, p.batch.Credits.Key).Int64(); n != 2 {
				t.Errorf("%s: %d drawn, want the unconfirmed draw of 2 taken", p.batch.Credits.Key, n)
			}
		}
	}
}
