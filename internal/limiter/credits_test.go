package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/tollgate/tollgate/internal/limiter"
)

// creditOp is one step of a credits history: a check (with a hold when
// hold ≥ 0), a settlement of hold settle, a top-up raising the line (or
// an adjustment lowering it), the store losing the balance's counter, or
// the ledger's writer making it again.
type creditOp struct {
	at, cost      int64
	dry           bool
	hold, settle  int
	topUp         int64
	lose, rebuild bool
}

type creditAnswer struct {
	out        Outcome
	settlement Settlement
	err        error
}

// TestStoresAgreeOnCredits replays random histories of checks, dry runs,
// holds, settlements (with the balance's terms at their time), top-ups,
// adjustments down, grants expiring, counters lost and made again on a
// balance, in deny and overage mode with and without an overdraft,
// through every store: each answer, the counter and the consumption log
// must equal the memory store's; no check or settlement that draws takes
// the balance below −overdraft; nothing is drawn while the counter is
// missing; and the log adds up to the counter's moves.
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
						switch x := r.IntN(40); {
						case i == 0:
							ops[i].rebuild = true // the writer makes the counter
						case x < 8:
							ops[i].hold = holds
							holds++
						case x < 14 && holds > 0:
							ops[i].settle, ops[i].cost = r.IntN(holds), r.Int64N(9)
						case x < 16:
							ops[i].topUp = r.Int64N(25) - 10 // or an adjustment down
						case x == 16:
							ops[i].lose = true
						case x == 17:
							ops[i].rebuild = true
						}
					}
					name := fmt.Sprintf("s%d", seed)
					credits := Credits{Key: store.ns + name + ":c", Log: store.ns + name + ":l", Line: 30,
						Expiring:  []CreditExpiry{{AtUS: ops[40].at, Units: 5}, {AtUS: ops[90].at + 1, Units: 7}},
						Overdraft: mode.overdraft, Overage: mode.overage}
					got := replayCredits(t, store, name, rule, credits, ops)
					consumed, present, log, err := readCredits(store, credits.Key, credits.Log, "", 10_000)
					if err != nil {
						t.Fatalf("%s: read credits: %v", sc.name, err)
					}
					if !present {
						consumed = -1
					}
					for i := range log {
						log[i].ID = "" // Redis names entries by its own clock
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

// replayCredits runs ops on store and checks, op by op, that the log's
// entries since the op add up to the counter's move (deferred ones move
// nothing), that nothing is drawn on a missing counter (a settlement may
// give units back: the ledger records them, and the counter made again
// from it counts them), and that no op that drew left the balance below
// −overdraft.
func replayCredits(t *testing.T, store openStore, name string, p Params, credits Credits, ops []creditOp) []creditAnswer {
	t.Helper()
	ctx := context.Background()
	logs := store.Store.(CreditLogs)
	reqs := single(store.ns+name, p)
	holdKey := func(n int) string { return fmt.Sprintf("%s%s:hold%d", store.ns, name, n) }
	answers := make([]creditAnswer, len(ops))
	last := "" // the last log entry read
	read := func() (int64, bool, []CreditEntry) {
		consumed, present, entries, err := readCredits(store, credits.Key, credits.Log, last, 10_000)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) > 0 {
			last = entries[len(entries)-1].ID
		}
		return consumed, present, entries
	}
	for i, op := range ops {
		a := &answers[i]
		before, present, _ := read()
		credits.Line += op.topUp
		c := credits
		switch {
		case op.lose:
			if ms, ok := store.Store.(*MemoryStore); ok {
				DropCounter(ms, c.Key)
			} else if err := store.rdb.Del(ctx, c.Key).Err(); err != nil {
				t.Fatal(err)
			}
			continue
		case op.rebuild:
			if _, err := logs.RebuildCredits(ctx, c.Key, c.Log, last, 4+int64(i)); err != nil {
				t.Fatal(err)
			}
			continue
		case op.settle >= 0:
			a.settlement, a.err = store.Settle(ctx, Settle{Key: holdKey(op.settle), Cost: op.cost, NowUS: op.at, Credits: &c})
		case op.hold >= 0:
			a.out, a.err = store.Check(ctx, Batch{Requests: reqs, Cost: op.cost, NowUS: op.at, Credits: &c,
				Hold: &Hold{ID: fmt.Sprintf("h%d", op.hold), Key: holdKey(op.hold), TTLUS: HourUS}})
		default:
			a.out, a.err = store.Check(ctx, Batch{Requests: reqs, Cost: op.cost, NowUS: op.at, DryRun: op.dry, Credits: &c})
		}
		if a.err != nil && !errors.Is(a.err, ErrHoldNotFound) && !errors.Is(a.err, ErrHoldConflict) {
			t.Fatalf("op %d %+v: %v", i, op, a.err)
		}
		after, stillPresent, entries := read()
		var moved, drawn int64
		for _, e := range entries {
			if e.Deferred == NotDeferred {
				moved += e.Units
				drawn = max(drawn, e.Units)
			} else if e.Units <= 0 {
				t.Fatalf("op %d %+v: deferred entry %+v", i, op, e)
			}
		}
		switch {
		case present != stillPresent:
			t.Fatalf("op %d %+v: counter present %v before, %v after: only the writer makes it", i, op, present, stillPresent)
		case present && after-before != moved:
			t.Fatalf("op %d %+v: counter moved %d, the log says %d (%+v)", i, op, after-before, moved, entries)
		case !present && drawn > 0:
			t.Fatalf("op %d %+v: %+v drawn on a missing counter", i, op, entries)
		case present && drawn > 0 && c.LineAt(op.at)-after < -c.Overdraft:
			t.Fatalf("op %d %+v: balance %d below −%d after drawing %+v", i, op, c.LineAt(op.at)-after, c.Overdraft, entries)
		}
	}
	return answers
}

