// Package limiter implements Tollgate's limiting algorithms over two stores
// that decide identically: Redis (a Lua script deciding a batch of checks
// per call) and memory (one process). Time is integer microseconds throughout; docs/algorithms.md
// gives the exact semantics.
package limiter

import (
	"fmt"
)

// Algorithm names a limiting algorithm.
type Algorithm string

// The algorithms. GCRA is the default.
const (
	GCRA                 Algorithm = "gcra"
	TokenBucket          Algorithm = "token_bucket"
	LeakyBucket          Algorithm = "leaky_bucket"
	FixedWindow          Algorithm = "fixed_window"
	SlidingWindowLog     Algorithm = "sliding_window_log"
	SlidingWindowCounter Algorithm = "sliding_window_counter"
	// Concurrency limits requests in flight: Limit at once, each holding
	// a lease for PeriodUS unless renewed or released (see lease.go).
	Concurrency Algorithm = "concurrency"
)

// Algorithms lists every algorithm in documentation order (for forms and
// messages; the Redis store's wire codes do not depend on it).
var Algorithms = []Algorithm{GCRA, TokenBucket, LeakyBucket, FixedWindow, SlidingWindowLog, SlidingWindowCounter, Concurrency}

// Valid reports whether a is a known algorithm.
func (a Algorithm) Valid() bool {
	switch a {
	case GCRA, TokenBucket, LeakyBucket, FixedWindow, SlidingWindowLog, SlidingWindowCounter, Concurrency:
		return true
	}
	return false
}

// Calendar aligns fixed windows to UTC calendar units instead of the epoch.
type Calendar string

// Calendar alignments.
const (
	CalendarNone  Calendar = ""
	CalendarDay   Calendar = "day"
	CalendarMonth Calendar = "month"
)

// Microseconds in common periods: limiter time is integer µs, so these
// are not time.Duration values (which count nanoseconds).
const (
	SecondUS int64 = 1_000_000
	MinuteUS       = 60 * SecondUS
	HourUS         = 60 * MinuteUS
	DayUS          = 24 * HourUS
)

// MaxSlidingLogLimit bounds a sliding_window_log rule's limit: about 1.2 MB
// of Redis memory per key at the bound (see docs/algorithms.md).
const MaxSlidingLogLimit = 10_000

// maxExact is the largest integer a Lua (double) number holds exactly; every
// intermediate product in the scripts stays at or below it.
const maxExact = 1 << 53

// maxTolerance bounds a bucket's tolerance (T × burst, µs): see Validate.
const maxTolerance = maxExact / 4

// MaxUnits is the largest limit or burst a rule may have: maxExact.
const MaxUnits = maxExact

// Params are one rule's limiter parameters.
type Params struct {
	Algorithm Algorithm
	// Limit units are allowed per Period.
	Limit int64
	// PeriodUS is the period in microseconds. For calendar windows it is
	// ignored in favour of the calendar unit; for concurrency it is a
	// lease's time to live.
	PeriodUS int64
	// Burst is the units allowed at once (GCRA), the bucket capacity (token
	// and leaky bucket). Zero means Limit.
	Burst int64
	// Shape makes a leaky bucket delay requests (answering DelayUS) instead
	// of admitting them at once ("police").
	Shape bool
	// Calendar aligns a fixed window to UTC days or months.
	Calendar Calendar
	// AnchorFirstRequest starts a fixed window at its first request instead
	// of aligning it to the epoch.
	AnchorFirstRequest bool
	// Seed marks a tally (a calendar-month fixed window that counts money:
	// a spend cap, a monthly quota): a store decides it only while the
	// seed marker of its key's hash tag exists (SeedKeyOf), which says
	// that its states were not lost since the tallies were rebuilt from
	// the rollups (TallySeeder). Without the marker the rule's Result is
	// Unknown. The zero value, SeedNone, is every other rule.
	Seed SeedMode
	// Exchange marks a global_shared rule of a deployment of several
	// regions (docs/regions.md): a store that serves regions also adds
	// what a check admits on it to the outbox beside its state, which
	// the region's exchanger sends to the other regions. The memory
	// store, which serves one process, ignores it.
	Exchange bool
	// Split marks a global_split window (fixed, sliding log or sliding
	// counter) of a deployment of several regions (docs/regions.md): a
	// store that serves regions decides it on Limit (the region's equal
	// share) plus what the region's rebalancer moved to or from it,
	// which it keeps beside the state, and counts the demand on it. The
	// memory store, which serves one process, ignores it.
	Split bool
}

// EffectiveBurst returns Burst, or Limit when Burst is zero.
func (p Params) EffectiveBurst() int64 {
	if p.Burst > 0 {
		return p.Burst
	}
	return p.Limit
}

