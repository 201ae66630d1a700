package limiter

import "slices"

// Result is one rule's verdict on one check. Durations are µs.
type Result struct {
	// Allowed is the rule's own verdict (for a shadow rule: what it would
	// have decided).
	Allowed bool
	// Remaining whole units after this check (before it, when denied);
	// floored, never negative.
	Remaining int64
	// ResetAfterUS is the time until the rule is fully replenished; -1 when
	// it never will be (a token bucket with limit 0).
	ResetAfterUS int64
	// RetryAfterUS is 0 when allowed; when denied, the time until the same
	// request can pass, or -1 when it never can.
	RetryAfterUS int64
	// DelayUS is how long a shaping leaky bucket asks the caller to hold the
	// request; 0 otherwise.
	DelayUS int64
	// Unknown is true when the store could not decide the rule: its
	// state may have been lost (Params.Seed, the seed marker missing).
	// The other fields are then zero and nothing was stored for it; the
	// caller decides the rule by its failure mode.
	Unknown bool
}

// state is one rule's stored state in the memory store. Which fields mean
// something depends on the algorithm. The Redis script keeps the same
// values, in its own layout: one number per key for gcra, leaky_bucket
// (tat) and token_bucket (the time the bucket was empty, from which tokens
// and stamp follow), a hash of window, count and prev for the windows,
// and a sorted set of admission times for the log.
type state struct {
	tat    int64   // gcra, leaky_bucket: theoretical arrival time
	tokens int64   // token_bucket: available, in µs of refill (units × T)
	stamp  int64   // token_bucket: when tokens was measured
	once   bool    // token_bucket: tokens are whole units that never refill (limit 0)
	window int64   // fixed_window: window start; sliding_window_counter: window index
	count  int64   // windows: units in the current window
	prev   int64   // sliding_window_counter: units in the previous window
	log    []int64 // sliding_window_log: admission time of each unit, ascending
}

// windowCounts returns a sliding window counter's units in window index
// and in the one before it, as st (nil: none) holds them.
func (st *state) windowCounts(index int64) (curr, prev int64) {
	if st != nil {
		switch st.window {
		case index:
			curr, prev = st.count, st.prev
		case index - 1:
			prev = st.count
		}
	}
	return curr, prev
}

// decision is what evaluating one rule produced: the result, and the state
// to store with its time to live (µs; 0 = keep forever) when the check as a
// whole is admitted.
type decision struct {
	Result
	next *state
	ttl  int64
}

// evaluate applies p to the stored state st (nil when absent) at now for
// cost units; a concurrency rule is decided on its leases instead
// (evalConcurrency). It is pure: the same inputs give the same decision, as in
// the Lua script.
func evaluate(p Params, st *state, now, cost int64) decision {
	switch p.Algorithm {
	case GCRA, LeakyBucket:
		return evalGCRA(p, st, now, cost)
	case TokenBucket:
		return evalTokenBucket(p, st, now, cost)
	case FixedWindow:
		return evalFixedWindow(p, st, now, cost)
	case SlidingWindowLog:
		return evalSlidingLog(p, st, now, cost)
	case SlidingWindowCounter:
		return evalSlidingCounter(p, st, now, cost)
	}
	return decision{Result: Result{RetryAfterUS: -1}}
}

// evalGCRA is the generic cell rate algorithm; a leaky bucket is the same
// meter (its level is tat − now), and in shape mode answers the delay until
// the request reaches the head of the queue.
func evalGCRA(p Params, st *state, now, cost int64) decision {
	interval := p.EmissionInterval()
	burst := p.EffectiveBurst()
	tolerance := interval * burst
	tat := now
	if st != nil && st.tat > now {
		tat = st.tat
	}
	denied := func(retry int64) decision {
		return decision{Result: Result{
			Remaining:    max(0, FloorDiv(tolerance-(tat-now), interval)),
			ResetAfterUS: tat - now,
			RetryAfterUS: retry,
		}}
	}
	// Decided before any arithmetic on cost, which could overflow.
	if cost > burst {
		return denied(-1)
	}
	newTAT := tat + interval*cost
	allowAt := newTAT - tolerance
	if now < allowAt {
		return denied(allowAt - now)
	}
	d := decision{Result: Result{
		Allowed:      true,
		Remaining:    (tolerance - (newTAT - now)) / interval,
		ResetAfterUS: newTAT - now,
	}}
	if p.Shape {
		d.DelayUS = tat - now
	}
	if cost > 0 {
		d.next = &state{tat: newTAT}
		d.ttl = newTAT - now
	}
	return d
}