// TestCreditsVectors pins the decisions of a balance: deny mode refuses
// what would go below −overdraft and takes nothing from the rules;
// overage mode draws what there is and admits the rest as overage; a dry
// run draws nothing; a hold settled below its estimate gives units back,
// overage first.
func TestCreditsVectors(t *testing.T) {
	rule := Params{Algorithm: FixedWindow, Limit: 100, PeriodUS: HourUS}
	forCreditStores(t, func(t *testing.T, store openStore, logs CreditLogs) {
		ctx := context.Background()
		// make makes the counter of the balance name, as the ledger's
		// writer does.
		make := func(name string, consumed int64) {
			if ok, err := logs.RebuildCredits(ctx, store.ns+name+":c", store.ns+name+":l", "", consumed); err != nil || !ok {
				t.Fatalf("make %s: %v, %v", name, ok, err)
			}
		}
		check := func(name string, c Credits, cost int64, dry bool, h *Hold) Outcome {
			c.Key, c.Log = store.ns+name+":c", store.ns+name+":l"
			return mustCheck(t, store, Batch{Requests: single(store.ns+name, rule), Cost: cost, NowUS: epoch, DryRun: dry, Credits: &c, Hold: h})
		}
		deny := Credits{Line: 10, Overdraft: 2}
		make("deny", 3)
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
		make("over", 0)
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
		if _, err := store.Settle(ctx, Settle{Key: h.Key, Cost: 2, NowUS: epoch + 1}); err != nil {
			t.Fatal(err)
		}
		consumed, _, log, err := readCredits(store, store.ns+"over:c", store.ns+"over:l", "", 100)
		if err != nil || consumed != 8 || len(log) != 3 || log[2].Units != -2 || log[2].Overage != -1 || log[2].HoldID != "h" {
			t.Errorf("after settling 5 at 2: consumed %d, log %+v, %v; want 8 and a last entry of −2 units, −1 overage", consumed, log, err)
		}
		// A second make changes nothing: the counter exists.
		if ok, err := logs.RebuildCredits(ctx, store.ns+"over:c", store.ns+"over:l", log[2].ID, 0); ok || err != nil {
			t.Errorf("making an existing counter: %v, %v", ok, err)
		}
	})
}

