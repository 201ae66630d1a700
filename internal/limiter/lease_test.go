package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/testenv"

	. "github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
)

// onEveryStore runs f on a fresh instance of every store.
func onEveryStore(t *testing.T, f func(t *testing.T, store openStore)) {
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) { f(t, sc.open(t)) })
	}
}

// Renew and Release on the store under test, which every store is.
func (s openStore) Renew(ctx context.Context, ref LeaseRef) (LeaseState, error) {
	return s.Store.(Leaser).Renew(ctx, ref)
}

func (s openStore) Release(ctx context.Context, ref LeaseRef) (bool, error) {
	return s.Store.(Leaser).Release(ctx, ref)
}

// leaseStep is one row of a concurrency vector: at t (µs after the
// start) a check of cost taking lease (cost 0: a peek), or a renewal or
// release of lease. want is the check's result; expires the renewal's
// expiry (µs after the start; 0: ErrLeaseNotFound); released the
// release's answer.
type leaseStep struct {
	t        int64
	op       string // "check", "renew", "release"
	lease    string
	cost     int64
	want     Result
	expires  int64
	released bool
}

// concurrencyTable is the table of docs/algorithms.md ("Concurrency"):
// 2 in flight, leases of 10 s.
var concurrencyTable = []leaseStep{
	{t: 0, op: "check", lease: "a", cost: 1, want: allow(1, 10*s)},
	{t: 1 * s, op: "check", lease: "b", cost: 5, want: allow(0, 10*s)},
	{t: 2 * s, op: "check", lease: "c", cost: 1, want: deny(0, 8*s, 9*s)},
	{t: 2 * s, op: "check", lease: "c", cost: 0, want: allow(0, 9*s)},
	{t: 3 * s, op: "renew", lease: "a", expires: 13 * s},
	{t: 4 * s, op: "check", lease: "c", cost: 1, want: deny(0, 7*s, 9*s)},
	{t: 5 * s, op: "release", lease: "b", released: true},
	{t: 5 * s, op: "release", lease: "b", released: false},
	{t: 5 * s, op: "check", lease: "c", cost: 1, want: allow(0, 10*s)},
	{t: 13 * s, op: "check", lease: "d", cost: 1, want: allow(0, 10*s)},
	{t: 13 * s, op: "renew", lease: "a", expires: 0},
	{t: 14 * s, op: "release", lease: "a", released: false},
	{t: 20 * s, op: "check", lease: "e", cost: 1, want: allow(0, 10*s)},
	{t: 20 * s, op: "renew", lease: "e", expires: 30 * s},
}

const s = SecondUS

// TestConcurrencyVectors runs the concurrency table on every store.
func TestConcurrencyVectors(t *testing.T) {
	p := Params{Algorithm: Concurrency, Limit: 2, PeriodUS: 10 * s}
	if problems := p.Validate(); len(problems) > 0 {
		t.Fatalf("invalid params: %v", problems)
	}
	onEveryStore(t, func(t *testing.T, store openStore) {
		runLeaseSteps(t, store, single(store.ns+"k", p), concurrencyTable)
	})
}

func runLeaseSteps(t *testing.T, store openStore, reqs []Request, steps []leaseStep) {
	t.Helper()
	ctx := context.Background()
	for i, st := range steps {
		key := store.ns + "lease:" + st.lease
		at := epoch + st.t
		switch st.op {
		case "check":
			out := mustCheck(t, store, Batch{Requests: reqs, Cost: st.cost, NowUS: at, Lease: &Lease{Key: key}})
			if got := out.Results[0]; got != st.want || out.Admitted != st.want.Allowed {
				t.Errorf("step %d (%+v): got %+v, want %+v", i, st, got, st.want)
			}
		case "renew":
			got, err := store.Renew(ctx, LeaseRef{Key: key, NowUS: at})
			switch {
			case st.expires == 0 && !errors.Is(err, ErrLeaseNotFound):
				t.Errorf("step %d (%+v): got %+v, %v; want ErrLeaseNotFound", i, st, got, err)
			case st.expires != 0 && (err != nil || got != LeaseState{NowUS: at, ExpiresAtUS: epoch + st.expires}):
				t.Errorf("step %d (%+v): got %+v, %v; want expiry %d", i, st, got, err, epoch+st.expires)
			}
		case "release":
			if got, err := store.Release(ctx, LeaseRef{Key: key, NowUS: at}); err != nil || got != st.released {
				t.Errorf("step %d (%+v): got %v, %v; want %v", i, st, got, err, st.released)
			}
		}
	}
}

