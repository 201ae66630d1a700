package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	. "github.com/tollgate/tollgate/internal/limiter"
)

// holdTTL is the holds' time to live in these tests.
const holdTTL = 30 * SecondUS

// TestSettledHoldEqualsChargingTheSettledCost is the exactness property of
// holds: after a random history, a hold of an estimate settled later at
// cost A (with no other check in between) leaves the rule deciding every
// later check exactly as a rule that was charged A at the check's time.
func TestSettledHoldEqualsChargingTheSettledCost(t *testing.T) {
	forEachStore(t, stores(), func(t *testing.T, rc ruleConfig, sc storeCase, store openStore) {
		window, interval := scale(rc.p)
		compared := 0
		for seed := range uint64(12) {
			r := seeded(rc.name+"/hold", seed)
			checks := genChecks(r, rc.p, 60, false)
			held := single(fmt.Sprintf("%sh%d", store.ns, seed), rc.p)
			charged := single(fmt.Sprintf("%sc%d", store.ns, seed), rc.p)
			cut := 1 + r.IntN(len(checks)-20)
			replay(t, store, held, checks[:cut])
			replay(t, store, charged, checks[:cut])
			at := checks[cut-1].at + r.Int64N(2*interval+1)
			estimate, actual := r.Int64N(capacity(rc.p)+1), r.Int64N(capacity(rc.p)+1)
			hold := &Hold{Key: fmt.Sprintf("%shold%d", store.ns, seed), TTLUS: holdTTL}
			h := mustCheck(t, store, Batch{Requests: held, Cost: estimate, NowUS: at, Hold: hold})
			c := mustCheck(t, store, Batch{Requests: charged, Cost: actual, NowUS: at})
			if !h.Admitted || !c.Admitted {
				continue
			}
			settleAt := at + r.Int64N(min(window, holdTTL-1))
			if _, err := store.Settle(context.Background(), Settle{Key: hold.Key, Cost: actual, NowUS: settleAt}); err != nil {
				t.Fatalf("seed %d: settle: %v", seed, err)
			}
			rest := checks[cut:]
			shift := settleAt - rest[0].at
			for i := range rest {
				rest[i].at += shift
			}
			// One check at a time on both keys: the memory store forgets
			// what expired before the latest time it saw.
			got, want := make([]Outcome, len(rest)), make([]Outcome, len(rest))
			for i, c := range rest {
				got[i] = replay(t, store, held, rest[i:i+1])[0]
				want[i] = replay(t, store, charged, []check{c})[0]
			}
			if err := sameOutcomes(got, want, rest); err != nil {
				t.Errorf("%s seed %d (estimate %d, actual %d, settled %dµs after the check): %v", sc.name, seed, estimate, actual, settleAt-at, err)
			}
			compared++
		}
		if compared == 0 {
			t.Errorf("%s: no seed compared", sc.name)
		}
	})
}

// holdOp is one step of a random history with holds.
type holdOp struct {
	at             int64
	cost           int64
	hold           int  // ≥ 0: opens hold number hold
	settle         int  // ≥ 0: settles hold number settle at cost
	expire         bool // with settle: expire instead
	chargeOnExpiry bool
}

// holdAnswer is what a store answered to a holdOp.
type holdAnswer struct {
	out        Outcome
	settlement Settlement
	err        error
}

// TestStoresAgreeOnHolds replays random histories of checks, holds,
// settlements (at costs up to twice the capacity, repeated, late) and
// expiries through every store: each answer must equal the memory store's.
func TestStoresAgreeOnHolds(t *testing.T) {
	for _, rc := range ruleConfigs {
		t.Run(rc.name, func(t *testing.T) {
			t.Parallel()
			var want [][]holdAnswer
			for _, sc := range stores() {
				store := sc.open(t)
				for seed := range uint64(3) {
					ops := genHoldOps(seeded(rc.name+"/holds", seed), rc.p, 120)
					got := replayHolds(t, store, fmt.Sprintf("s%d", seed), rc.p, ops)
					if sc.name == "memory" {
						want = append(want, got)
						continue
					}
					for i := range got {
						if err := sameHoldAnswer(got[i], want[seed][i]); err != nil {
							t.Errorf("%s seed %d op %d %+v: %v", sc.name, seed, i, ops[i], err)
							break
						}
					}
				}
			}
		})
	}
}