// TestCreditsSettledPastTheBalance: a hold settled above its estimate
// draws the difference while the balance stays at or above −overdraft;
// the rest is unpaid in deny mode (logged apart, never drawn) and overage
// in overage mode. The balance never goes below −overdraft.
func TestCreditsSettledPastTheBalance(t *testing.T) {
	rule := Params{Algorithm: GCRA, Limit: 1000, PeriodUS: SecondUS, Burst: 1000}
	forCreditStores(t, func(t *testing.T, store openStore, logs CreditLogs) {
		ctx := context.Background()
		for _, mode := range []struct {
			name                    string
			overage                 bool
			wantOverage, wantUnpaid int64
		}{{"deny", false, 0, 6}, {"overage", true, 6, 0}} {
			c := newBalance(t, store, mode.name, Credits{Line: 10, Overdraft: 2, Overage: mode.overage})
			h := &Hold{ID: "h-" + mode.name, Key: store.ns + mode.name + ":hold", TTLUS: HourUS}
			o := mustCheck(t, store, Batch{Requests: single(store.ns+mode.name, rule), Cost: 8, NowUS: epoch, Credits: &c, Hold: h})
			if !o.Admitted || o.Credits.Balance != 2 {
				t.Fatalf("%s: hold of 8 on 10: %+v", mode.name, o)
			}
			// Settled at 18: 4 more fit down to −2, 6 do not.
			if _, err := store.Settle(ctx, Settle{Key: h.Key, Cost: 18, NowUS: epoch + 1}); err != nil {
				t.Fatal(err)
			}
			consumed, _, log, err := readCredits(store, c.Key, c.Log, "", 100)
			if err != nil || len(log) != 2 {
				t.Fatalf("%s: log %+v, %v", mode.name, log, err)
			}
			e := log[1]
			if consumed != 12 || c.Line-consumed != -c.Overdraft || e.Units != 4 || e.Overage != mode.wantOverage || e.Unpaid != mode.wantUnpaid || e.HoldID != h.ID {
				t.Errorf("%s: settled 8 at 18 on 10+2: counter %d, entry %+v; want the balance at −2, 4 drawn, %d overage, %d unpaid",
					mode.name, consumed, e, mode.wantOverage, mode.wantUnpaid)
			}
		}
	})
}

// TestCreditsSettledOnTheBalanceNow: a settlement above its estimate
// draws on the balance's terms it carries (Settle.Credits), the terms the
// balance has at the settlement, not those of the hold's check: a top-up
// since the hold pays for the units taken (none of them overage or
// unpaid), a negative adjustment or a lowered overdraft stops the draw at
// the new −overdraft, and a grant of the new terms that has expired by
// the settlement counts for nothing. Without terms, or with terms of
// another balance, the hold's own decide.
func TestCreditsSettledOnTheBalanceNow(t *testing.T) {
	rule := Params{Algorithm: GCRA, Limit: 1000, PeriodUS: SecondUS, Burst: 1000}
	forCreditStores(t, func(t *testing.T, store openStore, logs CreditLogs) {
		ctx := context.Background()
		for _, tc := range []struct {
			name string
			// The balance at the hold (its counter made at 0): the hold of
			// 8 draws 8 of line, leaving line − 8.
			line, overdraft int64
			overage         bool
			// now makes the terms the settlement carries from the hold's;
			// nil sends none.
			now  func(c Credits) *Credits
			cost int64
			want CreditEntry
		}{
			{"overage-topped-up", 10, 0, true, func(c Credits) *Credits { c.Line = 30; return &c },
				18, CreditEntry{Units: 10}},
			{"deny-topped-up", 10, 0, false, func(c Credits) *Credits { c.Line = 30; return &c },
				18, CreditEntry{Units: 10}},
			{"deny-adjusted-down", 10, 2, false, func(c Credits) *Credits { c.Line = 7; return &c },
				12, CreditEntry{Units: 1, Unpaid: 3}},
			{"deny-adjusted-below", 10, 2, false, func(c Credits) *Credits { c.Line = 5; return &c },
				12, CreditEntry{Unpaid: 4}},
			{"overage-overdraft-lowered", 10, 5, true, func(c Credits) *Credits { c.Overdraft = 0; return &c },
				14, CreditEntry{Units: 2, Overage: 4}},
			{"deny-now-overage", 10, 0, false, func(c Credits) *Credits { c.Overage = true; return &c },
				14, CreditEntry{Units: 2, Overage: 4}},
			{"topped-up-grant-expired", 10, 0, true, func(c Credits) *Credits {
				c.Line, c.Expiring = 30, []CreditExpiry{{AtUS: epoch + 1, Units: 20}}
				return &c
			}, 18, CreditEntry{Units: 2, Overage: 8}},
			{"no-terms", 10, 0, true, func(c Credits) *Credits { return nil },
				18, CreditEntry{Units: 2, Overage: 8}},
			{"terms-of-another-balance", 10, 0, true, func(c Credits) *Credits { c.Key += "-other"; c.Line = 30; return &c },
				18, CreditEntry{Units: 2, Overage: 8}},
		} {
			c := newBalance(t, store, tc.name, Credits{Line: tc.line, Overdraft: tc.overdraft, Overage: tc.overage})
			h := &Hold{ID: tc.name, Key: store.ns + tc.name + ":hold", TTLUS: HourUS}
			if o := mustCheck(t, store, Batch{Requests: single(store.ns+tc.name, rule), Cost: 8, NowUS: epoch, Credits: &c, Hold: h}); !o.Admitted || o.Credits.Drawn != 8 {
				t.Fatalf("%s: hold of 8 on %d: %+v", tc.name, tc.line, o)
			}
			terms := tc.now(c)
			if _, err := store.Settle(ctx, Settle{Key: h.Key, Cost: tc.cost, NowUS: epoch + 1, Credits: terms}); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			consumed, _, log, err := readCredits(store, c.Key, c.Log, "", 100)
			if err != nil || len(log) != 2 {
				t.Fatalf("%s: log %+v, %v", tc.name, log, err)
			}
			got := log[1]
			if got.OpenedUS != epoch {
				t.Errorf("%s: the settlement's entry opened at %d, want %d (its hold's check)", tc.name, got.OpenedUS, epoch)
			}
			got.ID, got.AtUS, got.OpenedUS, got.HoldID = "", 0, 0, ""
			if got != tc.want || consumed != 8+tc.want.Units {
				t.Errorf("%s: settled 8 at %d: entry %+v, counter %d; want %+v, counter %d", tc.name, tc.cost, got, consumed, tc.want, 8+tc.want.Units)
			}
			if terms != nil && terms.Key == c.Key && got.Units > 0 && terms.LineAt(epoch+1)-consumed < -terms.Overdraft {
				t.Errorf("%s: balance %d after the settlement, below −%d", tc.name, terms.LineAt(epoch+1)-consumed, terms.Overdraft)
			}
		}
		// Terms no check would carry are refused before the store.
		bad := Credits{Key: store.ns + "bad:c", Overdraft: -1}
		if _, err := store.Settle(ctx, Settle{Key: store.ns + "none", Cost: 1, Credits: &bad}); !errors.Is(err, ErrBadCredits) {
			t.Errorf("a negative overdraft: %v, want ErrBadCredits", err)
		}
	})
}

