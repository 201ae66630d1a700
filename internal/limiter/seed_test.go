package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testenv"

	. "github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
)

// TestStoresAgreeOnLostTallies: a store that lost its data (the memory
// store flushed; a Redis with no seed marker under the test's prefix)
// decides no tally (Params.Seed) until SeedTallies sets the marker: a
// spend cap (SeedClosed) refuses a check that costs something, consuming
// nothing anywhere, and answers a dry run; a quota (SeedOpen) lets the
// other rules decide and writes nothing. SeedTallies writes only while
// the marker is missing, never lowers a count, refuses another month's
// counts, and from then on the tally is decided from the rebuilt count.
// Every store, and the Redis ones with lean.lua and with check.lua.
func TestStoresAgreeOnLostTallies(t *testing.T) {
	for _, sc := range stores() {
		for _, noLean := range []bool{false, true} {
			name := sc.name
			if noLean {
				if sc.name == "memory" {
					continue
				}
				name += "-check.lua"
			}
			t.Run(name, func(t *testing.T) {
				s := sc.open(t)
				if rs, ok := s.Store.(*redisstore.Store); ok {
					rs.NoLean = noLean
				}
				testLostTallies(t, s)
			})
		}
	}
}

func testLostTallies(t *testing.T, s openStore) {
	ctx := context.Background()
	// The store's clock (TIME, for Redis) decides the month SeedTallies
	// writes; the checks are decided at it too.
	nowUS := time.Now().UnixMicro()
	if ms, ok := s.Store.(*MemoryStore); ok {
		SetReadClock(ms, func() int64 { return nowUS })
		ms.Flush()
	}
	seeder := s.Store.(TallySeeder)
	month := time.UnixMicro(nowUS).UTC()
	monthStart := time.Date(month.Year(), month.Month(), 1, 0, 0, 0, 0, time.UTC)
	tally, rateKey := s.ns+"tally", s.ns+"rate"
	marker := SeedKeyOf(tally)
	capRule := Params{Algorithm: FixedWindow, Limit: 10, PeriodUS: 31 * DayUS, Calendar: CalendarMonth, Seed: SeedClosed}
	quotaRule := capRule
	quotaRule.Limit, quotaRule.Seed = 100, SeedOpen
	rate := Params{Algorithm: GCRA, Limit: 5, PeriodUS: HourUS}
	check := func(cost int64, dry bool, rules ...Params) Outcome {
		t.Helper()
		b := Batch{Cost: cost, DryRun: dry, NowUS: nowUS, ReportState: true}
		for _, p := range rules {
			key := tally
			if p.Algorithm == GCRA {
				key = rateKey
			}
			b.Requests = append(b.Requests, Request{Key: key, Params: p})
		}
		out, err := s.Check(ctx, b)
		testenv.Must(t, err)
		return out
	}

	missing, err := seeder.MissingSeeds(ctx, []string{marker})
	testenv.Must(t, err)
	if len(missing) != 1 {
		t.Fatalf("missing seeds %v, want %q", missing, marker)
	}
	// The cap refuses; the rate rule is decided but nothing is consumed.
	out := check(1, false, capRule, rate)
	if out.Admitted || out.Results[0] != (Result{Unknown: true}) || !out.Results[1].Allowed || out.Results[1].Remaining != 4 {
		t.Fatalf("capped check before the rebuild: %+v, want refused, the cap unknown, the rate rule allowing 4 more", out)
	}
	// A dry run and a peek are answered.
	if out := check(1, true, capRule); !out.Admitted || !out.Results[0].Unknown {
		t.Errorf("dry run before the rebuild: %+v, want admitted, unknown", out)
	}
	if out := check(0, false, capRule); !out.Admitted || !out.Results[0].Unknown {
		t.Errorf("peek before the rebuild: %+v, want admitted, unknown", out)
	}
	// The quota lets the rate rule decide and consume; it writes nothing.
	out = check(2, false, quotaRule, rate)
	if !out.Admitted || out.Results[0] != (Result{Unknown: true}) || out.Results[1].Remaining != 3 {
		t.Fatalf("quota check before the rebuild: %+v, want admitted, the quota unknown, 3 left of the rate rule", out)
	}
	if out := check(1, true, rate); out.Results[0].Remaining != 2 {
		t.Errorf("rate rule after the checks: %+v, want 2 left after a dry run of 1 (the refused check consumed nothing)", out)
	}

	// Another month's counts are refused.
	prev := monthStart.AddDate(0, -1, 0).UnixMicro()
	if wrote, err := seeder.SeedTallies(ctx, marker, prev, []TallySeed{{Key: tally, Count: 9}}, true); err != nil || wrote {
		t.Fatalf("seeding last month: %v, %v; want nothing written", wrote, err)
	}
	// Two calls: the first writes 7 without the marker, the second's 5
	// does not lower it and sets the marker.
	if wrote, err := seeder.SeedTallies(ctx, marker, monthStart.UnixMicro(), []TallySeed{{Key: tally, Count: 7}}, false); err != nil || !wrote {
		t.Fatalf("seeding: %v, %v", wrote, err)
	}
	if out := check(1, false, capRule); out.Admitted || !out.Results[0].Unknown {
		t.Fatalf("capped check before the marker: %+v, want refused, unknown", out)
	}
	if wrote, err := seeder.SeedTallies(ctx, marker, monthStart.UnixMicro(), []TallySeed{{Key: tally, Count: 5}}, true); err != nil || !wrote {
		t.Fatalf("seeding the rest: %v, %v", wrote, err)
	}
	if wrote, err := seeder.SeedTallies(ctx, marker, monthStart.UnixMicro(), []TallySeed{{Key: tally, Count: 1}}, true); err != nil || wrote {
		t.Fatalf("seeding once the marker is set: %v, %v; want nothing written", wrote, err)
	}
	missing, err = seeder.MissingSeeds(ctx, []string{marker})
	testenv.Must(t, err)
	if len(missing) != 0 {
		t.Fatalf("missing seeds after the rebuild: %v", missing)
	}
	// 7 of 10 counted: 3 more fit, then the cap denies.
	if out := check(3, false, capRule, rate); !out.Admitted || out.Results[0].Unknown || out.Results[0].Remaining != 0 {
		t.Errorf("capped check after the rebuild: %+v, want admitted with 0 left", out)
	}
	if out := check(1, false, capRule); out.Admitted || out.Results[0].Unknown || out.Results[0].Allowed {
		t.Errorf("capped check past the cap: %+v, want denied by the cap", out)
	}
	if out := check(0, false, quotaRule); !out.Admitted || out.Results[0].Remaining != 90 {
		t.Errorf("quota after the rebuild: %+v, want 90 of 100 left", out)
	}
}