func genHoldOps(r *rand.Rand, p Params, n int) []holdOp {
	checks := genChecks(r, p, n, false)
	ops := make([]holdOp, n)
	holds := 0
	for i, c := range checks {
		ops[i] = holdOp{at: c.at, cost: min(c.cost, 3*capacity(p)), hold: -1, settle: -1}
		switch x := r.IntN(10); {
		case x < 3:
			ops[i].hold, ops[i].chargeOnExpiry = holds, r.IntN(2) == 0
			holds++
		case x < 6 && holds > 0:
			ops[i].settle = r.IntN(holds)
			ops[i].cost = r.Int64N(2*capacity(p) + 1)
			ops[i].expire = r.IntN(5) == 0
		}
	}
	return ops
}

func replayHolds(t *testing.T, store openStore, name string, p Params, ops []holdOp) []holdAnswer {
	t.Helper()
	ctx := context.Background()
	reqs := single(store.ns+name, p)
	holdKey := func(n int) string { return fmt.Sprintf("%s%s:hold%d", store.ns, name, n) }
	answers := make([]holdAnswer, len(ops))
	for i, op := range ops {
		a := &answers[i]
		switch {
		case op.settle >= 0:
			a.settlement, a.err = store.Settle(ctx, Settle{Key: holdKey(op.settle), Cost: op.cost, Expire: op.expire, NowUS: op.at})
		case op.hold >= 0:
			// Holds live a few of the history's steps, so some expire.
			ttl := max(1, (ops[len(ops)-1].at-ops[0].at)/20)
			a.out, a.err = store.Check(ctx, Batch{Requests: reqs, Cost: op.cost, NowUS: op.at,
				Hold: &Hold{Key: holdKey(op.hold), TTLUS: ttl, ChargeOnExpiry: op.chargeOnExpiry}})
		default:
			a.out, a.err = store.Check(ctx, Batch{Requests: reqs, Cost: op.cost, NowUS: op.at})
		}
		if a.err != nil && !errors.Is(a.err, ErrHoldNotFound) && !errors.Is(a.err, ErrHoldConflict) && !errors.Is(a.err, ErrHoldNotDue) {
			t.Fatalf("op %d %+v: %v", i, op, a.err)
		}
	}
	return answers
}

func sameHoldAnswer(got, want holdAnswer) error {
	if !errors.Is(got.err, want.err) && !errors.Is(want.err, got.err) {
		return fmt.Errorf("error %v, want %v", got.err, want.err)
	}
	if got.settlement != want.settlement {
		return fmt.Errorf("settlement %+v, want %+v", got.settlement, want.settlement)
	}
	return sameOutcomes([]Outcome{got.out}, []Outcome{want.out}, []check{{}})
}

func mustCheck(t testing.TB, store Store, b Batch) Outcome {
	t.Helper()
	out, err := store.Check(context.Background(), b)
	if err != nil {
		t.Fatalf("check %+v: %v", b, err)
	}
	return out
}