// TestLeaseRenewsEverySlotByItsRule: a check matching two concurrency
// rules (leases of 10 s and 4 s) holds a slot of each; a renewal moves
// each by its own rule's TTL and reports the earlier expiry; once the
// shorter slot has expired, the lease cannot be renewed, and releasing
// it still frees the longer slot.
func TestLeaseRenewsEverySlotByItsRule(t *testing.T) {
	long := Params{Algorithm: Concurrency, Limit: 1, PeriodUS: 10 * s}
	short := Params{Algorithm: Concurrency, Limit: 1, PeriodUS: 4 * s}
	onEveryStore(t, func(t *testing.T, store openStore) {
		ctx := context.Background()
		both := []Request{{Key: store.ns + "long", Params: long}, {Key: store.ns + "short", Params: short}}
		if got := LeaseTTL(both); got != 4*s {
			t.Errorf("LeaseTTL: got %d, want %d", got, 4*s)
		}
		a := &Lease{Key: store.ns + "lease:a"}
		if out := mustCheck(t, store, Batch{Requests: both, Cost: 1, NowUS: epoch, Lease: a}); !out.Admitted {
			t.Fatalf("first check denied: %+v", out)
		}
		got, err := store.Renew(ctx, LeaseRef{Key: a.Key, NowUS: epoch + 3*s})
		if want := (LeaseState{NowUS: epoch + 3*s, ExpiresAtUS: epoch + 7*s}); err != nil || got != want {
			t.Errorf("renew: got %+v, %v; want %+v", got, err, want)
		}
		// At 8 s the short slot (renewed to 7 s) is free, the long
		// one (renewed to 13 s) still held.
		out := mustCheck(t, store, Batch{Requests: both, Cost: 1, NowUS: epoch + 8*s, Lease: &Lease{Key: store.ns + "lease:b"}})
		if out.Admitted || !out.Results[1].Allowed || out.Results[0].Allowed || out.Results[0].RetryAfterUS != 5*s {
			t.Errorf("check at 8 s: got %+v, want denied by the long rule only, retry 5 s", out)
		}
		if _, err := store.Renew(ctx, LeaseRef{Key: a.Key, NowUS: epoch + 8*s}); !errors.Is(err, ErrLeaseNotFound) {
			t.Errorf("renew after the short slot expired: got %v, want ErrLeaseNotFound", err)
		}
		if released, err := store.Release(ctx, LeaseRef{Key: a.Key, NowUS: epoch + 8*s}); err != nil || !released {
			t.Errorf("release: got %v, %v; want true", released, err)
		}
		if out := mustCheck(t, store, Batch{Requests: both, Cost: 1, NowUS: epoch + 8*s, Lease: &Lease{Key: store.ns + "lease:c"}}); !out.Admitted {
			t.Errorf("check after release: got %+v, want admitted", out)
		}
	})
}

