package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	. "github.com/tollgate/tollgate/internal/limiter"
)

// creditOp is one step of a credits history: a check (with a hold when
// hold ≥ 0), a settlement of hold settle, or a top-up raising the line.
type creditOp struct {
	at, cost     int64
	dry          bool
	hold, settle int
	topUp        int64
}

type creditAnswer struct {
	out        Outcome
	settlement Settlement
	err        error
}

// TestStoresAgreeOnCredits replays random histories of checks, dry runs,
// holds, settlements and top-ups on a balance, in deny and overage mode
// with and without an overdraft, through every store: each answer, the
// counter and the consumption log must equal the memory store's; the
// balance never goes below −overdraft by a check; and the log adds up to
// the counter (less its seed).
func TestStoresAgreeOnCredits(t *testing.T) {
	rule := Params{Algorithm: GCRA, Limit: 20, PeriodUS: SecondUS, Burst: 8}
	for _, mode := range []struct {
		name      string
		overage   bool
		overdraft int64
	}{{"deny", false, 0}, {"deny-overdraft-5", false, 5}, {"overage", true, 0}, {"overage-overdraft-3", true, 3}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			var want [][]creditAnswer
			var wantLogs [][]CreditEntry
			var wantCounters []int64
			for _, sc := range stores() {
				store := sc.open(t)
				for seed := range uint64(3) {
					r := seeded("credits/"+mode.name, seed)
					checks := genChecks(r, rule, 150, false)
					ops := make([]creditOp, len(checks))
					holds := 0
					for i, c := range checks {
						ops[i] = creditOp{at: c.at, cost: min(c.cost, 6), dry: c.dry, hold: -1, settle: -1}
						switch x := r.IntN(20); {
						case x < 4:
							ops[i].hold = holds
							holds++
						case x < 7 && holds > 0:
							ops[i].settle, ops[i].cost = r.IntN(holds), r.Int64N(9)
						case x < 8:
							ops[i].topUp = r.Int64N(15)
						}
					}
					name := fmt.Sprintf("s%d", seed)
					credits := Credits{Key: store.ns + name + ":c", Log: store.ns + name + ":l", Line: 30, Seed: 4,
						Overdraft: mode.overdraft, Overage: mode.overage}
					got := replayCredits(t, store, name, rule, credits, ops)
					consumed, present, log, err := store.Store.(CreditLogs).ReadCredits(context.Background(), credits.Key, credits.Log, "", 10_000)
					if err != nil || !present {
						t.Fatalf("%s: read credits: present %v, %v", sc.name, present, err)
					}
					var sum int64
					for i := range log {
						sum += log[i].Units
						log[i].ID = "" // Redis names entries by its own clock
					}
					if sum != consumed-credits.Seed {
						t.Errorf("%s seed %d: the log adds up to %d, the counter moved %d", sc.name, seed, sum, consumed-credits.Seed)
					}
					if sc.name == "memory" {
						want, wantLogs, wantCounters = append(want, got), append(wantLogs, log), append(wantCounters, consumed)
						continue
					}
					if consumed != wantCounters[seed] {
						t.Errorf("%s seed %d: counter %d, want %d", sc.name, seed, consumed, wantCounters[seed])
					}
					if fmt.Sprint(log) != fmt.Sprint(wantLogs[seed]) {
						t.Errorf("%s seed %d: log\n%v\nwant\n%v", sc.name, seed, log, wantLogs[seed])
					}
					for i := range got {
						g, w := got[i], want[seed][i]
						if err := sameHoldAnswer(holdAnswer{g.out, g.settlement, g.err}, holdAnswer{w.out, w.settlement, w.err}); err != nil || g.out.Credits != w.out.Credits {
							t.Errorf("%s seed %d op %d %+v: %v; credits %+v, want %+v", sc.name, seed, i, ops[i], err, g.out.Credits, w.out.Credits)
							break
						}
					}
				}
			}
		})
	}
}

func replayCredits(t *testing.T, store openStore, name string, p Params, credits Credits, ops []creditOp) []creditAnswer {
	t.Helper()
	ctx := context.Background()
	reqs := single(store.ns+name, p)
	holdKey := func(n int) string { return fmt.Sprintf("%s%s:hold%d", store.ns, name, n) }
	answers := make([]creditAnswer, len(ops))
	for i, op := range ops {
		a := &answers[i]
		credits.Line += op.topUp
		c := credits
		switch {
		case op.settle >= 0:
			a.settlement, a.err = store.Settle(ctx, Settle{Key: holdKey(op.settle), Cost: op.cost, NowUS: op.at})
		case op.hold >= 0:
			a.out, a.err = store.Check(ctx, Batch{Requests: reqs, Cost: op.cost, NowUS: op.at, Credits: &c,
				Hold: &Hold{ID: fmt.Sprintf("h%d", op.hold), Key: holdKey(op.hold), TTLUS: HourUS}})
		default:
			a.out, a.err = store.Check(ctx, Batch{Requests: reqs, Cost: op.cost, NowUS: op.at, DryRun: op.dry, Credits: &c})
		}
		if a.err != nil && !errors.Is(a.err, ErrHoldNotFound) && !errors.Is(a.err, ErrHoldConflict) {
			t.Fatalf("op %d %+v: %v", i, op, a.err)
		}
		if op.settle < 0 && a.out.Admitted && !credits.Overage && a.out.Credits.Balance < -credits.Overdraft {
			t.Fatalf("op %d %+v: balance %d below −%d", i, op, a.out.Credits.Balance, credits.Overdraft)
		}
	}
	return answers
}

