package redisstore

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/limiter"
)

// TestWireConstantsMatchScript: the algorithm codes, flags, options, the
// packings of refs, holds and the lean scripts' kind, the hold
// retention, the journal's cap and the reply's admitted-unjournaled code
// are declared in check.lua with
// the same names and values as in wire.go, every algorithm has a code of
// its own, and the script names no other.
func TestWireConstantsMatchScript(t *testing.T) {
	want := map[string]int64{
		"algGCRA":                 algGCRA,
		"algTokenBucket":          algTokenBucket,
		"algLeakyBucket":          algLeakyBucket,
		"algFixedWindow":          algFixedWindow,
		"algSlidingWindowLog":     algSlidingWindowLog,
		"algSlidingWindowCounter": algSlidingWindowCounter,
		"algConcurrency":          algConcurrency,
		"flagShape":               flagShape,
		"flagCalendarDay":         flagCalendarDay,
		"flagCalendarMonth":       flagCalendarMonth,
		"flagAnchorFirstRequest":  flagAnchorFirstRequest,
		"flagSeedOpen":            flagSeedOpen,
		"flagSeedClosed":          flagSeedClosed,
		"flagExchange":            flagExchange,
		"flagSplit":               flagSplit,
		"optDryRun":               optDryRun,
		"optCredits":              optCredits,
		"optCreditOverage":        optCreditOverage,
		"optUsage":                optUsage,
		"kindAlgorithm":           kindAlgorithm,
		"kindShape":               kindShape,
		"kindShadow":              kindShadow,
		"kindSeedOpen":            kindSeedOpen,
		"kindSeedClosed":          kindSeedClosed,
		"kindExchange":            kindExchange,
		"refDef":                  refDef,
		"refShadow":               refShadow,
		"holdTTL":                 holdTTL,
		"holdCharge":              holdCharge,
		"holdRetention":           limiter.HoldRetentionUS,
		"journalCap":              journalCap,
		"admittedUnjournaled":     admittedUnjournaled,
	}
	decl := regexp.MustCompile(`(?m)^local ((?:alg|flag|opt|kind|ref|hold|journal|admitted)[A-Z][A-Za-z]*) = (\d+)\s*(?:--.*)?$`)
	got := map[string]int64{}
	for _, m := range decl.FindAllStringSubmatch(checkLua, -1) {
		if _, dup := got[m[1]]; dup {
			t.Errorf("check.lua declares %s twice", m[1])
		}
		v, err := strconv.ParseInt(m[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		got[m[1]] = v
	}
	for name, w := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("check.lua does not declare %s", name)
		} else if g != w {
			t.Errorf("check.lua: %s = %d, want %d", name, g, w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("check.lua declares %s, which the Go side does not know", name)
		}
	}

	seen := map[int64]limiter.Algorithm{}
	for _, a := range limiter.Algorithms {
		code := algorithmCode(a)
		if code == 0 {
			t.Errorf("%s has no wire code", a)
		}
		if other, dup := seen[code]; dup {
			t.Errorf("%s and %s share wire code %d", a, other, code)
		}
		seen[code] = a
	}
	if code := algorithmCode("nonsense"); code != 0 {
		t.Errorf("unknown algorithm: code %d, want 0", code)
	}
}

// TestLeanKind: a rule's kind on the lean scripts' wire gives back its
// algorithm code, shaping, shadowing, tally and exchange, decoded as the
// scripts decode it (floor(kind % kindSeedOpen / kindAlgorithm), has(kind,
// kindShape), has(kind, kindShadow), has(kind, kindSeedOpen), has(kind,
// kindSeedClosed), has(kind, kindExchange)), and the scripts decode kind
// by those names alone: a bare number beside kind would be a second,
// unchecked copy of the packing.
func TestLeanKind(t *testing.T) {
	has := func(kind, flag int64) bool { return kind%(2*flag) >= flag }
	if kindShadow <= 0 || kindShadow&(kindShadow-1) != 0 || kindShape <= kindShadow || kindShape&(kindShape-1) != 0 || kindAlgorithm <= kindShape|kindShadow {
		t.Fatalf("kindShadow %d, kindShape %d, kindAlgorithm %d: want two powers of two below kindAlgorithm", kindShadow, kindShape, kindAlgorithm)
	}
	var codes int64
	for _, alg := range limiter.Algorithms {
		codes = max(codes, algorithmCode(alg))
	}
	for _, k := range []int64{kindSeedOpen, kindSeedClosed, kindExchange} {
		if k&(k-1) != 0 || k < (codes+1)*kindAlgorithm {
			t.Errorf("kind %d: want a power of two above every code × kindAlgorithm", k)
		}
	}
	if kindSeedClosed <= kindSeedOpen || kindExchange <= kindSeedClosed {
		t.Errorf("kindSeedOpen %d, kindSeedClosed %d, kindExchange %d: want them distinct and in that order", kindSeedOpen, kindSeedClosed, kindExchange)
	}
	for _, alg := range limiter.Algorithms {
		for _, shape := range []bool{false, true} {
			for _, shadow := range []bool{false, true} {
				for _, seed := range []limiter.SeedMode{limiter.SeedNone, limiter.SeedOpen, limiter.SeedClosed} {
					for _, exchange := range []bool{false, true} {
						r := limiter.Request{Params: limiter.Params{Algorithm: alg, Shape: shape, Seed: seed, Exchange: exchange}, Shadow: shadow}
						kind := leanKind(&r)
						what := fmt.Sprintf("%s shape %v shadow %v seed %v exchange %v: kind %d", alg, shape, shadow, seed, exchange, kind)
						if got, want := kind%kindSeedOpen/kindAlgorithm, algorithmCode(alg); got != want {
							t.Errorf("%s decodes to code %d, want %d", what, got, want)
						}
						if has(kind, kindShape) != shape || has(kind, kindShadow) != shadow || has(kind, kindExchange) != exchange {
							t.Errorf("%s decodes to shape %v shadow %v exchange %v", what, has(kind, kindShape), has(kind, kindShadow), has(kind, kindExchange))
						}
						tally := alg == limiter.FixedWindow // only windows are tallies
						if has(kind, kindSeedOpen) != (tally && seed == limiter.SeedOpen) || has(kind, kindSeedClosed) != (tally && seed == limiter.SeedClosed) {
							t.Errorf("%s decodes to seed open %v closed %v", what, has(kind, kindSeedOpen), has(kind, kindSeedClosed))
						}
					}
				}
			}
		}
	}
	bare := regexp.MustCompile(`kind\s*(?:[/%]|[<>]=?)\s*\d|ARGV\[[^]]*\]\)\s*[/%]\s*\d|has\(kind, \d`)
	for name, src := range map[string]string{"lean.lua": leanLua, "lean1.lua": lean1Lua, "rate.lua": rateLua} {
		if m := bare.FindString(src); m != "" {
			t.Errorf("%s decodes kind with a bare number (%q): use kindAlgorithm, kindShape, kindShadow", name, m)
		}
	}
	for name, src := range map[string]string{"lean.lua": leanLua, "lean1.lua": lean1Lua} {
		for _, constant := range []string{"kindAlgorithm", "kindShape", "kindShadow", "kindExchange"} {
			if !strings.Contains(src, constant) {
				t.Errorf("%s does not decode kind with %s", name, constant)
			}
		}
	}
}

// TestRefsAndHoldsByName: check.lua decodes refs and holds by the names
// of their packing, never with a bare 2 or 1.
func TestRefsAndHoldsByName(t *testing.T) {
	bare := regexp.MustCompile(`floor\([^()]*/ \d+\)|ref % \d|hold % \d|idiv\(hold, \d|has\((ref|hold), \d`)
	for _, m := range bare.FindAllString(checkLua, -1) {
		t.Errorf("check.lua decodes a ref or hold with a bare number: %q", m)
	}
}

// TestFlagsArePowersOfTwo: flags add up without colliding.
func TestFlagsArePowersOfTwo(t *testing.T) {
	all := []int64{flagShape, flagCalendarDay, flagCalendarMonth, flagAnchorFirstRequest}
	var sum int64
	for _, f := range all {
		if f <= 0 || f&(f-1) != 0 || sum&f != 0 {
			t.Errorf("flag %d: not a power of two distinct from the others", f)
		}
		sum |= f
	}
}

// TestHoldConstantsMatchGo: the scripts' hold retention is the limiter's,
// and ops.lua (with settle.lua and lease.lua) runs after the constants
// they use.
func TestHoldConstantsMatchGo(t *testing.T) {
	if want := "local holdRetention = " + strconv.FormatInt(limiter.HoldRetentionUS, 10); !regexp.MustCompile(`(?m)^` + want + `\b`).MatchString(checkLua) {
		t.Errorf("check.lua does not declare %q", want)
	}
	prelude := checkPrelude()
	for _, name := range []string{"algGCRA", "algSlidingWindowCounter", "idiv", "floor", "tonumber"} {
		if !regexp.MustCompile(`\blocal (function )?` + name + `\b`).MatchString(prelude) {
			t.Errorf("ops.lua's prelude lacks %s", name)
		}
	}
}

// TestOpCodesMatchGo: ops.lua's op codes and reply length are ops.go's.
func TestOpCodesMatchGo(t *testing.T) {
	for name, code := range map[string]int{"opSettle": opSettle, "opExpire": opExpire, "opRenew": opRenew, "opRelease": opRelease,
		"opReplyLen": opReplyLen} {
		if want := "local " + name + " = " + strconv.Itoa(code); !regexp.MustCompile(`(?m)^` + want + `$`).MatchString(opsLua) {
			t.Errorf("ops.lua does not declare %q", want)
		}
	}
}