// TestSettleAnswers pins down the answers of Settle: idempotent for the
// same cost, a conflict for another, expiry by the hold's own choice,
// refused before it is due, and a hold unknown after its retention.
func TestSettleAnswers(t *testing.T) {
	p := Params{Algorithm: GCRA, Limit: 10, PeriodUS: SecondUS}
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			store := sc.open(t)
			ctx := context.Background()
			reqs := single(store.ns+"k", p)
			open := func(name string, charge bool) string {
				key := store.ns + name
				mustCheck(t, store, Batch{Requests: reqs, Cost: 4, NowUS: epoch, Hold: &Hold{Key: key, TTLUS: holdTTL, ChargeOnExpiry: charge}})
				return key
			}
			settle := func(key string, cost int64, expire bool, at int64) (Settlement, error) {
				return store.Settle(ctx, Settle{Key: key, Cost: cost, Expire: expire, NowUS: epoch + at})
			}
			a := open("a", false)
			got, err := settle(a, 2, false, 1)
			if want := (Settlement{NowUS: epoch + 1, OpenedUS: epoch, Estimate: 4, Cost: 2, Status: HoldSettled}); err != nil || got != want {
				t.Errorf("settle: got %+v, %v; want %+v", got, err, want)
			}
			got, err = settle(a, 2, false, 2)
			if want := (Settlement{NowUS: epoch + 2, OpenedUS: epoch, Estimate: 4, Cost: 2, Status: HoldSettled, Repeated: true}); err != nil || got != want {
				t.Errorf("repeated settle: got %+v, %v; want %+v", got, err, want)
			}
			if _, err := settle(a, 3, false, 3); !errors.Is(err, ErrHoldConflict) {
				t.Errorf("settle at another cost: got %v, want ErrHoldConflict", err)
			}
			b, c := open("b", false), open("c", true)
			if _, err := settle(b, 0, true, holdTTL-1); !errors.Is(err, ErrHoldNotDue) {
				t.Errorf("expire before due: got %v, want ErrHoldNotDue", err)
			}
			if _, err := settle(b, 1, false, holdTTL); !errors.Is(err, ErrHoldConflict) {
				t.Errorf("settle once expired: got %v, want ErrHoldConflict", err)
			}
			got, err = settle(b, 0, true, holdTTL)
			if want := (Settlement{NowUS: epoch + holdTTL, OpenedUS: epoch, Estimate: 4, Cost: 0, Status: HoldRefunded}); err != nil || got != want {
				t.Errorf("expire: got %+v, %v; want %+v", got, err, want)
			}
			got, err = settle(c, 0, true, holdTTL)
			if want := (Settlement{NowUS: epoch + holdTTL, OpenedUS: epoch, Estimate: 4, Cost: 4, Status: HoldCharged}); err != nil || got != want {
				t.Errorf("expire charged: got %+v, %v; want %+v", got, err, want)
			}
			if _, err := settle(a, 2, false, holdTTL+HoldRetentionUS); !errors.Is(err, ErrHoldNotFound) {
				t.Errorf("settle after retention: got %v, want ErrHoldNotFound", err)
			}
			if _, err := settle(store.ns+"nope", 1, false, 1); !errors.Is(err, ErrHoldNotFound) {
				t.Errorf("unknown hold: got %v, want ErrHoldNotFound", err)
			}
			if _, err := settle(a, -1, false, 1); !errors.Is(err, ErrSettleCost) {
				t.Errorf("negative cost: got %v, want ErrSettleCost", err)
			}
		})
	}
}

// Settle settles on the store under test, which every store is.
func (s openStore) Settle(ctx context.Context, req Settle) (Settlement, error) {
	return s.Store.(Settler).Settle(ctx, req)
}

// holdStep is one row of a hold vector: at t (µs after the start) a check
// of cost (with a hold when hold is set), or the settlement of the last
// hold at cost when settle is set; want is the check's result.
type holdStep struct {
	t      int64
	cost   int64
	hold   bool
	settle bool
	want   Result
}

