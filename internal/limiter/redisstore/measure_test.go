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
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestMeasureCreditLog is a measurement tool, not a test: it is skipped
// unless TOLLGATE_MEASURE=1. On a redis-server of its own it replays the
// same script calls — lone checks over 1000 tenants, and calls of 20
// checks of one tenant (as a batching store makes them under load) —
// plain and drawing on a prepaid balance, through check.lua and through
// check.lua without its consumption log entry (the XADD of the entry
// checks share, its fields still formatted), alternating 100 times, and
// prints the least and the 10th percentile of the Redis script µs per
// check (INFO commandstats): what the log entry costs beside the rest of
// a draw.
//
//	TOLLGATE_MEASURE=1 go test ./internal/limiter/redisstore/ -run TestMeasureCreditLog -v -count=1
func TestMeasureCreditLog(t *testing.T) {
	skipUnlessMeasuring(t)
	const entry = "redis.call('XADD', pend[1], '*', 'u', string.format('%d', pend[2]), 't', string.format('%d', pend[4]))"
	if !strings.Contains(checkLua, entry) {
		t.Fatal("check.lua no longer writes the shared log entry this tool takes out")
	}
	scripts := []struct {
		name   string
		script *redis.Script
	}{
		{"check.lua", checkScript},
		{"without the log entry", redis.NewScript(strings.Replace(checkLua, entry,
			"local _ = string.format('%d', pend[2]) .. string.format('%d', pend[4])", 1))},
	}
	c := measureRedis(t)
	ctx := context.Background()
	rule := limiter.Params{Algorithm: limiter.GCRA, Limit: 5000, PeriodUS: limiter.HourUS, Burst: 5000}
	s := New(c)
	s.NoLean = true
	type recorded struct {
		keys []string
		args []any
	}
	const checks = 200
	record := func(perCall int, credits bool) []recorded {
		var out []recorded
		for i := range checks / perCall {
			var batch []*pending
			for j := range perCall {
				tag := fmt.Sprintf("tg:{%03d}", i%1000)
				if perCall > 1 {
					tag = "tg:{000}"
				}
				b := limiter.Batch{Requests: []limiter.Request{{Key: fmt.Sprintf("%sk%d", tag, (i*perCall+j)%1000), Params: rule}}, Cost: 1}
				if credits {
					b.Credits = &limiter.Credits{Key: tag + "c", Log: tag + "l", Line: 1 << 40}
				}
				batch = append(batch, &pending{batch: b})
			}
			cl := getCall()
			_, args := s.prepare(cl, batch)
			out = append(out, recorded{slices.Clone(cl.keys), slices.Clone(args)})
			putCall(cl)
		}
		return out
	}
	run := func(script *redis.Script, calls []recorded) float64 {
		testenv.Must(t, c.FlushAll(ctx).Err())
		for i := range 1000 { // the balances exist, as the drainer makes them
			tag := fmt.Sprintf("tg:{%03d}", i)
			testenv.Must(t, c.Set(ctx, tag+"c", 0, 0).Err())
			testenv.Must(t, c.XAdd(ctx, &redis.XAddArgs{Stream: tag + "l", Values: []string{"u", "0"}}).Err())
		}
		testenv.Must(t, script.Load(ctx, c).Err())
		testenv.Must(t, c.ConfigResetStat(ctx).Err())
		for _, r := range calls {
			testenv.Must(t, script.Run(ctx, c, r.keys, r.args...).Err())
		}
		usec := evalshaStat(ctx, c, "usec")
		if usec == 0 {
			t.Fatal("no evalsha in commandstats")
		}
		return usec / checks
	}
	logTableHead(t, "calls", "script", "Redis script µs/check: least", "10th percentile")
	for _, shape := range []struct {
		name    string
		perCall int
		credits bool
	}{{"lone, plain", 1, false}, {"lone, drawing on credits", 1, true}, {"20 of one tenant, plain", 20, false}, {"20 of one tenant, drawing on credits", 20, true}} {
		calls := record(shape.perCall, shape.credits)
		got := make([][]float64, len(scripts))
		for range 100 {
			for i, sc := range scripts {
				got[i] = append(got[i], run(sc.script, calls))
			}
		}
		for i, sc := range scripts {
			least, p10, _ := spread(got[i])
			t.Logf("| %s | %s | %.1f | %.1f |", shape.name, sc.name, least, p10)
		}
	}
}

