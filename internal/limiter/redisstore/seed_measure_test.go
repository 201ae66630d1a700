package redisstore

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestMeasureSeedMarker is a measurement tool, not a test: it is skipped
// unless TOLLGATE_MEASURE=1. On a redis-server of its own it replays lone
// checks of a GCRA rule and a tenant's month (a shadow tally, as an
// overage plan's quota) over 250 hash tags, with the tally's seed marker
// read (limiter.SeedOpen, every marker present) and without it, 1,000
// checks a round, alternating 40 rounds, and prints the least, the 10th
// percentile and the median of the Redis script µs per call (INFO
// commandstats): what reading the marker costs a check with a tally.
//
//	TOLLGATE_MEASURE=1 go test ./internal/limiter/redisstore/ -run TestMeasureSeedMarker -v -count=1
func TestMeasureSeedMarker(t *testing.T) {
	if os.Getenv("TOLLGATE_MEASURE") != "1" {
		t.Skip("a measurement tool: set TOLLGATE_MEASURE=1 to run it")
	}
	srv := testenv.StartRedisServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	s := New(c)
	gcra := limiter.Params{Algorithm: limiter.GCRA, Limit: 5000, PeriodUS: limiter.HourUS, Burst: 5000}
	month := limiter.Params{Algorithm: limiter.FixedWindow, Limit: 1 << 52, Burst: 1 << 52, PeriodUS: 31 * limiter.DayUS, Calendar: limiter.CalendarMonth}
	for tag := range 256 {
		c.Set(ctx, fmt.Sprintf("m{%c}seeded", byte(tag)), 1, 0)
	}
	usec := func() float64 {
		info := c.Info(ctx, "commandstats").Val()
		for _, l := range strings.Split(info, "\n") {
			if strings.HasPrefix(l, "cmdstat_evalsha:") {
				for _, f := range strings.Split(strings.TrimSpace(strings.TrimPrefix(l, "cmdstat_evalsha:")), ",") {
					if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
						x, _ := strconv.ParseFloat(v, 64)
						return x
					}
				}
			}
		}
		return 0
	}
	// µs per call, by whether the marker is read.
	res := map[string][]float64{}
	for round := range 40 {
		for _, seed := range []limiter.SeedMode{limiter.SeedNone, limiter.SeedOpen} {
			m := month
			m.Seed = seed
			c.ConfigResetStat(ctx)
			for i := range 1000 {
				tag := byte(i % 250)
				if tag == '{' || tag == '}' {
					tag = 'x'
				}
				k := fmt.Sprintf("m{%c}", tag)
				_, err := s.Check(ctx, limiter.Batch{Cost: 1, Requests: []limiter.Request{
					{Key: k + "g" + strconv.Itoa(i+round), Params: gcra}, {Key: k + "q" + strconv.Itoa(i), Params: m, Shadow: true}}})
				if err != nil {
					t.Fatal(err)
				}
			}
			name := "without the marker"
			if seed != limiter.SeedNone {
				name = "reading the marker"
			}
			res[name] = append(res[name], usec())
		}
	}
	for k, v := range res {
		slices.Sort(v)
		t.Logf("%s: least %.2f, p10 %.2f, median %.2f µs per call", k, v[0], v[len(v)/10], v[len(v)/2])
	}
}