// TestConcurrencyDenialConsumesNothingElse: a check denied by a full
// concurrency rule takes nothing from its sibling rule, and a check
// denied by the sibling takes no slot.
func TestConcurrencyDenialConsumesNothingElse(t *testing.T) {
	inflight := Params{Algorithm: Concurrency, Limit: 1, PeriodUS: 10 * s}
	tokens := Params{Algorithm: GCRA, Limit: 100, PeriodUS: s}
	onEveryStore(t, func(t *testing.T, store openStore) {
		reqs := []Request{{Key: store.ns + "inflight", Params: inflight}, {Key: store.ns + "tokens", Params: tokens}}
		lease := func(n int) *Lease { return &Lease{Key: fmt.Sprintf("%slease:%d", store.ns, n)} }
		mustCheck(t, store, Batch{Requests: reqs, Cost: 10, NowUS: epoch, Lease: lease(1)})
		out := mustCheck(t, store, Batch{Requests: reqs, Cost: 10, NowUS: epoch, Lease: lease(2)})
		if out.Admitted || out.Results[0].Allowed || !out.Results[1].Allowed {
			t.Fatalf("second check: got %+v, want denied by concurrency only", out)
		}
		if got := mustCheck(t, store, Batch{Requests: reqs[1:], NowUS: epoch}).Results[0].Remaining; got != 90 {
			t.Errorf("tokens after the denial: %d remaining, want 90", got)
		}
		if _, err := store.Release(context.Background(), LeaseRef{Key: lease(1).Key, NowUS: epoch}); err != nil {
			t.Fatal(err)
		}
		// 90 tokens left: a cost of 95 is denied by the tokens rule
		// and must leave the slot free.
		if out := mustCheck(t, store, Batch{Requests: reqs, Cost: 95, NowUS: epoch, Lease: lease(3)}); out.Admitted {
			t.Fatalf("cost 95: got %+v, want denied", out)
		}
		if got := mustCheck(t, store, Batch{Requests: reqs[:1], NowUS: epoch}).Results[0].Remaining; got != 1 {
			t.Errorf("slots after the tokens denial: %d free, want 1", got)
		}
	})
}

// TestSettlementReleasesTheLease: settling a hold frees the slot its
// check took; a hold that expires unsettled leaves the lease to its own
// TTL.
func TestSettlementReleasesTheLease(t *testing.T) {
	inflight := Params{Algorithm: Concurrency, Limit: 1, PeriodUS: 60 * s}
	onEveryStore(t, func(t *testing.T, store openStore) {
		reqs := single(store.ns+"inflight", inflight)
		held := func(name string, at int64) Outcome {
			return mustCheck(t, store, Batch{Requests: reqs, Cost: 5, NowUS: epoch + at,
				Hold: &Hold{Key: store.ns + "hold:" + name, TTLUS: 10 * s}, Lease: &Lease{Key: store.ns + "lease:" + name}})
		}
		if !held("a", 0).Admitted || held("b", 0).Admitted {
			t.Fatal("want the first held check admitted, the second denied")
		}
		if _, err := store.Settle(context.Background(), Settle{Key: store.ns + "hold:a", Cost: 3, NowUS: epoch + s}); err != nil {
			t.Fatal(err)
		}
		if !held("c", s).Admitted {
			t.Fatal("after the settlement: want the slot free")
		}
		if _, err := store.Settle(context.Background(), Settle{Key: store.ns + "hold:c", Expire: true, NowUS: epoch + 11*s}); err != nil {
			t.Fatal(err)
		}
		if held("d", 12*s).Admitted {
			t.Error("after the hold expired: want the slot still leased")
		}
		if !held("e", 61*s).Admitted {
			t.Error("after the lease expired: want the slot free")
		}
	})
}

// TestLeaseRequiredAndPeeksTakeNone: a check that would take a slot
// needs a lease; dry runs and peeks take none.
func TestLeaseRequiredAndPeeksTakeNone(t *testing.T) {
	inflight := Params{Algorithm: Concurrency, Limit: 1, PeriodUS: 10 * s}
	onEveryStore(t, func(t *testing.T, store openStore) {
		reqs := single(store.ns+"inflight", inflight)
		if _, err := store.Check(context.Background(), Batch{Requests: reqs, Cost: 1, NowUS: epoch}); !errors.Is(err, ErrBadLease) {
			t.Errorf("no lease: got %v, want ErrBadLease", err)
		}
		mustCheck(t, store, Batch{Requests: reqs, Cost: 1, DryRun: true, NowUS: epoch})
		mustCheck(t, store, Batch{Requests: reqs, Cost: 0, NowUS: epoch})
		if out := mustCheck(t, store, Batch{Requests: reqs, Cost: 1, NowUS: epoch, Lease: &Lease{Key: store.ns + "l"}}); !out.Admitted {
			t.Errorf("after a dry run and a peek: got %+v, want admitted", out)
		}
	})
}

