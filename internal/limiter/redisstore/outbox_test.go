package redisstore

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestOutboxOfEveryScript: every check script (lean1.lua, lean.lua and
// check.lua) adds an admitted check's cost, per global_shared rule, to the
// outbox of its hash tag in the same call, under the field "alg flags a b
// c window end key" (wire.go), so that two admissions in one window add
// up in one field; a regional rule, a dry run and a denial add nothing;
// and the check's usage is journaled as without regions.
func TestOutboxOfEveryScript(t *testing.T) {
	// 10 an hour: T = 360 s, burst 10, tolerance 3,600 s.
	gcra := limiter.Params{Algorithm: limiter.GCRA, Limit: 10, PeriodUS: limiter.HourUS, Exchange: true}
	const gcraHead = "1 128 360000000 10 3600000000"
	month := limiter.Params{Algorithm: limiter.FixedWindow, Limit: 1000, PeriodUS: 31 * limiter.DayUS, Calendar: limiter.CalendarMonth, Exchange: true}
	monthStart, monthEnd := monthOf(journalAt)
	slide := limiter.Params{Algorithm: limiter.SlidingWindowLog, Limit: 1000, PeriodUS: limiter.HourUS, Exchange: true}
	regional := limiter.Params{Algorithm: limiter.TokenBucket, Limit: 100, PeriodUS: limiter.HourUS}
	for _, c := range testenv.RedisTopologies(t) {
		for i, path := range []struct {
			name   string
			noLean bool
			extra  *limiter.Params // a second rule of the check
			script *redis.Script   // the script prepare chooses
		}{
			{"lean1", false, nil, lean1Script},
			{"lean", false, &month, leanScript},
			{"lean, a regional rule beside", false, &regional, leanScript},
			{"check.lua", true, &month, checkScript},
			{"check.lua, a log", false, &slide, checkScript},
		} {
			t.Run(c.Name+"/"+path.name, func(t *testing.T) {
				ctx := context.Background()
				s := New(c.Client)
				s.NoLean = path.noLean
				tag := fmt.Sprintf("%s{%c}", c.Prefix, 'o'+i)
				key := tag + "g"
				reqs := []limiter.Request{{Key: key, Params: gcra}}
				want := map[string]string{}
				field := func(units int64) {
					want[gcraHead+" 0 0 "+key] = fmt.Sprint(units)
					if path.extra == nil || !path.extra.Exchange {
						return
					}
					p := *path.extra
					a, b, c := defNumbers(p)
					window, end := int64(0), int64(0)
					switch p.Algorithm {
					case limiter.FixedWindow:
						window, end = monthStart, monthEnd
					case limiter.SlidingWindowLog:
						window = journalAt
					}
					f := fmt.Sprintf("%d %d %d %d %d %d %d %s", algorithmCode(p.Algorithm), flags(p), a, b, c, window, end, key+"2")
					want[f] = fmt.Sprint(units)
				}
				if path.extra != nil {
					reqs = append(reqs, limiter.Request{Key: key + "2", Params: *path.extra})
				}
				usage := statekey.UsageEntry("tenant-"+path.name, "key", "authenticated", "GET /items")
				row := statekey.UsageRow("tenant-"+path.name, "key", "authenticated", "GET /items")
				check := func(cost int64, dry, admitted bool) {
					t.Helper()
					b := limiter.Batch{Requests: reqs, Cost: cost, DryRun: dry, NowUS: journalAt, Usage: usage}
					cl := getCall()
					script, _ := s.prepare(cl, []*pending{{batch: b}})
					putCall(cl)
					if script != path.script {
						t.Fatalf("script %s chosen, want %s", script.Hash(), path.script.Hash())
					}
					o, err := s.Check(ctx, b)
					testenv.Must(t, err)
					if o.Admitted != admitted {
						t.Fatalf("cost %d dry %v: admitted %v, want %v", cost, dry, o.Admitted, admitted)
					}
					got, err := c.Client.HGetAll(ctx, statekey.OutboxKey(c.Prefix, byte('o'+i))).Result()
					testenv.Must(t, err)
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("after cost %d dry %v: outbox %v, want %v", cost, dry, got, want)
					}
				}
				field(3)
				check(3, false, true)
				field(5)
				check(2, false, true)
				check(4, true, true)    // a dry run: nothing
				check(20, false, false) // above the burst: denied, nothing
				if units, decisions := journalCounts(t, c.Client, statekey.JournalKeyOf(key), row); units != 5 || decisions != 2 {
					t.Errorf("journal: %d units, %d decisions; want 5, 2", units, decisions)
				}
			})
		}
	}
}
