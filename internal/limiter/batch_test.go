package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	. "github.com/tollgate/tollgate/internal/limiter"
)

// genBatch returns 2–4 rules of random algorithms on keys under ns (one
// hash tag), about a third of them shadow rules.
func genBatch(r *rand.Rand, ns string, seed uint64) []Request {
	reqs := make([]Request, 2+r.IntN(3))
	for i := range reqs {
		rc := ruleConfigs[r.IntN(len(ruleConfigs))]
		reqs[i] = Request{Key: fmt.Sprintf("%sb%d-%d", ns, seed, i), Params: rc.p, Shadow: r.IntN(3) == 0}
	}
	return reqs
}

// batchScale returns the generator scale of a batch: its shortest window
// and interval, and its smallest capacity.
func batchScale(reqs []Request) (window, interval, capy int64) {
	window, interval, capy = DayUS*31, DayUS, int64(1)<<40
	for _, r := range reqs {
		w, i := scale(r.Params)
		window, interval, capy = min(window, w), min(interval, i), min(capy, capacity(r.Params))
	}
	return window, interval, capy
}

// TestBatchesAreAllOrNothing replays random multi-rule batches of mixed
// algorithms, with shadow rules, through every store (on the Cluster all
// keys share one hash tag, so no batch may fail with CROSSSLOT). Outcomes
// must equal the model's: a check is admitted when every enforcing rule
// allows it; then, and only then, every rule that allowed it (shadow
// rules too) advances its state. On Redis a check that admits nothing
// leaves every key of the batch byte for byte as it was.
func TestBatchesAreAllOrNothing(t *testing.T) {
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			store := sc.open(t)
			for seed := range uint64(8) {
				r := seeded("batch", seed)
				reqs := genBatch(r, store.ns, seed)
				window, interval, capy := batchScale(reqs)
				backwards := sc.name != "memory" && seed%2 == 1
				checks := genChecksScaled(r, window, interval, capy, 150, backwards)
				want := replay(t, newModel(), reqs, checks)
				got := replayWatching(t, store, reqs, checks)
				if err := sameOutcomes(got, want, checks); err != nil {
					t.Fatalf("seed %d, rules %+v: %v", seed, reqs, err)
				}
				for i, o := range got {
					enforced := true
					for j, res := range o.Results {
						if !res.Allowed && !reqs[j].Shadow {
							enforced = false
						}
					}
					if o.Admitted != enforced {
						t.Fatalf("seed %d, check %d: admitted %v, but enforcing rules allowed: %v", seed, i, o.Admitted, enforced)
					}
				}
			}
		})
	}
}

// TestDenyingRuleLeavesOtherRulesUntouched: a batch of four algorithms
// where the fixed window is spent is denied, and the other three rules
// (one of them shadow) are exactly where they were.
func TestDenyingRuleLeavesOtherRulesUntouched(t *testing.T) {
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			store := sc.open(t)
			ctx := context.Background()
			reqs := []Request{
				{Key: store.ns + "gcra", Params: Params{Algorithm: GCRA, Limit: 10, PeriodUS: SecondUS}},
				{Key: store.ns + "log", Params: Params{Algorithm: SlidingWindowLog, Limit: 10, PeriodUS: SecondUS}},
				{Key: store.ns + "bucket", Params: Params{Algorithm: TokenBucket, Limit: 10, PeriodUS: SecondUS}, Shadow: true},
				{Key: store.ns + "window", Params: Params{Algorithm: FixedWindow, Limit: 2, PeriodUS: MinuteUS}},
			}
			check := func(b Batch) Outcome {
				t.Helper()
				out, err := store.Check(ctx, b)
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			for range 2 {
				if out := check(Batch{Requests: reqs, Cost: 1, NowUS: epoch}); !out.Admitted {
					t.Fatalf("got denied %+v, want admitted", out)
				}
			}
			before := check(Batch{Requests: reqs[:3], NowUS: epoch + 10*ms})
			var raw []rawKey
			if store.rdb != nil {
				raw = rawKeys(t, store.rdb, keysOf(reqs))
			}
			out := check(Batch{Requests: reqs, Cost: 3, NowUS: epoch + 10*ms})
			if out.Admitted || out.Results[3].Allowed {
				t.Fatalf("got %+v, want denied by the fixed window", out)
			}
			for i := range 3 {
				if !out.Results[i].Allowed {
					t.Errorf("rule %d: got denied, want allowed on its own", i)
				}
			}
			if after := check(Batch{Requests: reqs[:3], NowUS: epoch + 10*ms}); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("peek after the denied batch: got %+v, want %+v", after, before)
			}
			if store.rdb != nil {
				if after := rawKeys(t, store.rdb, keysOf(reqs)); fmt.Sprint(after) != fmt.Sprint(raw) {
					t.Errorf("keys changed by a denied batch")
				}
			}
		})
	}
}