// TestCreditsUnknownBalance: on a missing counter (the store lost it, or
// the ledger's writer has not made it yet) nothing is drawn and the
// counter is not made: deny mode refuses a check that costs something
// (admitting a dry run and a cost of 0), overage mode admits it and logs
// its units deferred, a hold is refused in both, and a settlement above
// a hold's estimate is logged deferred (unpaid in deny mode). Once the
// writer has made the counter from the ledger, checks draw on it again.
func TestCreditsUnknownBalance(t *testing.T) {
	rule := Params{Algorithm: GCRA, Limit: 1000, PeriodUS: SecondUS, Burst: 1000}
	forCreditStores(t, func(t *testing.T, store openStore, logs CreditLogs) {
		ctx := context.Background()
		reqs := single(store.ns+"k", rule)
		deny := Credits{Key: store.ns + "deny:c", Log: store.ns + "deny:l", Line: 100}
		over := Credits{Key: store.ns + "over:c", Log: store.ns + "over:l", Line: 100, Overage: true}
		check := func(c Credits, cost int64, dry bool, h *Hold) Outcome {
			return mustCheck(t, store, Batch{Requests: reqs, Cost: cost, NowUS: epoch, DryRun: dry, Credits: &c, Hold: h})
		}
		if o := check(deny, 5, false, nil); o.Admitted || o.Credits != (CreditResult{Unknown: true}) {
			t.Errorf("deny mode, unknown balance: %+v, want refused", o)
		}
		if o := check(deny, 0, false, nil); o.Results[0].Remaining != 1000 {
			t.Errorf("the refused check took %d from the rule", 1000-o.Results[0].Remaining)
		}
		for _, tc := range []struct {
			cost int64
			dry  bool
		}{{0, false}, {5, true}} {
			if o := check(deny, tc.cost, tc.dry, nil); !o.Admitted || o.Credits != (CreditResult{Unknown: true, Allowed: true}) {
				t.Errorf("deny mode, unknown balance, cost %d dry %v: %+v, want admitted", tc.cost, tc.dry, o)
			}
		}
		if o := check(over, 5, false, nil); !o.Admitted || o.Credits != (CreditResult{Unknown: true, Allowed: true}) {
			t.Errorf("overage mode, unknown balance: %+v, want admitted, nothing drawn", o)
		}
		h := &Hold{ID: "h", Key: store.ns + "hold", TTLUS: HourUS}
		if o := check(over, 5, false, h); o.Admitted || !o.Credits.Unknown {
			t.Errorf("a hold on an unknown balance: %+v, want refused", o)
		}
		consumed, present, log, err := readCredits(store, over.Key, over.Log, "", 100)
		if err != nil || present || consumed != 0 || len(log) != 1 || log[0].Units != 5 || log[0].Deferred != DeferredOverage {
			t.Fatalf("overage log: present %v, %+v, %v; want one deferred entry of 5 and no counter", present, log, err)
		}
		if _, present, log, _ := readCredits(store, deny.Key, deny.Log, "", 100); present || len(log) != 0 {
			t.Errorf("deny mode: counter present %v, log %+v; want neither", present, log)
		}

		// The writer cannot make the counter while entries it has not
		// recorded are in the log; once it has, it can.
		if ok, err := logs.RebuildCredits(ctx, over.Key, over.Log, "", 40); ok || err != nil {
			t.Errorf("made over an unrecorded entry: %v, %v", ok, err)
		}
		if ok, err := logs.RebuildCredits(ctx, over.Key, over.Log, log[0].ID, 40); !ok || err != nil {
			t.Fatalf("make: %v, %v", ok, err)
		}
		if o := check(over, 5, false, nil); !o.Admitted || o.Credits != (CreditResult{Allowed: true, Balance: 55, Drawn: 5}) {
			t.Errorf("after the make: %+v", o)
		}

		// A hold of 4 on a balance of 10, whose counter is then lost:
		// its settlement at 9 cannot know the balance, and is logged
		// deferred; one at 1 gives 3 back.
		for _, tc := range []struct {
			name     string
			overage  bool
			cost     int64
			want     CreditEntry
			deferred Deferred
		}{
			{"deny-more", false, 9, CreditEntry{Units: 5, Deferred: DeferredUnpaid}, DeferredUnpaid},
			{"over-more", true, 9, CreditEntry{Units: 5, Deferred: DeferredOverage}, DeferredOverage},
			{"deny-less", false, 1, CreditEntry{Units: -3}, NotDeferred},
		} {
			c := newBalance(t, store, tc.name, Credits{Line: 10, Overage: tc.overage})
			h := &Hold{ID: tc.name, Key: store.ns + tc.name + ":hold", TTLUS: HourUS}
			if o := check(c, 4, false, h); !o.Admitted || o.Credits.Drawn != 4 {
				t.Fatalf("%s: hold of 4 on 10: %+v", tc.name, o)
			}
			if ms, ok := store.Store.(*MemoryStore); ok {
				DropCounter(ms, c.Key)
			} else if err := store.rdb.Del(ctx, c.Key).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := store.Settle(ctx, Settle{Key: h.Key, Cost: tc.cost, NowUS: epoch + 1}); err != nil {
				t.Fatal(err)
			}
			_, present, log, err := readCredits(store, c.Key, c.Log, "", 100)
			tc.want.AtUS, tc.want.OpenedUS, tc.want.HoldID = epoch+1, epoch, tc.name
			if err != nil || present || len(log) != 2 {
				t.Fatalf("%s: present %v, log %+v, %v", tc.name, present, log, err)
			}
			log[1].ID = ""
			if log[1] != tc.want {
				t.Errorf("%s: settlement logged %+v, want %+v", tc.name, log[1], tc.want)
			}
		}
	})
}