// EmissionInterval returns period/limit in whole µs, rounded up: the time
// one unit takes to replenish. It is 0 when Limit is 0 (no refill).
func (p Params) EmissionInterval() int64 {
	if p.Limit <= 0 {
		return 0
	}
	return CeilDiv(p.PeriodUS, p.Limit)
}

// Validate returns field → problem for every invalid parameter; empty when
// p is valid. Field names are the JSON names of plan rules.
func (p Params) Validate() map[string]string {
	f := map[string]string{}
	if !p.Algorithm.Valid() {
		f["algorithm"] = fmt.Sprintf("must be one of %v", Algorithms)
		return f
	}
	if p.Limit < 0 {
		f["limit"] = "must be ≥ 0"
	}
	if p.Limit == 0 && p.Algorithm != TokenBucket {
		f["limit"] = "must be ≥ 1 (only token_bucket takes 0: a one-time allowance of burst units)"
	}
	if p.PeriodUS <= 0 && p.Calendar == CalendarNone {
		f["period"] = "must be > 0"
	}
	if p.Burst < 0 {
		f["burst"] = "must be ≥ 1"
	}
	if p.Limit == 0 && p.Burst < 1 {
		f["burst"] = "must be ≥ 1 when limit is 0"
	}
	if p.Shape && p.Algorithm != LeakyBucket {
		f["mode"] = "shape applies to leaky_bucket only"
	}
	if p.Calendar != CalendarNone {
		if p.Algorithm != FixedWindow {
			f["calendar"] = "applies to fixed_window only"
		} else if p.Calendar != CalendarDay && p.Calendar != CalendarMonth {
			f["calendar"] = "must be day or month"
		}
		if p.AnchorFirstRequest {
			f["anchor"] = "cannot be combined with calendar"
		}
	}
	if p.AnchorFirstRequest && p.Algorithm != FixedWindow {
		f["anchor"] = "applies to fixed_window only"
	}
	if len(f) > 0 {
		return f
	}
	// Keep every intermediate value exact in Lua's doubles.
	period := p.LongestWindowUS()
	burst := p.EffectiveBurst()
	if p.Limit > maxExact {
		f["limit"] = "must be at most 2^53 (9007199254740992)"
	}
	if p.Burst > maxExact {
		f["burst"] = "must be at most 2^53 (9007199254740992)"
	}
	switch p.Algorithm {
	case GCRA, TokenBucket, LeakyBucket:
		// The scripts reach now + 2 × the tolerance (T × burst): with now
		// below 2^52 µs (the year 2112), a tolerance up to 2^51 µs (about
		// 71 years) keeps that exact.
		if t := p.EmissionInterval(); t > 0 && (mulOverflows(t, burst) || t*burst > maxTolerance) {
			f["burst"] = "burst × period/limit is too large (at most 2^51 µs, about 71 years)"
		}
	case SlidingWindowCounter:
		if mulOverflows(p.Limit, period) {
			f["limit"] = "limit × period (µs) must stay below 2^53"
		}
	case Concurrency:
		if p.PeriodUS > MaxLeaseTTLUS {
			f["period"] = "is the lease's time to live: at most 1 hour (renew longer requests)"
		}
		if p.Limit > MaxConcurrency {
			f["limit"] = fmt.Sprintf("must be at most %d requests in flight", MaxConcurrency)
		}
	case SlidingWindowLog:
		// One log entry per admitted unit: the state, and the script's
		// work for one check, grow with the limit.
		if p.Limit > MaxSlidingLogLimit {
			f["limit"] = fmt.Sprintf("must be at most %d for sliding_window_log (it keeps one entry per unit; use sliding_window_counter or gcra for larger limits)", MaxSlidingLogLimit)
		}
	}
	if period > 100*366*DayUS {
		f["period"] = "must be at most 100 years"
	}
	return f
}

// LongestWindowUS returns the longest p's window can be, in µs: a day
// for calendar days, 31 days for calendar months (the longest month),
// else the period.
func (p Params) LongestWindowUS() int64 {
	switch p.Calendar {
	case CalendarDay:
		return DayUS
	case CalendarMonth:
		return 31 * DayUS
	}
	return p.PeriodUS
}

func mulOverflows(a, b int64) bool {
	if a == 0 || b == 0 {
		return false
	}
	return a > maxExact/b
}

// CeilDiv returns ⌈a/b⌉ for b > 0 and any a.
func CeilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a > 0 {
		q++
	}
	return q
}

// FloorDiv returns ⌊a/b⌋ for b > 0 and any a.
func FloorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && (a < 0) {
		q--
	}
	return q
}