// TestStoresAgreeOnLeases replays random histories of checks (two
// concurrency rules with different lease TTLs beside a GCRA rule, some
// with holds), renewals, releases and settlements through every store:
// each answer must equal the memory store's, and no rule ever has more
// live leases than its limit.
func TestStoresAgreeOnLeases(t *testing.T) {
	wide := Params{Algorithm: Concurrency, Limit: 3, PeriodUS: 2 * s}
	narrow := Params{Algorithm: Concurrency, Limit: 2, PeriodUS: 700 * ms}
	rate := Params{Algorithm: GCRA, Limit: 20, PeriodUS: s, Burst: 8}
	type answer struct {
		out      Outcome
		state    LeaseState
		released bool
		err      error
	}
	var want [][]answer
	for _, sc := range stores() {
		store := sc.open(t)
		ctx := context.Background()
		for seed := range uint64(4) {
			r := seeded("leases", seed)
			ns := fmt.Sprintf("%ss%d:", store.ns, seed)
			reqs := []Request{{Key: ns + "wide", Params: wide}, {Key: ns + "narrow", Params: narrow}, {Key: ns + "rate", Params: rate}}
			var got []answer
			at, leases := epoch, 0
			for range 300 {
				at += r.Int64N(150 * ms)
				var a answer
				switch x := r.IntN(10); {
				case x < 5 || leases == 0:
					sub := reqs[r.IntN(2):]
					b := Batch{Requests: sub, Cost: r.Int64N(4), NowUS: at, Lease: &Lease{Key: fmt.Sprintf("%slease:%d", ns, leases)}}
					if r.IntN(3) == 0 {
						b.Hold = &Hold{Key: fmt.Sprintf("%shold:%d", ns, leases), TTLUS: s}
					}
					leases++
					a.out, a.err = store.Check(ctx, b)
				case x < 7:
					a.state, a.err = store.Renew(ctx, LeaseRef{Key: fmt.Sprintf("%slease:%d", ns, r.IntN(leases)), NowUS: at})
				case x < 9:
					a.released, a.err = store.Release(ctx, LeaseRef{Key: fmt.Sprintf("%slease:%d", ns, r.IntN(leases)), NowUS: at})
				default:
					_, a.err = store.Settle(ctx, Settle{Key: fmt.Sprintf("%shold:%d", ns, r.IntN(leases)), Cost: r.Int64N(4), NowUS: at})
				}
				if a.err != nil && !errors.Is(a.err, ErrLeaseNotFound) && !errors.Is(a.err, ErrHoldNotFound) && !errors.Is(a.err, ErrHoldConflict) {
					t.Fatalf("%s seed %d: %v", sc.name, seed, a.err)
				}
				for i, res := range a.out.Results {
					if i < 2 && res.Remaining < 0 {
						t.Errorf("%s seed %d: negative remaining %+v", sc.name, seed, res)
					}
				}
				got = append(got, a)
			}
			// In flight never above the limits: a peek sees the live leases.
			peek := mustCheck(t, store, Batch{Requests: reqs[:2], NowUS: at})
			if peek.Results[0].Remaining > wide.Limit || peek.Results[1].Remaining > narrow.Limit {
				t.Errorf("%s seed %d: peek %+v", sc.name, seed, peek)
			}
			if sc.name == "memory" {
				want = append(want, got)
				continue
			}
			for i := range got {
				g, w := got[i], want[seed][i]
				if !errors.Is(g.err, w.err) || g.state != w.state || g.released != w.released {
					t.Errorf("%s seed %d op %d: got %+v, want %+v", sc.name, seed, i, g, w)
					break
				}
				if err := sameOutcomes([]Outcome{g.out}, []Outcome{w.out}, []check{{}}); err != nil {
					t.Errorf("%s seed %d op %d: %v", sc.name, seed, i, err)
					break
				}
			}
		}
	}
}