// TestCreditsExpireAtTheStoresClock: a grant stops counting at its
// expiry by the clock the check is decided at (Redis's TIME when the
// caller gives none), not the caller's: a check at the store's now just
// before the expiry may draw on it, one just after may not, and a
// settlement after the expiry draws only on what is left.
func TestCreditsExpireAtTheStoresClock(t *testing.T) {
	rule := Params{Algorithm: GCRA, Limit: 1000, PeriodUS: SecondUS, Burst: 1000}
	forCreditStores(t, func(t *testing.T, store openStore, logs CreditLogs) {
		ctx := context.Background()
		reqs := single(store.ns+"k", rule)
		c := Credits{Key: store.ns + "c", Log: store.ns + "l", Line: 30, Expiring: []CreditExpiry{{AtUS: epoch + 100, Units: 20}}}
		if _, err := logs.RebuildCredits(ctx, c.Key, c.Log, "", 0); err != nil {
			t.Fatal(err)
		}
		at := func(now, cost int64, h *Hold) Outcome {
			return mustCheck(t, store, Batch{Requests: reqs, Cost: cost, NowUS: now, Credits: &c, Hold: h})
		}
		if o := at(epoch+99, 25, nil); !o.Admitted || o.Credits.Balance != 5 {
			t.Errorf("25 of 30 before the expiry: %+v", o)
		}
		if o := at(epoch+100, 1, nil); o.Admitted || o.Credits.Balance != -15 {
			t.Errorf("1 at the expiry, 20 of the 30 gone: %+v, want refused on −15", o)
		}
		// The ledger expired the 20 (line 10), then a top-up of 100, 60
		// of which expire at +200.
		c.Line, c.Expiring = 110, []CreditExpiry{{AtUS: epoch + 200, Units: 60}}
		h := &Hold{ID: "h", Key: store.ns + "hold", TTLUS: HourUS}
		if o := at(epoch+150, 10, h); !o.Admitted || o.Credits.Balance != 75 {
			t.Fatalf("hold of 10 on 105: %+v", o)
		}
		// After the expiry 15 are left: the settlement at 40 takes them,
		// and 15 more are unpaid (deny mode).
		if _, err := store.Settle(ctx, Settle{Key: h.Key, Cost: 40, NowUS: epoch + 200}); err != nil {
			t.Fatal(err)
		}
		consumed, _, log, err := readCredits(store, c.Key, c.Log, "", 100)
		if err != nil || consumed != 50 || log[len(log)-1].Units != 15 || log[len(log)-1].Unpaid != 15 {
			t.Errorf("settled at 40 after the expiry: counter %d, log %+v, %v; want 15 drawn, 15 unpaid", consumed, log, err)
		}
	})
	// With Redis's clock: an expiry a minute ahead of it still counts, one
	// a minute behind it does not, whatever the caller's clock says.
	for _, sc := range redisStores() {
		t.Run(sc.name+"/TIME", func(t *testing.T) {
			store := sc.open(t)
			for _, tc := range []struct {
				name    string
				shift   time.Duration
				balance int64
			}{{"ahead", time.Minute, 30}, {"behind", -time.Minute, 10}} {
				c := newBalance(t, store, tc.name, Credits{Line: 30,
					Expiring: []CreditExpiry{{AtUS: redisNow(t, store) + tc.shift.Microseconds(), Units: 20}}})
				o := mustCheck(t, store, Batch{Requests: single(store.ns+tc.name, rule), Cost: 0, Credits: &c})
				if o.Credits.Balance != tc.balance {
					t.Errorf("expiry a minute %s Redis's clock: balance %d, want %d", tc.name, o.Credits.Balance, tc.balance)
				}
			}
		})
	}
}

