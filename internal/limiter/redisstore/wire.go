package redisstore

import (
	"strconv"

	"github.com/tollgate/tollgate/internal/limiter"
)

// The wire protocol of check.lua: each rule definition in ARGV[1] carries
// an algorithm code and flags. check.lua declares locals with these names
// and values at its top; TestWireConstantsMatchScript keeps the two equal.
// The codes are fixed: a new algorithm gets a new code, and no code is
// ever reused.
const (
	algGCRA                 = 1
	algTokenBucket          = 2
	algLeakyBucket          = 3
	algFixedWindow          = 4
	algSlidingWindowLog     = 5
	algSlidingWindowCounter = 6
	algConcurrency          = 7
)

// Flags of a rule definition, added together (each is a power of two;
// Lua 5.1 has no bit operators, so check.lua tests them with modulo).
const (
	flagShape              = 2   // a leaky bucket answers a delay (Params.Shape)
	flagCalendarDay        = 4   // a fixed window aligned to UTC days
	flagCalendarMonth      = 8   // a fixed window aligned to UTC months
	flagAnchorFirstRequest = 16  // a fixed window starting at its first request
	flagSeedOpen           = 32  // a tally, Unknown without its seed marker (limiter.SeedOpen)
	flagSeedClosed         = 64  // a tally that then refuses the check (limiter.SeedClosed)
	flagExchange           = 128 // admissions go to the region's outbox (limiter.Params.Exchange)
	flagSplit              = 256 // a window decided on the region's allotment table (limiter.Params.Split)
)

// Options of a check (its opts number in ARGV[1]), added together.
const (
	optDryRun        = 1 // evaluate, consume nothing
	optCredits       = 2 // draw on a prepaid balance (Batch.Credits)
	optCreditOverage = 4 // past the balance is overage, not a denial
	optUsage         = 8 // journal an admitted check's usage (Batch.Usage)
)

// The usage journal's bound (statekey.go lays a journal out): the check
// scripts and settle.lua append an entry to a hash tag's journal only
// while it stays within journalCap bytes with it. A journal nobody claims
// (the usage worker down, or its claim stuck while Postgres is) would
// otherwise grow until Redis refuses the APPEND (past proto-max-bulk-len,
// 512 MB by default), failing every check of its tag after the check's
// states were written. Past the cap a check script answers an admitted
// check that was to journal its usage admittedUnjournaled instead of 1 (its
// Outcome.Recorded is false, and the caller counts its usage as it counts
// a check without a journal), and settle.lua a settlement as not
// journaled (Settlement.Recorded false). At 110 bytes an entry the cap
// holds about 600,000 checks: minutes of a busy tag's checks, where a
// journal claimed every second holds one or two seconds of them.
// check.lua declares both; TestWireConstantsMatchScript keeps them equal.
const (
	journalCap          = 64 << 20
	admittedUnjournaled = 2
)

// The lean scripts' kind of a rule (lean.lua, lean1.lua): one number
// that packs the rule's algorithm code with whether it shapes, whether
// it is a shadow rule, whether it is a tally and whether its admissions
// go to the region's outbox,
//
//	kind = code × kindAlgorithm + kindShape (a shaping leaky bucket) + kindShadow (a shadow rule)
//	       + kindSeedOpen or kindSeedClosed (a tally, limiter.Params.Seed)
//	       + kindExchange (a global_shared rule, limiter.Params.Exchange)
//
// The seed and exchange kinds sit above every code × kindAlgorithm (codes
// are below 8), so the code is kind modulo kindSeedOpen, ÷ kindAlgorithm.
// A rule with kindExchange has one more argument after its three numbers:
// its outbox head (outboxHead).
//
// check.lua declares them for the lean scripts, which take its prelude;
// TestWireConstantsMatchScript keeps them equal and the scripts decoding
// kind by these names only.
const (
	kindAlgorithm  = 4 // kind ÷ kindAlgorithm, floored, is the code
	kindShape      = 2
	kindShadow     = 1
	kindSeedOpen   = 32
	kindSeedClosed = 64
	kindExchange   = 128
)

// leanKind returns r's kind on the lean scripts' wire.
func leanKind(r *limiter.Request) int64 {
	kind := algorithmCode(r.Params.Algorithm) * kindAlgorithm
	if r.Params.Shape {
		kind += kindShape
	}
	if r.Shadow {
		kind += kindShadow
	}
	switch seed := r.Params.Seed; {
	case r.Params.Algorithm != limiter.FixedWindow: // only windows are tallies
	case seed == limiter.SeedOpen:
		kind += kindSeedOpen
	case seed == limiter.SeedClosed:
		kind += kindSeedClosed
	}
	if r.Params.Exchange {
		kind += kindExchange
	}
	return kind
}

// The region's outbox (docs/regions.md, "What is sent"): an admitted
// check adds its cost, per rule with Params.Exchange, to a field of the
// outbox hash of its state's hash tag (statekey.OutboxKey) named
//
//	alg flags a b c window end key
//
// alg the algorithm's code, flags the rule's (flags), a b c its three
// numbers (defNumbers), window and end the window the units fell in (a
// fixed window: its start and end, µs; a counter: its index; a log: now;
// the rates: 0 0) and key the state key: the admissions of one window
// between two claims share a field. check.lua formats the head from its def
// (defstr); the lean scripts take it from outboxHead, as an argument.
// The exchanger sends the fields as they are, and apply.lua reads them.

// outboxHead returns the head of p's outbox fields, "alg flags a b c", as
// check.lua formats it.
func outboxHead(p limiter.Params) string {
	a, b, c := defNumbers(p)
	buf := make([]byte, 0, 48)
	for i, n := range [...]int64{algorithmCode(p.Algorithm), flags(p), a, b, c} {
		if i > 0 {
			buf = append(buf, ' ')
		}
		buf = strconv.AppendInt(buf, n, 10)
	}
	return string(buf)
}

// check.lua's refs and holds pack a number and a flag each:
//
//	ref  = def number × refDef + refShadow (a shadow rule)
//	hold = time to live (µs) × holdTTL + holdCharge (charged on expiry)
//
// check.lua declares them with these names; TestWireConstantsMatchScript
// keeps the two equal.
const (
	refDef     = 2
	refShadow  = 1
	holdTTL    = 2
	holdCharge = 1
)

// algorithmCode returns a's code on the wire, 0 for an unknown algorithm.
func algorithmCode(a limiter.Algorithm) int64 {
	switch a {
	case limiter.GCRA:
		return algGCRA
	case limiter.TokenBucket:
		return algTokenBucket
	case limiter.LeakyBucket:
		return algLeakyBucket
	case limiter.FixedWindow:
		return algFixedWindow
	case limiter.SlidingWindowLog:
		return algSlidingWindowLog
	case limiter.SlidingWindowCounter:
		return algSlidingWindowCounter
	case limiter.Concurrency:
		return algConcurrency
	}
	return 0
}

// flags returns p's flags on the wire.
func flags(p limiter.Params) int64 {
	var f int64
	if p.Shape {
		f |= flagShape
	}
	switch p.Calendar {
	case limiter.CalendarDay:
		f |= flagCalendarDay
	case limiter.CalendarMonth:
		f |= flagCalendarMonth
	}
	if p.AnchorFirstRequest {
		f |= flagAnchorFirstRequest
	}
	switch p.Seed {
	case limiter.SeedOpen:
		f |= flagSeedOpen
	case limiter.SeedClosed:
		f |= flagSeedClosed
	}
	if p.Exchange {
		f |= flagExchange
	}
	if p.Split {
		f |= flagSplit
	}
	return f
}