// TestCreditsVectors pins the decisions of a balance: deny mode refuses
// what would go below −overdraft and takes nothing from the rules;
// overage mode draws what there is and admits the rest as overage; a
// missing counter starts from the seed; a dry run draws nothing; a hold
// settled below its estimate gives units back, overage first.
func TestCreditsVectors(t *testing.T) {
	rule := Params{Algorithm: FixedWindow, Limit: 100, PeriodUS: HourUS}
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			store := sc.open(t)
			check := func(name string, c Credits, cost int64, dry bool, h *Hold) Outcome {
				c.Key, c.Log = store.ns+name+":c", store.ns+name+":l"
				return mustCheck(t, store, Batch{Requests: single(store.ns+name, rule), Cost: cost, NowUS: epoch, DryRun: dry, Credits: &c, Hold: h})
			}
			deny := Credits{Line: 10, Seed: 3, Overdraft: 2}
			if o := check("deny", deny, 9, false, nil); !o.Admitted || o.Credits != (CreditResult{Allowed: true, Balance: -2, Drawn: 9}) {
				t.Errorf("deny 9 of 7+2: %+v", o)
			}
			o := check("deny", deny, 1, false, nil)
			if o.Admitted || o.Credits != (CreditResult{Allowed: false, Balance: -2}) || o.Results[0].Remaining != 90 {
				t.Errorf("deny past the overdraft: %+v", o)
			}
			if o := check("deny", deny, 0, false, nil); !o.Admitted || o.Credits.Drawn != 0 {
				t.Errorf("cost 0 at −overdraft: %+v", o)
			}
			over := Credits{Line: 5, Overage: true, Overdraft: 1}
			if o := check("over", over, 4, true, nil); !o.Admitted || o.Credits != (CreditResult{Allowed: true, Balance: 5}) {
				t.Errorf("dry run: %+v", o)
			}
			if o := check("over", over, 8, false, nil); !o.Admitted || o.Credits != (CreditResult{Allowed: true, Balance: -1, Drawn: 6, Overage: 2}) {
				t.Errorf("overage 8 of 5+1: %+v", o)
			}
			h := &Hold{ID: "h", Key: store.ns + "over:hold", TTLUS: HourUS}
			over.Line = 9 // a top-up: balance 9 − 6 = 3
			if o := check("over", over, 5, false, h); !o.Admitted || o.Credits != (CreditResult{Allowed: true, Balance: -1, Drawn: 4, Overage: 1}) {
				t.Errorf("hold of 5 on 3+1: %+v", o)
			}
			if _, err := store.Settle(context.Background(), Settle{Key: h.Key, Cost: 2, NowUS: epoch + 1}); err != nil {
				t.Fatal(err)
			}
			consumed, _, log, err := store.Store.(CreditLogs).ReadCredits(context.Background(), store.ns+"over:c", store.ns+"over:l", "", 100)
			if err != nil || consumed != 8 || len(log) != 3 || log[2].Units != -2 || log[2].Overage != -1 || log[2].HoldID != "h" {
				t.Errorf("after settling 5 at 2: consumed %d, log %+v, %v; want 8 and a last entry of −2 units, −1 overage", consumed, log, err)
			}
		})
	}
}

// TestConcurrentDrawsAdmitExactlyTheBalance fires 1,000 checks of cost 1
// at once on a balance of 500 through every Redis store: exactly 500 are
// admitted (505 with an overdraft of 5), the counter says so, and the log
// adds up to them (checks batched in one call share an entry).
func TestConcurrentDrawsAdmitExactlyTheBalance(t *testing.T) {
	for _, sc := range redisStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			store := sc.open(t)
			for _, overdraft := range []int64{0, 5} {
				name := fmt.Sprintf("od%d", overdraft)
				c := Credits{Key: store.ns + name + ":c", Log: store.ns + name + ":l", Line: 500, Overdraft: overdraft}
				rule := single(store.ns+name, Params{Algorithm: GCRA, Limit: 1_000_000, PeriodUS: SecondUS})
				var admitted atomic.Int64
				var wg sync.WaitGroup
				for range 50 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 20 {
							out, err := store.Check(context.Background(), Batch{Requests: rule, Cost: 1, Credits: &c})
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
				wg.Wait()
				consumed, _, log, err := store.Store.(CreditLogs).ReadCredits(context.Background(), c.Key, c.Log, "", 10_000)
				if err != nil {
					t.Fatal(err)
				}
				var logged int64
				for _, e := range log {
					logged += e.Units
				}
				if want := 500 + overdraft; admitted.Load() != want || consumed != want || logged != want {
					t.Errorf("overdraft %d: %d admitted, counter %d, log entries of %d units; want %d each", overdraft, admitted.Load(), consumed, logged, want)
				}
				t.Logf("%s: %d admitted checks logged in %d entries", name, admitted.Load(), len(log))
			}
		})
	}
}