// redisNow returns the Redis server's clock (µs).
func redisNow(t *testing.T, store openStore) int64 {
	t.Helper()
	return redisTime(t, store.rdb, store.ns)
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
				c := newBalance(t, store, name, Credits{Line: 500, Overdraft: overdraft})
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
				consumed, _, log, err := readCredits(store, c.Key, c.Log, "", 10_000)
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

// newBalance returns c as the balance name of store (its counter and log
// keys), its counter made at 0 as the ledger's writer makes it.
func newBalance(t *testing.T, store openStore, name string, c Credits) Credits {
	t.Helper()
	c.Key, c.Log = store.ns+name+":c", store.ns+name+":l"
	if _, err := store.Store.(CreditLogs).RebuildCredits(context.Background(), c.Key, c.Log, "", 0); err != nil {
		t.Fatal(err)
	}
	return c
}

// readCredits reads a balance through store's CreditLogs.
func readCredits(store openStore, key, log, after string, max int) (consumed int64, present bool, entries []CreditEntry, err error) {
	r, err := store.Store.(CreditLogs).ReadCredits(context.Background(), key, log, after, max)
	return r.Consumed, r.Present, r.Entries, err
}

// forCreditStores runs body as a subtest on every store, with the store's
// credit logs (the ledger writer's side of a balance).
func forCreditStores(t *testing.T, body func(t *testing.T, store openStore, logs CreditLogs)) {
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) { store := sc.open(t); body(t, store, store.Store.(CreditLogs)) })
	}
}