// TestShadowRules: a shadow rule is evaluated and reported but never
// denies; its own state advances only when the whole check is admitted
// and it allowed.
func TestShadowRules(t *testing.T) {
	enforce := Params{Algorithm: FixedWindow, Limit: 2, PeriodUS: MinuteUS}
	shadow := Params{Algorithm: GCRA, Limit: 1, PeriodUS: MinuteUS, Burst: 3}
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			store := sc.open(t)
			reqs := []Request{
				{Key: store.ns + "enforce", Params: enforce},
				{Key: store.ns + "shadow", Params: shadow, Shadow: true},
			}
			steps := []struct {
				name         string
				cost         int64
				admitted     bool
				enforceAllow bool
				shadow       Result
			}{
				// Both allow: both advance (shadow remaining 3 → 1).
				{"both allow", 2, true, true, allow(1, 2*MinuteUS)},
				// The enforcing rule denies: the shadow rule allowed but
				// must not advance.
				{"enforcing rule denies", 1, false, false, allow(0, 3*MinuteUS)},
				// Still 1 left in the shadow rule.
				{"shadow peek", 0, true, true, allow(1, 2*MinuteUS)},
			}
			for _, s := range steps {
				out, err := store.Check(context.Background(), Batch{Requests: reqs, Cost: s.cost, NowUS: epoch})
				if err != nil {
					t.Fatal(err)
				}
				if out.Admitted != s.admitted || out.Results[0].Allowed != s.enforceAllow || out.Results[1] != s.shadow {
					t.Errorf("%s: got %+v, want admitted %v, enforcing rule allowed %v, shadow %+v",
						s.name, out, s.admitted, s.enforceAllow, s.shadow)
				}
			}
			// A shadow rule that denies never denies the check.
			solo := []Request{{Key: store.ns + "shadow", Params: shadow, Shadow: true}}
			out, err := store.Check(context.Background(), Batch{Requests: solo, Cost: 3, NowUS: epoch})
			if err != nil {
				t.Fatal(err)
			}
			if !out.Admitted || out.Results[0].Allowed {
				t.Errorf("denying shadow rule: got %+v, want admitted with the shadow rule's denial reported", out)
			}
		})
	}
}

// TestCheckRejectsInvalidBatches: an empty batch and a negative cost are
// errors on every store.
func TestCheckRejectsInvalidBatches(t *testing.T) {
	p := Params{Algorithm: GCRA, Limit: 1, PeriodUS: SecondUS}
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			store := sc.open(t)
			tests := []struct {
				name  string
				batch Batch
				want  error
			}{
				{"empty", Batch{NowUS: epoch}, ErrEmptyBatch},
				{"negative cost", Batch{Requests: single(store.ns+"k", p), Cost: -1, NowUS: epoch}, ErrNegativeCost},
			}
			for _, tt := range tests {
				if _, err := store.Check(context.Background(), tt.batch); !errors.Is(err, tt.want) {
					t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
				}
			}
		})
	}
}

// TestClusterRefusesKeysWithoutCommonHashTag shows why every key of a
// batch must share a hash tag: on the Cluster a batch over two slots
// fails with CROSSSLOT, and the same batch with a shared tag passes.
func TestClusterRefusesKeysWithoutCommonHashTag(t *testing.T) {
	store := clusterStoreCase().open(t)
	prefix := strings.TrimSuffix(store.ns, "{c}:")
	p := Params{Algorithm: GCRA, Limit: 10, PeriodUS: SecondUS}
	split := []Request{{Key: prefix + "{tenant-a}:x", Params: p}, {Key: prefix + "{tenant-b}:x", Params: p}}
	if _, err := store.Check(context.Background(), Batch{Requests: split, Cost: 1, NowUS: epoch}); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("keys in two slots: got %v, want a CROSSSLOT error", err)
	}
	shared := []Request{{Key: store.ns + "a", Params: p}, {Key: store.ns + "b", Params: p}}
	if _, err := store.Check(context.Background(), Batch{Requests: shared, Cost: 1, NowUS: epoch}); err != nil {
		t.Errorf("keys sharing a hash tag: %v", err)
	}
}
