package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestLeanDecidesAsCheckLua: the same random calls (one check or several,
// one to three rules of every shape lean.lua takes, global_shared or not,
// on keys that checks share) through lean.lua and through check.lua, each
// on keys of its own, give identical answers and leave identical state:
// the same keys, types, values and times to live, and after every call
// the same region outbox (the same fields, for its own keys, and units).
// Month bounds from the caller are sometimes another month's, so that
// lean.lua's own calendar arithmetic is compared too.
func TestLeanDecidesAsCheckLua(t *testing.T) {
	c, prefix := testenv.Redis(t)
	ctx := context.Background()
	lean, general := New(c), New(c)
	lean.ExtraTTL, general.ExtraTTL = time.Minute, time.Minute
	general.NoLean = true
	if err := LoadScript(ctx, c); err != nil {
		t.Fatal(err)
	}

	defer func(f func(int64) (int64, int64)) { monthBounds = f }(monthBounds)
	var wrongMonth int // 0: the right bounds; -1, 1: the month before, after
	monthBounds = func(nowUS int64) (int64, int64) {
		start, end := monthOf(nowUS)
		switch wrongMonth {
		case -1:
			before, _ := monthOf(start - 1)
			return before, start
		case 1:
			_, after := monthOf(end)
			return end, after
		}
		return start, end
	}

	for seed := range uint64(12) {
		rng := rand.New(rand.NewPCG(seed, 18))
		// Up to a second before a month ends, so that months change.
		now := time.Date(2026, time.Month(1+seed), 1, 0, 0, 0, 0, time.UTC).UnixMicro() - rng.Int64N(limiter.SecondUS)
		params := make([]limiter.Params, 6)
		for i := range params {
			params[i] = randomLeanParams(rng)
		}
		// Each side's keys have a hash tag of their own, and so an outbox
		// of their own (a tag is one byte: statekey.OutboxKey).
		ns := [2]string{fmt.Sprintf("%s{%c}", prefix, 'A'+2*seed), fmt.Sprintf("%s{%c}", prefix, 'A'+2*seed+1)}
		expiry := map[string][2]int64{} // PEXPIRETIME of lean's and check.lua's key
		for step := range 150 {
			now += []int64{0, 1, 999, 50_000, limiter.SecondUS, 40 * limiter.MinuteUS}[rng.IntN(6)]
			wrongMonth = rng.IntN(5) - 2
			if wrongMonth == 2 || wrongMonth == -2 {
				wrongMonth = 0
			}
			var calls [2][]*pending
			var keys []string
			// A third of the calls are one check of one rule (lean1.lua's
			// when it is not a fixed window).
			lone := rng.IntN(3) == 0
			for range 1 + rng.IntN(3) {
				b := limiter.Batch{Cost: int64(rng.IntN(5)), DryRun: rng.IntN(8) == 0, ReportState: rng.IntN(2) == 0, NowUS: now}
				rules := 1 + rng.IntN(3)
				if lone {
					rules = 1
				}
				for _, r := range rng.Perm(len(params))[:rules] {
					// Rules share keys between checks, as two plans' rules
					// never do but a batch's checks of one caller do.
					key := fmt.Sprintf(":%d", r)
					b.Requests = append(b.Requests, limiter.Request{Key: key, Params: params[r], Shadow: rng.IntN(6) == 0})
					keys = append(keys, key)
				}
				if !leanBatch(&b) {
					t.Fatalf("%+v: not a lean shape", b)
				}
				for i := range ns {
					bb := b
					bb.Requests = slices.Clone(b.Requests)
					for j := range bb.Requests {
						bb.Requests[j].Key = ns[i] + bb.Requests[j].Key
					}
					calls[i] = append(calls[i], &pending{batch: bb})
				}
				if lone {
					break
				}
			}
			// Both calls in one transaction, between readings of Redis's
			// clock: a key each wrote expires at most the clock's advance
			// apart from the other's (within a millisecond, mostly 0).
			// EVAL with the scripts' source, not EVALSHA: a SCRIPT FLUSH
			// on the server between LoadScript and here would fail one
			// call with NOSCRIPT after the other had run, and a
			// transaction cannot fall back to EVAL as Script.Run does.
			var call [2]*call
			var cmds [2]*redis.Cmd
			var clock [3]*redis.TimeCmd
			if _, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				for i, s := range []*Store{lean, general} {
					clock[i] = pipe.Time(ctx)
					call[i] = getCall()
					script, _ := s.prepare(call[i], calls[i])
					cmds[i] = script.Eval(ctx, pipe, call[i].keys, call[i].args...)
				}
				clock[2] = pipe.Time(ctx)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			var ms [3]int64
			for i, tc := range clock {
				ms[i] = tc.Val().UnixMilli()
			}
			for i := range call {
				reply, err := cmds[i].Text()
				call[i].decode(calls[i], reply, err)
				putCall(call[i])
			}
			for i := range calls[0] {
				l, g := calls[0][i], calls[1][i]
				if l.err != nil || g.err != nil {
					t.Fatalf("seed %d step %d: errors %v, %v", seed, step, l.err, g.err)
				}
				if !reflect.DeepEqual(l.out, g.out) {
					t.Fatalf("seed %d step %d check %d (%+v):\n lean    %+v\n general %+v", seed, step, i, g.batch, l.out, g.out)
				}
			}
			sameOutbox(t, c, ns[0], ns[1], fmt.Sprintf("seed %d step %d", seed, step))
			for _, key := range slices.Compact(slices.Sorted(slices.Values(keys))) {
				exp := sameState(t, c, ns[0]+key, ns[1]+key, fmt.Sprintf("seed %d step %d", seed, step))
				was, seen := expiry[key]
				// Unless neither changed (neither script wrote the key), both
				// were set now: lean.lua's at a time in [ms0, ms1], check.lua's
				// in [ms1, ms2], so the same time to live puts them 0 to
				// ms2 - ms0 apart.
				if changed := !seen || exp != was; changed && exp[0] >= 0 && (exp[1] < exp[0] || exp[1]-exp[0] > ms[2]-ms[0]) {
					t.Fatalf("seed %d step %d: %s expires at %d ms by lean.lua, %d by check.lua; Redis's clock read %v",
						seed, step, key, exp[0], exp[1], ms)
				}
				expiry[key] = exp
			}
		}
	}
}

// randomLeanParams returns valid parameters of a shape lean.lua decides.
func randomLeanParams(rng *rand.Rand) limiter.Params {
	periods := []int64{limiter.SecondUS, 7 * limiter.SecondUS, limiter.MinuteUS, limiter.HourUS}
	limit := 1 + rng.Int64N(12)
	p := limiter.Params{Limit: limit, PeriodUS: periods[rng.IntN(len(periods))]}
	if rng.IntN(2) == 0 {
		p.Burst = 1 + rng.Int64N(2*limit)
	}
	switch rng.IntN(5) {
	case 0:
		p.Algorithm = limiter.GCRA
	case 1:
		p.Algorithm, p.Shape = limiter.LeakyBucket, rng.IntN(2) == 0
	case 2:
		p.Algorithm = limiter.TokenBucket
		if rng.IntN(3) == 0 {
			p.Limit, p.Burst = 0, 1+rng.Int64N(8)
		}
	default:
		p = limiter.Params{Algorithm: limiter.FixedWindow, Limit: 1 + rng.Int64N(20), PeriodUS: 31 * limiter.DayUS,
			Calendar: limiter.CalendarMonth}
	}
	if problems := p.Validate(); len(problems) > 0 {
		panic(fmt.Sprintf("%+v: %v", p, problems))
	}
	p.Exchange = rng.IntN(2) == 0 // a global_shared rule
	return p
}

// sameOutbox fails unless the outboxes of hash tags a and b (each a
// prefix and a tag, as "p{t}") hold the same fields, each naming its own
// side's key, with the same units; then it empties both, so that the
// next call's entries are compared on their own.
func sameOutbox(t *testing.T, c *redis.Client, a, b string, where string) {
	t.Helper()
	ctx := context.Background()
	read := func(tag string) map[string]string {
		out := map[string]string{}
		for f, v := range c.HGetAll(ctx, tag+"x").Val() {
			def, key, ok := strings.Cut(f, " "+tag)
			if !ok {
				t.Fatalf("%s: outbox field %q of %s names another tag's key", where, f, tag)
			}
			out[def+" <tag>"+key] = v
		}
		return out
	}
	la, lb := read(a), read(b)
	if !reflect.DeepEqual(la, lb) {
		t.Fatalf("%s: lean left the outbox %v, check.lua %v", where, la, lb)
	}
	if err := c.Del(ctx, a+"x", b+"x").Err(); err != nil {
		t.Fatal(err)
	}
}

// sameState fails unless keys a and b hold the same type and value, and
// both expire or neither does; it returns their PEXPIRETIME.
func sameState(t *testing.T, c *redis.Client, a, b string, where string) [2]int64 {
	t.Helper()
	ctx := context.Background()
	dump := func(key string) (string, any, int64) {
		typ := c.Type(ctx, key).Val()
		var val any
		switch typ {
		case "string":
			val = c.Get(ctx, key).Val()
		case "hash":
			val = c.HGetAll(ctx, key).Val()
		case "none":
		default:
			t.Fatalf("%s: %s is a %s", where, key, typ)
		}
		exp, err := c.Do(ctx, "PEXPIRETIME", key).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return typ, val, exp
	}
	ta, va, ea := dump(a)
	tb, vb, eb := dump(b)
	if ta != tb || !reflect.DeepEqual(va, vb) {
		t.Fatalf("%s: lean left %s %v, check.lua %s %v", where, ta, va, tb, vb)
	}
	if (ea < 0) != (eb < 0) {
		t.Fatalf("%s: lean's key expires at %d ms, check.lua's at %d", where, ea, eb)
	}
	return [2]int64{ea, eb}
}

// TestPrepareChoosesLeanForCommonShapes: lean.lua takes the single-number
// algorithms and calendar-month fixed windows without holds, global_shared
// or not; every other call (a global_split rule's too), or a store with
// NoLean, goes to check.lua.
func TestPrepareChoosesLeanForCommonShapes(t *testing.T) {
	gcra := limiter.Params{Algorithm: limiter.GCRA, Limit: 5, PeriodUS: limiter.SecondUS}
	quota := limiter.Params{Algorithm: limiter.FixedWindow, Limit: 100, PeriodUS: 31 * limiter.DayUS, Calendar: limiter.CalendarMonth}
	day := quota
	day.Calendar = limiter.CalendarDay
	log := limiter.Params{Algorithm: limiter.SlidingWindowLog, Limit: 5, PeriodUS: limiter.SecondUS}
	batch := func(ps ...limiter.Params) *pending {
		b := limiter.Batch{Cost: 1}
		for i, p := range ps {
			b.Requests = append(b.Requests, limiter.Request{Key: fmt.Sprintf("{t}%d", i), Params: p})
		}
		return &pending{batch: b}
	}
	held := batch(gcra)
	held.batch.Hold = &limiter.Hold{ID: "h", Key: "{t}h", TTLUS: limiter.SecondUS}
	bucket := limiter.Params{Algorithm: limiter.TokenBucket, Limit: 10, PeriodUS: limiter.SecondUS}
	sharedGCRA, sharedQuota := gcra, quota
	sharedGCRA.Exchange, sharedQuota.Exchange = true, true
	splitQuota := quota
	splitQuota.Split = true
	for _, tc := range []struct {
		name   string
		checks []*pending
		want   *redis.Script
	}{
		{"one GCRA rule", []*pending{batch(gcra)}, lean1Script},
		{"one bucket", []*pending{batch(bucket)}, lean1Script},
		{"the quota alone", []*pending{batch(quota)}, leanScript},
		{"two rules and the quota", []*pending{batch(gcra, bucket, quota)}, leanScript},
		{"several checks of one rule", []*pending{batch(gcra), batch(gcra)}, leanScript},
		{"several checks", []*pending{batch(gcra), batch(quota, gcra)}, leanScript},
		{"a batch larger than maxLeanChecks", slices.Repeat([]*pending{batch(gcra)}, maxLeanChecks+1), checkScript},
		{"a global_shared GCRA rule", []*pending{batch(sharedGCRA)}, lean1Script},
		{"a global_shared rule and a regional one", []*pending{batch(sharedGCRA, bucket)}, leanScript},
		{"a global_shared quota", []*pending{batch(sharedQuota)}, leanScript},
		{"a global_split window", []*pending{batch(gcra, splitQuota)}, checkScript},
		{"a day window", []*pending{batch(gcra, day)}, checkScript},
		{"a sliding log", []*pending{batch(log)}, checkScript},
		{"a hold", []*pending{held}, checkScript},
		{"one check of another shape among lean ones", []*pending{batch(gcra), batch(log)}, checkScript},
	} {
		for _, noLean := range []bool{false, true} {
			s := New(redis.NewClient(&redis.Options{}))
			s.NoLean = noLean
			c := getCall()
			script, _ := s.prepare(c, tc.checks)
			putCall(c)
			want := tc.want
			if noLean {
				want = checkScript
			}
			if script != want {
				t.Errorf("%s (NoLean %v): script %s chosen, want %s", tc.name, noLean, script.Hash(), want.Hash())
			}
		}
	}
}

// TestLeanKnowsEveryField: leanBatch was written for these fields of a
// batch, a request and a rule's parameters. A new field may change what
// check.lua decides; teach leanBatch (and lean.lua) about it, or let it
// send such checks to check.lua, then add it here.
func TestLeanKnowsEveryField(t *testing.T) {
	for _, tc := range []struct {
		typ   reflect.Type
		known []string
	}{
		{reflect.TypeFor[limiter.Batch](), []string{"Requests", "Cost", "DryRun", "NowUS", "ReportState", "Hold", "Lease", "Credits", "Money", "Usage"}},
		{reflect.TypeFor[limiter.Request](), []string{"Key", "Params", "Shadow"}},
		{reflect.TypeFor[limiter.Params](), []string{"Algorithm", "Limit", "PeriodUS", "Burst", "Shape", "Calendar", "AnchorFirstRequest", "Seed", "Exchange", "Split"}},
	} {
		for i := range tc.typ.NumField() {
			if name := tc.typ.Field(i).Name; !slices.Contains(tc.known, name) {
				t.Errorf("%s.%s: leanBatch does not know this field", tc.typ, name)
			}
		}
	}
}

// TestLeanScriptsTakeCheckLuaConstants: the lean scripts declare no
// wire constant of their own (check.lua's prelude gives them, which
// TestWireConstantsMatchScript compares with wire.go), and their sources
// as Redis runs them have it.
func TestLeanScriptsTakeCheckLuaConstants(t *testing.T) {
	decl := regexp.MustCompile(`(?m)^local (?:alg|flag)[A-Za-z]+ = `)
	for _, src := range []struct{ name, raw, run string }{
		{"lean.lua", leanLua, leanSource(leanLua)},
		{"lean1.lua", lean1Lua, leanSource(lean1Lua)},
		{"rate.lua", rateLua, ""},
	} {
		if m := decl.FindString(src.raw); m != "" {
			t.Errorf("%s declares %q itself", src.name, m)
		}
		if src.run != "" && !strings.Contains(src.run, checkPrelude()) {
			t.Errorf("%s as run lacks check.lua's prelude", src.name)
		}
	}
}

// TestLoadScriptLoadsTheLeanScripts: LoadScript caches lean.lua and
// lean1.lua beside check.lua, so that the first lone checks do not pay
// for EVAL.
func TestLoadScriptLoadsTheLeanScripts(t *testing.T) {
	c, _ := testenv.Redis(t)
	ctx := context.Background()
	if err := LoadScript(ctx, c); err != nil {
		t.Fatal(err)
	}
	exists, err := c.ScriptExists(ctx, checkScript.Hash(), leanScript.Hash(), lean1Script.Hash()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(exists, []bool{true, true, true}) {
		t.Errorf("check.lua, lean.lua, lean1.lua cached: %v", exists)
	}
}