// logTableHead logs the load average, then the head of a Markdown table
// of columns, whose rows a measurement logs next.
func logTableHead(t *testing.T, columns ...string) {
	t.Helper()
	t.Logf("load average %s", loadAverage())
	t.Log("| " + strings.Join(columns, " | ") + " |")
	t.Log(strings.Repeat("| --- ", len(columns)) + "|")
}

// spread sorts v and returns its least value, its 10th percentile and
// its median.
func spread(v []float64) (least, p10, median float64) {
	slices.Sort(v)
	return v[0], v[len(v)/10], v[len(v)/2]
}

// loadAverage returns the first three fields of /proc/loadavg, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

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
	c := measureRedis(t)
	ctx := context.Background()
	s := New(c)
	gcra := limiter.Params{Algorithm: limiter.GCRA, Limit: 5000, PeriodUS: limiter.HourUS, Burst: 5000}
	month := limiter.Params{Algorithm: limiter.FixedWindow, Limit: 1 << 52, Burst: 1 << 52, PeriodUS: 31 * limiter.DayUS, Calendar: limiter.CalendarMonth}
	for tag := range 256 {
		c.Set(ctx, fmt.Sprintf("m{%c}seeded", byte(tag)), 1, 0)
	}
	usec := func() float64 { return evalshaStat(ctx, c, "usec_per_call") }
	// µs per call, by whether the marker is read.
	res := map[string][]float64{}
	for round := range 40 {
		for _, seed := range []limiter.SeedMode{limiter.SeedNone, limiter.SeedOpen} {
			m := month
			m.Seed = seed
			c.ConfigResetStat(ctx)
			for i := range 1000 {
				k := measureTag(i)
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
		least, p10, median := spread(v)
		t.Logf("%s: least %.2f, p10 %.2f, median %.2f µs per call", k, least, p10, median)
	}
}

// skipUnlessMeasuring skips a measurement tool unless TOLLGATE_MEASURE=1.
func skipUnlessMeasuring(t *testing.T) {
	t.Helper()
	if os.Getenv("TOLLGATE_MEASURE") != "1" {
		t.Skip("a measurement tool: set TOLLGATE_MEASURE=1 to run it")
	}
}

// measureRedis skips a measurement tool unless TOLLGATE_MEASURE=1, and
// returns a client of a redis-server of its own.
func measureRedis(t *testing.T) *redis.Client {
	t.Helper()
	skipUnlessMeasuring(t)
	srv := testenv.StartRedisServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestMeasureUsageJournal is a measurement tool, not a test: it is
// skipped unless TOLLGATE_MEASURE=1. On a redis-server of its own it
// replays lone checks as the api makes them, with their usage journaled
// (Batch.Usage) and without, 1,000 checks a round, alternating 40 rounds,
// and prints the least, the 10th percentile and the median of the Redis
// script µs per call (INFO commandstats): what the journal costs an
// allowed check. The shapes: a key's check of one GCRA rule (lean1.lua)
// over 1,000 keys of 50 tenants; the same with the tenant's month (a
// shadow tally, lean.lua); an anonymous caller's check of one GCRA rule
// over fresh addresses; and calls of 20 keys' checks (check.lua, as a
// batching store makes them under load).
//
//	TOLLGATE_MEASURE=1 go test ./internal/limiter/redisstore/ -run TestMeasureUsageJournal -v -count=1
func TestMeasureUsageJournal(t *testing.T) {
	c := measureRedis(t)
	ctx := context.Background()
	s := New(c)
	gcra := limiter.Params{Algorithm: limiter.GCRA, Limit: 1 << 40, PeriodUS: limiter.HourUS, Burst: 1 << 30}
	month := limiter.Params{Algorithm: limiter.FixedWindow, Limit: 1 << 52, Burst: 1 << 52, PeriodUS: 31 * limiter.DayUS, Calendar: limiter.CalendarMonth}
	usec := func() (float64, float64) { return evalshaStat(ctx, c, "usec"), evalshaStat(ctx, c, "calls") }
	uuid, tagOf := measureUUID, measureTag
	shapes := []struct {
		name  string
		batch func(i, round int, journal bool) []limiter.Batch
	}{
		{"key, one GCRA rule (lean1.lua)", func(i, round int, journal bool) []limiter.Batch {
			b := limiter.Batch{Cost: 1, Requests: []limiter.Request{{Key: tagOf(i) + "g" + strconv.Itoa(i%1000), Params: gcra}}}
			if journal {
				b.Usage = statekey.UsageEntry(uuid(i%50), uuid(1000+i%1000), "authenticated", "GET /repos")
			}
			return []limiter.Batch{b}
		}},
		{"key, GCRA and the month's tally (lean.lua)", func(i, round int, journal bool) []limiter.Batch {
			m := month
			m.Seed = limiter.SeedNone
			b := limiter.Batch{Cost: 1, Requests: []limiter.Request{{Key: tagOf(i) + "g" + strconv.Itoa(i%1000), Params: gcra},
				{Key: tagOf(i) + "q" + strconv.Itoa(i%50), Params: m, Shadow: true}}}
			if journal {
				b.Usage = statekey.UsageEntry(uuid(i%50), uuid(1000+i%1000), "authenticated", "GET /repos")
			}
			return []limiter.Batch{b}
		}},
		{"anonymous address, one GCRA rule (lean1.lua)", func(i, round int, journal bool) []limiter.Batch {
			b := limiter.Batch{Cost: 1, Requests: []limiter.Request{{Key: tagOf(i) + "a" + strconv.Itoa(round*1000+i), Params: gcra}}}
			if journal {
				b.Usage = statekey.UsageEntry("", "", "anonymous", "*")
			}
			return []limiter.Batch{b}
		}},
		{"20 keys' checks a call (check.lua)", func(i, round int, journal bool) []limiter.Batch {
			var out []limiter.Batch
			for j := range 20 {
				b := limiter.Batch{Cost: 1, Requests: []limiter.Request{{Key: tagOf(i) + "g" + strconv.Itoa((i*20+j)%1000), Params: gcra}}}
				if journal {
					b.Usage = statekey.UsageEntry(uuid(i%50), uuid(1000+(i*20+j)%1000), "authenticated", "GET /repos")
				}
				out = append(out, b)
			}
			return out
		}},
	}
	logTableHead(t, "checks", "journal", "Redis script µs per check: least", "10th percentile", "median")
	for _, shape := range shapes {
		res := map[bool][]float64{}
		for round := range 40 {
			for _, journal := range []bool{false, true} {
				testenv.Must(t, c.ConfigResetStat(ctx).Err())
				checks := 0
				for i := range 1000 {
					batches := shape.batch(i, round, journal)
					if len(batches) == 1 {
						if _, err := s.Check(ctx, batches[0]); err != nil {
							t.Fatal(err)
						}
						checks++
						continue
					}
					ps := make([]*pending, len(batches))
					for j := range batches {
						ps[j] = &pending{batch: batches[j]}
					}
					s.run(ctx, ps)
					for _, p := range ps {
						if p.err != nil {
							t.Fatal(p.err)
						}
					}
					checks += len(ps)
					if i >= 49 {
						break // 50 calls of 20
					}
				}
				total, _ := usec()
				res[journal] = append(res[journal], total/float64(checks))
			}
		}
		for _, journal := range []bool{false, true} {
			least, p10, median := spread(res[journal])
			t.Logf("| %s | %v | %.2f | %.2f | %.2f |", shape.name, journal, least, p10, median)
		}
	}
}

// TestMeasureOutbox is a measurement tool, not a test: it is skipped
// unless TOLLGATE_MEASURE=1. On a redis-server of its own it replays a
// key's lone checks (their usage journaled, as the api makes them) over
// 1,000 keys of 50 tenants, 1,000 checks a round, alternating 40 rounds,
// and prints the least, the 10th percentile and the median of the Redis
// script µs per call (INFO commandstats): a regional rule through the
// lean scripts, and a global_shared one (its admissions written to the
// region's outbox) through check.lua, as before the lean scripts wrote
// the outbox, and through the lean scripts. The shapes: one GCRA rule
// (lean1.lua), and a GCRA rule with the tenant's month (a shadow tally,
// lean.lua).
//
//	TOLLGATE_MEASURE=1 go test ./internal/limiter/redisstore/ -run TestMeasureOutbox -v -count=1
func TestMeasureOutbox(t *testing.T) {
	c := measureRedis(t)
	ctx := context.Background()
	lean, general := New(c), New(c)
	general.NoLean = true
	gcra := limiter.Params{Algorithm: limiter.GCRA, Limit: 1 << 40, PeriodUS: limiter.HourUS, Burst: 1 << 30}
	month := limiter.Params{Algorithm: limiter.FixedWindow, Limit: 1 << 52, Burst: 1 << 52, PeriodUS: 31 * limiter.DayUS, Calendar: limiter.CalendarMonth}
	uuid, tagOf := measureUUID, measureTag
	usec := func() float64 { return evalshaStat(ctx, c, "usec") }

	batch := func(i int, shared, withMonth bool) limiter.Batch {
		g, m := gcra, month
		g.Exchange, m.Exchange = shared, shared
		b := limiter.Batch{Cost: 1, Requests: []limiter.Request{{Key: tagOf(i) + "g" + strconv.Itoa(i%1000), Params: g}},
			Usage: statekey.UsageEntry(uuid(i%50), uuid(1000+i%1000), "authenticated", "GET /repos")}
		if withMonth {
			b.Requests = append(b.Requests, limiter.Request{Key: tagOf(i) + "q" + strconv.Itoa(i%50), Params: m, Shadow: true})
		}
		return b
	}
	variants := []struct {
		name   string
		store  *Store
		shared bool
	}{{"regional, lean scripts", lean, false}, {"global_shared, check.lua", general, true}, {"global_shared, lean scripts", lean, true}}
	logTableHead(t, "checks", "rule, script", "Redis script µs per call: least", "10th percentile", "median")
	for _, shape := range []struct {
		name      string
		withMonth bool
	}{{"one GCRA rule", false}, {"GCRA and the month's tally", true}} {
		res := make([][]float64, len(variants))
		for range 40 {
			for v, variant := range variants {
				testenv.Must(t, c.FlushAll(ctx).Err())
				testenv.Must(t, c.ConfigResetStat(ctx).Err())
				for i := range 1000 {
					if _, err := variant.store.Check(ctx, batch(i, variant.shared, shape.withMonth)); err != nil {
						t.Fatal(err)
					}
				}
				res[v] = append(res[v], usec()/1000)
			}
		}
		for v, variant := range variants {
			least, p10, median := spread(res[v])
			t.Logf("| %s | %s | %.2f | %.2f | %.2f |", shape.name, variant.name, least, p10, median)
		}
	}
}

// measureUUID is the UUID of tenant or key number i of the measurements.
func measureUUID(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }

// measureTag is the key prefix with hash tag number i % 250 (never a
// brace) of the measurements.
func measureTag(i int) string {
	tag := byte(i % 250)
	if tag == '{' || tag == '}' {
		tag = 'x'
	}
	return fmt.Sprintf("m{%c}", tag)
}

// evalshaStat returns field (usec, calls, usec_per_call) of EVALSHA in
// Redis's commandstats, 0 when it has none.
func evalshaStat(ctx context.Context, c *redis.Client, field string) float64 {
	for line := range strings.Lines(c.Info(ctx, "commandstats").Val()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for kv := range strings.SplitSeq(v, ",") {
				if x, ok := strings.CutPrefix(kv, field+"="); ok {
					f, _ := strconv.ParseFloat(x, 64)
					return f
				}
			}
		}
	}
	return 0
}