// TestConcurrentLeasesAdmitExactlyTheLimit: 200 checks at once on a
// concurrency rule of 10 admit exactly 10 on every store; after 3
// releases, another 100 at once admit exactly 3.
func TestConcurrentLeasesAdmitExactlyTheLimit(t *testing.T) {
	p := Params{Algorithm: Concurrency, Limit: 10, PeriodUS: MaxLeaseTTLUS}
	onEveryStore(t, func(t *testing.T, store openStore) {
		reqs := single(store.ns+"inflight", p)
		burst := func(round, n int) []string {
			var mu sync.Mutex
			var admitted []string
			var wg sync.WaitGroup
			var failed atomic.Int64
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					key := fmt.Sprintf("%slease:%d:%d", store.ns, round, i)
					out, err := store.Check(context.Background(), Batch{Requests: reqs, Cost: 1, NowUS: epoch, Lease: &Lease{Key: key}})
					if err != nil {
						failed.Add(1)
						return
					}
					if out.Admitted {
						mu.Lock()
						admitted = append(admitted, key)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if failed.Load() > 0 {
				t.Fatalf("%d checks failed", failed.Load())
			}
			return admitted
		}
		first := burst(1, 200)
		if len(first) != 10 {
			t.Fatalf("first burst admitted %d, want 10", len(first))
		}
		for _, key := range first[:3] {
			if ok, err := store.Release(context.Background(), LeaseRef{Key: key, NowUS: epoch}); err != nil || !ok {
				t.Fatalf("release %s: %v, %v", key, ok, err)
			}
		}
		if second := burst(2, 100); len(second) != 3 {
			t.Errorf("after 3 releases admitted %d, want 3", len(second))
		}
	})
}

// callCounter counts the commands a Redis client sends.
type callCounter struct{ calls atomic.Int64 }

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.calls.Add(1)
		return next(ctx, cmd)
	}
}
func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.calls.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestOneRoundTripPerOperation: on a single Redis, a check that opens a
// hold and takes a lease is one command, and so are its settlement, a
// renewal and a release: a hold and its settlement are two round trips.
func TestOneRoundTripPerOperation(t *testing.T) {
	c, prefix := testenv.Redis(t)
	store := redisstore.New(c)
	store.HoldIndex = prefix + "holds"
	counter := &callCounter{}
	c.AddHook(counter)
	ns := prefix + "{o}:"
	reqs := []Request{{Key: ns + "inflight", Params: Params{Algorithm: Concurrency, Limit: 5, PeriodUS: MinuteUS}},
		{Key: ns + "tokens", Params: Params{Algorithm: GCRA, Limit: 1000, PeriodUS: MinuteUS}}}
	ctx := context.Background()
	// Each script once first, so that no EVALSHA falls back to EVAL below.
	for round := range 2 {
		counter.calls.Store(0)
		key := fmt.Sprintf("%s%d", ns, round)
		out := mustCheck(t, store, Batch{Requests: reqs, Cost: 100, Hold: &Hold{Key: key + "h", TTLUS: MinuteUS}, Lease: &Lease{Key: key + "l"}})
		if !out.Admitted {
			t.Fatalf("check: %+v", out)
		}
		checkCalls := counter.calls.Load()
		if _, err := store.Renew(ctx, LeaseRef{Key: key + "l"}); err != nil {
			t.Fatal(err)
		}
		renewCalls := counter.calls.Load() - checkCalls
		if _, err := store.Settle(ctx, Settle{Key: key + "h", Cost: 40}); err != nil {
			t.Fatal(err)
		}
		settleCalls := counter.calls.Load() - checkCalls - renewCalls
		if released, err := store.Release(ctx, LeaseRef{Key: key + "l"}); err != nil || released {
			t.Fatalf("release after the settlement: %v, %v; want nothing left to release", released, err)
		}
		releaseCalls := counter.calls.Load() - checkCalls - renewCalls - settleCalls
		if round == 1 && (checkCalls != 1 || renewCalls != 1 || settleCalls != 1 || releaseCalls != 1) {
			t.Errorf("commands: check %d, renew %d, settle %d, release %d; want 1 each", checkCalls, renewCalls, settleCalls, releaseCalls)
		}
	}
}
