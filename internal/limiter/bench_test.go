package limiter_test

import (
	"context"
	"testing"

	. "github.com/tollgate/tollgate/internal/limiter"
)

// benchRules is one rule per algorithm and mode, all 100 per second (burst
// and bucket 100), as used by the benchmarks and measurements.
var benchRules = []ruleConfig{
	{"gcra", Params{Algorithm: GCRA, Limit: 100, PeriodUS: SecondUS}},
	{"token_bucket", Params{Algorithm: TokenBucket, Limit: 100, PeriodUS: SecondUS}},
	{"leaky_bucket_police", Params{Algorithm: LeakyBucket, Limit: 100, PeriodUS: SecondUS}},
	{"leaky_bucket_shape", Params{Algorithm: LeakyBucket, Limit: 100, PeriodUS: SecondUS, Shape: true}},
	{"fixed_window", Params{Algorithm: FixedWindow, Limit: 100, PeriodUS: SecondUS}},
	{"fixed_window_month", Params{Algorithm: FixedWindow, Limit: 100_000_000, Calendar: CalendarMonth}},
	{"sliding_window_log", Params{Algorithm: SlidingWindowLog, Limit: 100, PeriodUS: SecondUS}},
	{"sliding_window_counter", Params{Algorithm: SlidingWindowCounter, Limit: 100, PeriodUS: SecondUS}},
}

// BenchmarkCheck measures one single-rule check per algorithm on each
// store. The injected clock advances steadily at 90% of the limit, so
// every check is admitted and writes (the sliding log holds about 90
// entries). At exactly the limit the sliding window counter would deny
// some checks: its estimate then sits right at the limit.
//
//	scripts/services.sh test -- go test ./internal/limiter/ -run '^$' -bench Check
func BenchmarkCheck(b *testing.B) {
	for _, sc := range stores() {
		b.Run(sc.name, func(b *testing.B) {
			store := sc.open(b)
			for _, rc := range benchRules {
				// -count repeats a sub-benchmark on the same key: the
				// clock must keep running across repetitions.
				now := epoch
				b.Run(rc.name, func(b *testing.B) {
					reqs := single(store.ns+rc.name, rc.p)
					window, _ := scale(rc.p)
					step := window / rc.p.Limit * 10 / 9
					for b.Loop() {
						now += step
						out, err := store.Check(context.Background(), Batch{Requests: reqs, Cost: 1, NowUS: now})
						if err != nil {
							b.Fatal(err)
						}
						if !out.Admitted {
							b.Fatalf("denied at the limit: %+v", out.Results[0])
						}
					}
				})
			}
		})
	}
}

// BenchmarkCheckBatch measures the example plan's two-rule check (GCRA
// hourly plus token bucket per second) on each store.
func BenchmarkCheckBatch(b *testing.B) {
	for _, sc := range stores() {
		now := epoch // runs on across -count repetitions
		b.Run(sc.name, func(b *testing.B) {
			store := sc.open(b)
			reqs := []Request{
				{Key: store.ns + "hourly", Params: Params{Algorithm: GCRA, Limit: 5000, PeriodUS: HourUS, Burst: 100}},
				{Key: store.ns + "search", Params: Params{Algorithm: TokenBucket, Limit: 10, PeriodUS: SecondUS}},
			}
			for b.Loop() {
				now += SecondUS // within both limits
				if _, err := store.Check(context.Background(), Batch{Requests: reqs, Cost: 1, NowUS: now}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