// evalTokenBucket keeps tokens measured in µs of refill time so that it
// decides exactly as GCRA does with the same parameters, for any sequence
// of checks: a check dated before the stored stamp (a clock that stepped
// back) sees the bucket correspondingly emptier, as GCRA sees its TAT
// further ahead. With limit 0 it never refills: tokens are whole units, a
// one-time allowance.
func evalTokenBucket(p Params, st *state, now, cost int64) decision {
	interval := p.EmissionInterval()
	refills := interval > 0
	unit := interval
	if !refills {
		unit = 1
	}
	burst := p.EffectiveBurst()
	capacity := unit * burst
	available := st.tokensAt(refills, capacity, now)
	resetAfter := func(left int64) int64 {
		switch {
		case left >= capacity:
			return 0
		case !refills:
			return -1
		}
		return capacity - left
	}
	denied := func(retry int64) decision {
		return decision{Result: Result{
			Remaining:    max(0, FloorDiv(available, unit)),
			ResetAfterUS: resetAfter(available),
			RetryAfterUS: retry,
		}}
	}
	// Decided before any arithmetic on cost, which could overflow.
	if cost > burst {
		return denied(-1)
	}
	need := unit * cost
	if need > available {
		if !refills {
			return denied(-1)
		}
		return denied(need - available)
	}
	left := available - need
	d := decision{Result: Result{Allowed: true, Remaining: left / unit, ResetAfterUS: resetAfter(left)}}
	if cost > 0 {
		d.next = &state{tokens: left, stamp: now, once: !refills}
		if refills {
			d.ttl = capacity - left
		}
	}
	return d
}

// bucketNumber is the one number Redis keeps of a token bucket's state
// st: the time it was empty for a bucket that refills, its whole units
// left for one that does not.
func (st *state) bucketNumber() int64 {
	if st.once {
		return st.tokens
	}
	return st.stamp - st.tokens
}

// tokensAt is a token bucket's available tokens at now (capacity when st
// is nil), read as Redis reads its stored number (rate.lua). A bucket
// whose rule changed from refilling to not, or back, reads the other
// mode's number as its own, bounded by capacity: its callers start at
// most full, never beyond.
func (st *state) tokensAt(refills bool, capacity, now int64) int64 {
	if st == nil {
		return capacity
	}
	if refills {
		return min(capacity, now-st.bucketNumber())
	}
	return min(capacity, st.bucketNumber())
}

// windowBounds returns the fixed window [start, end) that holds now.
func windowBounds(p Params, now int64) (start, end int64) {
	switch p.Calendar {
	case CalendarDay:
		start = FloorDiv(now, DayUS) * DayUS
		return start, start + DayUS
	case CalendarMonth:
		days := FloorDiv(now, DayUS)
		y, m, _ := civilFromDays(days)
		start = daysFromCivil(y, m, 1) * DayUS
		if m == 12 {
			y, m = y+1, 1
		} else {
			m++
		}
		return start, daysFromCivil(y, m, 1) * DayUS
	}
	start = FloorDiv(now, p.PeriodUS) * p.PeriodUS
	return start, start + p.PeriodUS
}

// evalFixedWindow counts units per window: epoch-aligned, calendar-aligned
// or opened by the first admitted request.
func evalFixedWindow(p Params, st *state, now, cost int64) decision {
	var start, end, count int64
	if p.AnchorFirstRequest {
		start, end = now, now+p.PeriodUS
		if st != nil && now < st.window+p.PeriodUS {
			start, end, count = st.window, st.window+p.PeriodUS, st.count
		}
	} else {
		start, end = windowBounds(p, now)
		if st != nil && st.window == start {
			count = st.count
		}
	}
	resetAfter := func(c int64) int64 {
		if c == 0 {
			return 0
		}
		return end - now
	}
	denied := func(retry int64) decision {
		return decision{Result: Result{
			Remaining:    max(0, p.Limit-count),
			ResetAfterUS: resetAfter(count),
			RetryAfterUS: retry,
		}}
	}
	// Decided before any arithmetic on cost, which could overflow.
	if cost > p.Limit {
		return denied(-1)
	}
	if count+cost > p.Limit {
		return denied(end - now)
	}
	d := decision{Result: Result{Allowed: true, Remaining: p.Limit - count - cost, ResetAfterUS: resetAfter(count + cost)}}
	if cost > 0 {
		d.next = &state{window: start, count: count + cost}
		d.ttl = end - now
	}
	return d
}

