package limiter_test

import (
	"testing"
	"time"

	. "github.com/tollgate/tollgate/internal/limiter"
)

// Vector tables for every algorithm and mode, in the style of the GCRA
// table of docs/algorithms.md. Each runs against the memory store, a
// single Redis and a Redis Cluster with injected time; every field of every
// result must match.

// utc returns the µs since the Unix epoch of a UTC wall-clock time,
// computed with package time so that calendar tables do not depend on the
// limiter's own date arithmetic.
func utc(year int, month time.Month, day, hour int) int64 {
	return time.Date(year, month, day, hour, 0, 0, 0, time.UTC).UnixMicro()
}

func TestTokenBucketVectors(t *testing.T) {
	tests := []struct {
		name  string
		p     Params
		steps []step
	}{
		{
			// The GCRA table's parameters decide the GCRA table's answers.
			name:  "design-table-10-per-s-burst-5",
			p:     Params{Algorithm: TokenBucket, Limit: 10, PeriodUS: SecondUS, Burst: 5},
			steps: designTable,
		},
		{
			name: "4-per-s-capacity-2",
			p:    Params{Algorithm: TokenBucket, Limit: 4, PeriodUS: SecondUS, Burst: 2},
			steps: []step{
				{0, 1, allow(1, 250*ms)},
				{0, 1, allow(0, 500*ms)},
				{0, 1, deny(0, 250*ms, 500*ms)},
				{100 * ms, 1, deny(0, 150*ms, 400*ms)},
				{250 * ms, 1, allow(0, 500*ms)},
				{1000 * ms, 0, allow(2, 0)},
				{1000 * ms, 2, allow(0, 500*ms)},
				{1600 * ms, 3, deny(2, -1, 0)},
				{1600 * ms, 2, allow(0, 500*ms)},
				{1850 * ms, 2, deny(1, 250*ms, 250*ms)},
			},
		},
		{
			// period/limit = 333 333.3 µs is rounded up to 333 334 µs.
			name: "3-per-s-interval-rounded-up",
			p:    Params{Algorithm: TokenBucket, Limit: 3, PeriodUS: SecondUS},
			steps: []step{
				{0, 3, allow(0, 1_000_002)},
				{333_333, 1, deny(0, 1, 666_669)},
				{333_334, 1, allow(0, 1_000_002)},
			},
		},
		{
			// Limit 0 never refills: a one-time allowance of burst units.
			name: "limit-0-one-time-allowance-3",
			p:    Params{Algorithm: TokenBucket, Limit: 0, PeriodUS: SecondUS, Burst: 3},
			steps: []step{
				{0, 4, deny(3, -1, 0)},
				{0, 0, allow(3, 0)},
				{0, 1, allow(2, -1)},
				{10 * SecondUS, 2, allow(0, -1)},
				{DayUS, 1, deny(0, -1, -1)},
				{DayUS, 0, allow(0, -1)},
				{365 * DayUS, 1, deny(0, -1, -1)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runVector(t, tt.p, tt.steps) })
	}
}

func TestLeakyBucketVectors(t *testing.T) {
	tests := []struct {
		name  string
		p     Params
		steps []step
	}{
		{
			// Police: a bucket of 3 leaking 2/s; overflow is rejected, the
			// rest passes at once (no delay).
			name: "police-2-per-s-bucket-3",
			p:    Params{Algorithm: LeakyBucket, Limit: 2, PeriodUS: SecondUS, Burst: 3},
			steps: []step{
				{0, 1, allow(2, 500*ms)},
				{0, 1, allow(1, 1000*ms)},
				{0, 1, allow(0, 1500*ms)},
				{0, 1, deny(0, 500*ms, 1500*ms)},
				{600 * ms, 1, allow(0, 1400*ms)},
				{700 * ms, 1, deny(0, 300*ms, 1300*ms)},
				{3000 * ms, 2, allow(1, 1000*ms)},
				{3000 * ms, 4, deny(1, -1, 1000*ms)},
			},
		},
		{
			// Shape: a queue of 5 draining 2/s; each admitted request is
			// held until its slot.
			name: "shape-2-per-s-queue-5",
			p:    Params{Algorithm: LeakyBucket, Limit: 2, PeriodUS: SecondUS, Burst: 5, Shape: true},
			steps: []step{
				{0, 1, delayed(4, 500*ms, 0)},
				{0, 1, delayed(3, 1000*ms, 500*ms)},
				{0, 1, delayed(2, 1500*ms, 1000*ms)},
				{0, 1, delayed(1, 2000*ms, 1500*ms)},
				{0, 1, delayed(0, 2500*ms, 2000*ms)},
				{0, 1, deny(0, 500*ms, 2500*ms)},
				{500 * ms, 1, delayed(0, 2500*ms, 2000*ms)},
				{4000 * ms, 1, delayed(4, 500*ms, 0)},
				{4100 * ms, 2, delayed(2, 1400*ms, 400*ms)},
				{4100 * ms, 6, deny(2, -1, 1400*ms)},
			},
		},
		{
			// docs/algorithms.md: burst 2, 1 per second, three
			// simultaneous requests: delays 0 and 1000 ms, the third
			// rejected.
			name: "shape-design-example",
			p:    Params{Algorithm: LeakyBucket, Limit: 1, PeriodUS: SecondUS, Burst: 2, Shape: true},
			steps: []step{
				{0, 1, delayed(1, 1000*ms, 0)},
				{0, 1, delayed(0, 2000*ms, 1000*ms)},
				{0, 1, deny(0, 1000*ms, 2000*ms)},
				{1000 * ms, 1, delayed(0, 2000*ms, 1000*ms)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runVector(t, tt.p, tt.steps) })
	}
}

func TestFixedWindowVectors(t *testing.T) {
	tests := []struct {
		name  string
		start int64
		p     Params
		steps []step
	}{
		{
			name:  "epoch-3-per-s",
			start: epoch,
			p:     Params{Algorithm: FixedWindow, Limit: 3, PeriodUS: SecondUS},
			steps: []step{
				{0, 1, allow(2, 1000*ms)},
				{400 * ms, 2, allow(0, 600*ms)},
				{999_999, 1, deny(0, 1, 1)},
				{1000 * ms, 1, allow(2, 1000*ms)},
				{1500 * ms, 0, allow(2, 500*ms)},
				{1500 * ms, 4, deny(2, -1, 500*ms)},
				{1500 * ms, 2, allow(0, 500*ms)},
				{1700 * ms, 1, deny(0, 300*ms, 300*ms)},
				{5000 * ms, 0, allow(3, 0)},
			},
		},
		{
			// Windows align to the Unix epoch, not to the first request:
			// 2026-01-01T00:00:00Z is 8 s into an 11 s window.
			name:  "epoch-aligned-2-per-11s",
			start: epoch,
			p:     Params{Algorithm: FixedWindow, Limit: 2, PeriodUS: 11 * SecondUS},
			steps: []step{
				{0, 2, allow(0, 3*SecondUS)},
				{3*SecondUS - 1, 1, deny(0, 1, 1)},
				{3 * SecondUS, 1, allow(1, 11*SecondUS)},
				{3 * SecondUS, 3, deny(1, -1, 11*SecondUS)},
			},
		},
		{
			name:  "calendar-day-5",
			start: utc(2026, time.January, 1, 0),
			p:     Params{Algorithm: FixedWindow, Limit: 5, Calendar: CalendarDay},
			steps: []step{
				{0, 5, allow(0, DayUS)},
				{DayUS - 1, 1, deny(0, 1, 1)},
				{DayUS, 1, allow(4, DayUS)},
				{30 * HourUS, 0, allow(4, 18*HourUS)},
				{30 * HourUS, 6, deny(4, -1, 18*HourUS)},
				{30 * HourUS, 4, allow(0, 18*HourUS)},
				{47 * HourUS, 1, deny(0, HourUS, HourUS)},
				{48 * HourUS, 0, allow(5, 0)},
			},
		},
		{
			// January has 31 days, February 2026 has 28.
			name:  "calendar-month-100",
			start: utc(2026, time.January, 1, 0),
			p:     Params{Algorithm: FixedWindow, Limit: 100, Calendar: CalendarMonth},
			steps: []step{
				{0, 60, allow(40, 31*DayUS)},
				{31*DayUS - 1, 41, deny(40, 1, 1)},
				{31*DayUS - 1, 40, allow(0, 1)},
				{31 * DayUS, 1, allow(99, 28*DayUS)},
				{59*DayUS - 1, 100, deny(99, 1, 1)},
				{59 * DayUS, 100, allow(0, 31*DayUS)},
				{59 * DayUS, 101, deny(0, -1, 31*DayUS)},
				{59*DayUS + 12*HourUS, 0, allow(0, 31*DayUS-12*HourUS)},
			},
		},
		{
			name:  "calendar-month-leap-february",
			start: utc(2028, time.February, 1, 0),
			p:     Params{Algorithm: FixedWindow, Limit: 100, Calendar: CalendarMonth},
			steps: []step{
				{0, 1, allow(99, 29*DayUS)},
				{29*DayUS - 1, 99, allow(0, 1)},
				{29 * DayUS, 100, allow(0, 31*DayUS)},
			},
		},
		{
			name:  "calendar-month-year-end",
			start: utc(2026, time.December, 31, 23),
			p:     Params{Algorithm: FixedWindow, Limit: 100, Calendar: CalendarMonth},
			steps: []step{
				{0, 100, allow(0, HourUS)},
				{HourUS - 1, 1, deny(0, 1, 1)},
				{HourUS, 1, allow(99, 31*DayUS)},
			},
		},
		{
			// anchor: first_request: the window starts at the first
			// admitted request and the whole allowance returns period
			// later. A peek or a request that can never fit starts none.
			name:  "anchor-first-request-3-per-10s",
			start: epoch,
			p:     Params{Algorithm: FixedWindow, Limit: 3, PeriodUS: 10 * SecondUS, AnchorFirstRequest: true},
			steps: []step{
				{5 * SecondUS, 1, allow(2, 10*SecondUS)},
				{9 * SecondUS, 2, allow(0, 6*SecondUS)},
				{15*SecondUS - 1, 1, deny(0, 1, 1)},
				{15 * SecondUS, 1, allow(2, 10*SecondUS)},
				{40 * SecondUS, 0, allow(3, 0)},
				{41 * SecondUS, 4, deny(3, -1, 0)},
				{42 * SecondUS, 3, allow(0, 10*SecondUS)},
				{51 * SecondUS, 1, deny(0, SecondUS, SecondUS)},
				{52 * SecondUS, 3, allow(0, 10*SecondUS)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runVectorAt(t, tt.start, tt.p, tt.steps) })
	}
}

func TestSlidingWindowLogVectors(t *testing.T) {
	// An entry admitted at t counts while now − period < t.
	p := Params{Algorithm: SlidingWindowLog, Limit: 3, PeriodUS: SecondUS}
	runVector(t, p, []step{
		{0, 1, allow(2, 1000*ms)},
		{300 * ms, 1, allow(1, 1000*ms)},
		{600 * ms, 1, allow(0, 1000*ms)},
		{700 * ms, 1, deny(0, 300*ms, 900*ms)}, // the entry of t=0 must leave
		{700 * ms, 2, deny(0, 600*ms, 900*ms)}, // …and the one of t=300ms
		{1000 * ms, 1, allow(0, 1000*ms)},      // t=0 left at exactly 1 s
		{1000 * ms, 0, allow(0, 1000*ms)},
		{1300*ms - 1, 1, deny(0, 1, 700*ms+1)},
		{1300 * ms, 1, allow(0, 1000*ms)},
		{1300 * ms, 4, deny(0, -1, 1000*ms)},
		{5000 * ms, 3, allow(0, 1000*ms)},
	})
}

func TestSlidingWindowCounterVectors(t *testing.T) {
	// estimate = prev × (period − elapsed)/period + curr, 10 per second.
	p := Params{Algorithm: SlidingWindowCounter, Limit: 10, PeriodUS: SecondUS}
	runVector(t, p, []step{
		{0, 4, allow(6, 2000*ms)},
		{500 * ms, 6, allow(0, 1500*ms)},
		// Full: in the next window 10 × (1 − 0.1) + 1 fits at 1.1 s.
		{900 * ms, 1, deny(0, 200*ms, 1100*ms)},
		// Cost 10 fits only once the whole window is forgotten, at 2 s.
		{900 * ms, 10, deny(0, 1100*ms, 1100*ms)},
		{1100*ms - 1, 1, deny(0, 1, 900*ms+1)},
		{1100 * ms, 1, allow(0, 1900*ms)},
		{1500 * ms, 1, allow(3, 1500*ms)},
		// 10 × 0.5 + 2 = 7: three more fit now, four at 1.6 s.
		{1500 * ms, 4, deny(3, 100*ms, 1500*ms)},
		{1500 * ms, 11, deny(3, -1, 1500*ms)},
		{1600 * ms, 4, allow(0, 1400*ms)},
		// Next window: previous count 6 weighs 3/4.
		{2250 * ms, 0, allow(5, 750*ms)},
		{5000 * ms, 0, allow(10, 0)},
	})
}