// TestHoldVectors are the examples of docs/algorithms.md ("Holds").
func TestHoldVectors(t *testing.T) {
	gcra := Params{Algorithm: GCRA, Limit: 10, PeriodUS: SecondUS, Burst: 5}
	fixed := Params{Algorithm: FixedWindow, Limit: 5, PeriodUS: SecondUS}
	log := Params{Algorithm: SlidingWindowLog, Limit: 5, PeriodUS: SecondUS}
	vectors := []struct {
		name  string
		p     Params
		steps []holdStep
	}{
		{"gcra/refund", gcra, []holdStep{
			{t: 0, cost: 4, hold: true, want: Result{Allowed: true, Remaining: 1, ResetAfterUS: 400 * ms}},
			{t: 100 * ms, cost: 1, settle: true},
			{t: 100 * ms, cost: 0, want: Result{Allowed: true, Remaining: 5}},
		}},
		{"gcra/beyond-the-estimate", gcra, []holdStep{
			{t: 0, cost: 2, hold: true, want: Result{Allowed: true, Remaining: 3, ResetAfterUS: 200 * ms}},
			{t: 50 * ms, cost: 7, settle: true},
			{t: 50 * ms, cost: 1, want: Result{Remaining: 0, ResetAfterUS: 650 * ms, RetryAfterUS: 250 * ms}},
			{t: 300 * ms, cost: 1, want: Result{Allowed: true, Remaining: 0, ResetAfterUS: 500 * ms}},
		}},
		{"fixed_window/window-passed", fixed, []holdStep{
			{t: 900 * ms, cost: 3, hold: true, want: Result{Allowed: true, Remaining: 2, ResetAfterUS: 100 * ms}},
			{t: 1200 * ms, cost: 5, settle: true},
			{t: 1200 * ms, cost: 5, want: Result{Allowed: true, Remaining: 0, ResetAfterUS: 800 * ms}},
		}},
		{"fixed_window/same-window", fixed, []holdStep{
			{t: 100 * ms, cost: 1, hold: true, want: Result{Allowed: true, Remaining: 4, ResetAfterUS: 900 * ms}},
			{t: 200 * ms, cost: 4, settle: true},
			{t: 200 * ms, cost: 1, want: Result{Allowed: true, Remaining: 0, ResetAfterUS: 800 * ms}},
		}},
		{"sliding_window_log/refund", log, []holdStep{
			{t: 0, cost: 4, hold: true, want: Result{Allowed: true, Remaining: 1, ResetAfterUS: SecondUS}},
			{t: 500 * ms, cost: 1, settle: true},
			{t: 500 * ms, cost: 4, want: Result{Allowed: true, Remaining: 0, ResetAfterUS: SecondUS}},
		}},
	}
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			for _, sc := range stores() {
				store := sc.open(t)
				reqs := single(store.ns+"k", v.p)
				var hold string
				for i, s := range v.steps {
					if s.settle {
						if _, err := store.Settle(context.Background(), Settle{Key: hold, Cost: s.cost, NowUS: epoch + s.t}); err != nil {
							t.Fatalf("%s step %d: %v", sc.name, i, err)
						}
						continue
					}
					b := Batch{Requests: reqs, Cost: s.cost, NowUS: epoch + s.t}
					if s.hold {
						hold = fmt.Sprintf("%shold%d", store.ns, i)
						b.Hold = &Hold{Key: hold, TTLUS: holdTTL}
					}
					if got := mustCheck(t, store, b).Results[0]; got != s.want {
						t.Errorf("%s step %d: got %+v, want %+v", sc.name, i, got, s.want)
					}
				}
			}
		})
	}
}

// TestRulesSharingAKey: two rules of one check on one key (a spend cap
// and the monthly quota's tally, which differ only in their limits) each
// decide on the state as the check found it, write it once, and a hold
// on them moves it once when settled.
func TestRulesSharingAKey(t *testing.T) {
	month := Params{Algorithm: FixedWindow, Limit: 1 << 52, Calendar: CalendarMonth}
	capped := Params{Algorithm: FixedWindow, Limit: 10, Calendar: CalendarMonth}
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			store := sc.open(t)
			key := store.ns + "month"
			reqs := []Request{{Key: key, Params: month, Shadow: true}, {Key: key, Params: capped}}
			at := epoch + DayUS
			check := func(cost int64, hold *Hold) Outcome {
				at++
				return mustCheck(t, store, Batch{Requests: reqs, Cost: cost, NowUS: at, Hold: hold})
			}
			out := check(4, nil)
			if !out.Admitted || out.Results[0].Remaining != 1<<52-4 || out.Results[1].Remaining != 6 {
				t.Fatalf("first check: %+v; want admitted, 4 counted once", out)
			}
			hold := &Hold{Key: store.ns + "h", TTLUS: holdTTL}
			if out := check(3, hold); !out.Admitted || out.Results[1].Remaining != 3 {
				t.Fatalf("held check: %+v; want admitted with 3 left", out)
			}
			at++
			if _, err := store.Settle(context.Background(), Settle{Key: hold.Key, Cost: 5, NowUS: at}); err != nil {
				t.Fatal(err)
			}
			// 4 + 5 = 9: one more unit fits, two do not.
			if out := check(2, nil); out.Admitted || out.Results[1].Remaining != 1 || out.Results[0].Remaining != 1<<52-11 {
				t.Fatalf("after settling at 5: %+v; want denied by the cap with 1 left", out)
			}
			if out := check(1, nil); !out.Admitted || out.Results[1].Remaining != 0 {
				t.Fatalf("the last unit: %+v; want admitted with 0 left", out)
			}
		})
	}
}