// evalSlidingLog keeps one entry per admitted unit, sorted by time;
// entries older than period leave the window (an entry at t counts while
// now − period < t). Entries that left are dropped only when the log is
// written, as in the Redis script, so a check that admits nothing changes
// nothing even for a clock that later steps back.
func evalSlidingLog(p Params, st *state, now, cost int64) decision {
	var live []int64
	if st != nil {
		cut, _ := slices.BinarySearch(st.log, now-p.PeriodUS+1)
		live = st.log[cut:]
	}
	count := int64(len(live))
	newest := int64(0)
	if count > 0 {
		newest = live[count-1]
	}
	resetAfter := func(n, latest int64) int64 {
		if n == 0 {
			return 0
		}
		return latest + p.PeriodUS - now
	}
	denied := func(retry int64) decision {
		return decision{Result: Result{
			Remaining:    max(0, p.Limit-count),
			ResetAfterUS: resetAfter(count, newest),
			RetryAfterUS: retry,
		}}
	}
	// Decided before any arithmetic on cost, which could overflow.
	if cost > p.Limit {
		return denied(-1)
	}
	if count+cost > p.Limit {
		// The (count+cost−limit)-th oldest entry must leave.
		return denied(live[count+cost-p.Limit-1] + p.PeriodUS - now)
	}
	d := decision{Result: Result{Allowed: true, Remaining: p.Limit - count - cost}}
	if cost == 0 {
		d.ResetAfterUS = resetAfter(count, newest)
		return d
	}
	// Insert after the entries at or before now, keeping the log sorted.
	at, _ := slices.BinarySearch(live, now+1)
	next := make([]int64, 0, count+cost)
	next = append(next, live[:at]...)
	for range cost {
		next = append(next, now)
	}
	next = append(next, live[at:]...)
	d.ResetAfterUS = resetAfter(1, max(newest, now))
	d.next = &state{log: next}
	d.ttl = d.ResetAfterUS
	return d
}

// evalSlidingCounter weighs the previous epoch-aligned window by how much
// of it the sliding window still overlaps. All comparisons are cross
// multiplied by period so no division happens before the final floor.
func evalSlidingCounter(p Params, st *state, now, cost int64) decision {
	period := p.PeriodUS
	index := FloorDiv(now, period)
	elapsed := now - index*period
	curr, prev := st.windowCounts(index)
	weighted := prev*(period-elapsed) + curr*period // estimate × period
	budget := p.Limit * period
	resetAfter := func(c int64) int64 {
		switch {
		case c > 0:
			return 2*period - elapsed
		case prev > 0:
			return period - elapsed
		}
		return 0
	}
	denied := func(retry int64) decision {
		return decision{Result: Result{
			Remaining:    max(0, FloorDiv(budget-weighted, period)),
			ResetAfterUS: resetAfter(curr),
			RetryAfterUS: retry,
		}}
	}
	// Decided before any arithmetic on cost, which could overflow.
	if cost > p.Limit {
		return denied(-1)
	}
	if weighted+cost*period > budget {
		return denied(slidingCounterRetry(p.Limit, period, elapsed, prev, curr, cost))
	}
	d := decision{Result: Result{
		Allowed:      true,
		Remaining:    FloorDiv(budget-weighted-cost*period, period),
		ResetAfterUS: resetAfter(curr + cost),
	}}
	if cost > 0 {
		d.next = &state{window: index, count: curr + cost, prev: prev}
		d.ttl = 2*period - elapsed
	}
	return d
}

// slidingCounterRetry returns the µs until cost (≤ limit) units fit.
func slidingCounterRetry(limit, period, elapsed, prev, curr, cost int64) int64 {
	// Still in this window: prev × (period − e) ≤ (limit − curr − cost) × period.
	if room := limit - curr - cost; room >= 0 && prev > 0 {
		earliest := period - room*period/prev
		if earliest < period {
			return max(1, earliest-elapsed)
		}
	}
	// In the next window the current count becomes the previous one.
	earliest := int64(0)
	if curr > 0 {
		earliest = period - (limit-cost)*period/curr
	}
	return period - elapsed + max(0, earliest)
}

// daysFromCivil returns the days since 1970-01-01 of a proleptic Gregorian
// date (Howard Hinnant's algorithm, all integer).
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := FloorDiv(y, 400)
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(z int64) (y, m, d int64) {
	z += 719468
	era := FloorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	if mp < 10 {
		m = mp + 3
	} else {
		m = mp - 9
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}
