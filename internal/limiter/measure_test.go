package limiter_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	. "github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestMeasure is a measurement tool, not a test: it is skipped unless
// TOLLGATE_MEASURE=1. It starts a redis-server of its own, so that
// INFO commandstats counts only its calls, and prints Markdown tables of
//
//   - Redis CPU per check: cmdstat_evalsha usec_per_call, for checks that
//     are admitted (and write) and checks that are denied;
//   - state bytes per key: Redis MEMORY USAGE, and Go heap per key in
//     the memory store;
//   - the sliding window log's state and CPU as its limit grows.
//
// Every figure is the median of TOLLGATE_MEASURE_RUNS runs (default 5).
//
//	TOLLGATE_MEASURE=1 go test ./internal/limiter/ -run TestMeasure -v -count=1
func TestMeasure(t *testing.T) {
	c, runs := measureServer(t)
	ctx := context.Background()
	version, err := infoField(ctx, c, "server", "redis_version")
	if err != nil {
		t.Fatal(err)
	}
	const checks = 5000
	t.Logf("redis %s, %s %s, %d CPUs, median of %d runs, %d checks per run, key %q (%d bytes)",
		version, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runs, checks, measureKey, len(measureKey))

	t.Log("")
	t.Log("| rule (100/s) | Redis CPU µs/check admitted | denied | Redis MEMORY USAGE bytes | Go heap bytes/key |")
	t.Log("| --- | --- | --- | --- | --- |")
	for _, rc := range benchRules {
		var admitted, denied, usage, goBytes []float64
		for range runs {
			a, u := measureRedis(t, c, rc.p, checks, false)
			d, _ := measureRedis(t, c, rc.p, checks, true)
			admitted, denied, usage = append(admitted, a), append(denied, d), append(usage, u)
			goBytes = append(goBytes, measureGo(t, rc.p, checks, 100_000))
		}
		t.Logf("| %s | %.2f | %.2f | %.0f | %.0f |", rc.name, median(admitted), median(denied), median(usage), median(goBytes))
	}

	t.Log("")
	t.Log("| sliding_window_log limit (per s, full log) | Redis CPU µs/check | Redis MEMORY USAGE bytes | bytes/entry | Go heap bytes/key | Go bytes/entry |")
	t.Log("| --- | --- | --- | --- | --- | --- |")
	for _, limit := range []int64{10, 100, 1000, 10000} {
		p := Params{Algorithm: SlidingWindowLog, Limit: limit, PeriodUS: SecondUS}
		var cpu, usage, goBytes []float64
		for range runs {
			u, m := measureRedisFull(t, c, p, checks)
			cpu, usage = append(cpu, u), append(usage, m)
			goBytes = append(goBytes, measureGo(t, p, int(2*limit), max(100, int(1_000_000/limit))))
		}
		t.Logf("| %d | %.2f | %.0f | %.1f | %.0f | %.1f |", limit, median(cpu), median(usage), median(usage)/float64(limit),
			median(goBytes), median(goBytes)/float64(limit))
	}

	t.Log("")
	t.Log("| batching store, concurrent callers | checks per script call | Redis CPU µs/check, one GCRA rule | two rules (pro search) |")
	t.Log("| --- | --- | --- | --- |")
	for _, callers := range []int{1, 4, 16, 64} {
		var perCall, one, two []float64
		for range runs {
			n1, u1 := measureBatched(t, c, callers, checks, false)
			_, u2 := measureBatched(t, c, callers, checks, true)
			perCall, one, two = append(perCall, n1), append(one, u1), append(two, u2)
		}
		t.Logf("| %d | %.1f | %.2f | %.2f |", callers, median(perCall), median(one), median(two))
	}
}

// measureBatched runs n admitted checks from callers goroutines at once
// (each on keys of its own, as many API keys would) through a batching
// store, the pro plan's hourly GCRA alone or with its search bucket, and
// returns the checks per script call and the Redis CPU µs per check.
func measureBatched(t *testing.T, c *redis.Client, callers, n int, search bool) (checksPerCall, usecPerCheck float64) {
	t.Helper()
	ctx := context.Background()
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	store := redisstore.NewBatching(c, redisstore.BatchConfig{})
	hourly := Params{Algorithm: GCRA, Limit: 5000, PeriodUS: HourUS, Burst: 5000}
	bucket := Params{Algorithm: TokenBucket, Limit: 10, PeriodUS: SecondUS, Burst: 10}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	spread(callers, n, func(i int) bool {
		key := fmt.Sprintf("tg:{%c}k%05d", 'a'+i%26, i%1000)
		reqs := single(key, hourly)
		if search {
			reqs = append(reqs, Request{Key: key + "s", Params: bucket})
		}
		if _, err := store.Check(ctx, Batch{Requests: reqs, Cost: 1}); err != nil {
			t.Error(err)
			return false
		}
		return true
	})
	calls, usec := evalshaTotals(t, c)
	return float64(n) / calls, usec / float64(n)
}

// spread calls do(i) for every i in [0, n) from callers goroutines at
// once, goroutine g taking g, g+callers, g+2×callers, …, and returns when
// all are done. A goroutine stops at the first do that returns false.
func spread(callers, n int, do func(i int) bool) {
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += callers {
				if !do(i) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestMeasureLone, like TestMeasure a measurement tool (TOLLGATE_MEASURE=1;
// 3 × TOLLGATE_MEASURE_RUNS runs), prints the Redis cost of a lone check
// of each common shape through check.lua and through the lean scripts,
// alternating, on a redis-server of its own:
//
//	TOLLGATE_MEASURE=1 go test ./internal/limiter/ -run TestMeasureLone -v -count=1
func TestMeasureLone(t *testing.T) {
	c, runs := measureServer(t)
	// Short runs, many of them: time taken from Redis by other work on
	// the machine only ever adds, so the least of many runs is the
	// closest to what the script itself costs; the median is beside it.
	checks, shapes := 1000, loneShapes
	runs *= 3
	// TOLLGATE_MEASURE_GAP (a duration) leaves Redis idle that long
	// between checks, as a lone check at a low rate finds it: its caches
	// then hold whatever ran meanwhile. Fewer checks and the first shape
	// only, so that it stays short.
	gap, _ := time.ParseDuration(os.Getenv("TOLLGATE_MEASURE_GAP"))
	if gap > 0 {
		checks, shapes = 200, loneShapes[:1]
		t.Logf("%v between checks", gap)
	}
	t.Logf("%d CPUs, %d runs of %d checks each, check.lua and lean alternating; load average %s", runtime.NumCPU(), runs, checks,
		loadAverage())
	t.Log("| lone check, one connection (the pro plan's rules) | Redis script µs/check, check.lua: least (median) | lean | Redis process CPU µs/check, check.lua: least (median) | lean |")
	t.Log("| --- | --- | --- | --- | --- |")
	for _, shape := range shapes {
		var scriptGeneral, scriptLean, cpuGeneral, cpuLean []float64
		for range runs {
			u, p := measureLone(t, c, shape.params, checks, true, gap)
			scriptGeneral, cpuGeneral = append(scriptGeneral, u), append(cpuGeneral, p)
			u, p = measureLone(t, c, shape.params, checks, false, gap)
			scriptLean, cpuLean = append(scriptLean, u), append(cpuLean, p)
		}
		t.Logf("| %s | %.1f (%.1f) | %.1f (%.1f) | %.1f (%.1f) | %.1f (%.1f) |", shape.name,
			slices.Min(scriptGeneral), median(scriptGeneral), slices.Min(scriptLean), median(scriptLean),
			slices.Min(cpuGeneral), median(cpuGeneral), slices.Min(cpuLean), median(cpuLean))
	}
}

// measureServer starts a redis-server of the test's own and returns a
// client of it and the runs to take the median of
// (TOLLGATE_MEASURE_RUNS, default 5).
func measureServer(t *testing.T) (*redis.Client, int) {
	t.Helper()
	if os.Getenv("TOLLGATE_MEASURE") != "1" {
		t.Skip("a measurement tool: set TOLLGATE_MEASURE=1 to run it")
	}
	runs := 5
	if v := os.Getenv("TOLLGATE_MEASURE_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TOLLGATE_MEASURE_RUNS=%q: want a positive integer", v)
		}
		runs = n
	}
	srv := testenv.StartRedisServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	if err := redisstore.LoadScript(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return c, runs
}

// loadAverage returns the first three fields of /proc/loadavg, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// loneShapes are the common shapes of a check: the rules of the pro plan
// that a GET matches (one GCRA rule) and that its search matches (GCRA and
// a token bucket), each also with a monthly quota.
var loneShapes = func() []struct {
	name   string
	params []Params
} {
	hourly := Params{Algorithm: GCRA, Limit: 5000, PeriodUS: HourUS, Burst: 5000}
	search := Params{Algorithm: TokenBucket, Limit: 10, PeriodUS: SecondUS, Burst: 10}
	quota := Params{Algorithm: FixedWindow, Limit: 100_000, PeriodUS: 31 * DayUS, Burst: 100_000, Calendar: CalendarMonth}
	return []struct {
		name   string
		params []Params
	}{
		{"GCRA", []Params{hourly}},
		{"GCRA + token bucket", []Params{hourly, search}},
		{"GCRA + monthly quota", []Params{hourly, quota}},
		{"GCRA + token bucket + monthly quota", []Params{hourly, search, quota}},
	}
}()

// measureLone runs n admitted checks of the rules ps, one at a time on one
// connection, over 1000 callers, with Redis's clock, through check.lua
// alone (general) or the lean path, and returns the Redis script µs and
// the Redis process CPU µs per check.
func measureLone(t *testing.T, c *redis.Client, ps []Params, n int, general bool, gap time.Duration) (scriptUS, cpuUS float64) {
	t.Helper()
	ctx := context.Background()
	store := flushedStore(t, c)
	store.NoLean = general
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	cpu0 := redisCPU(t, c)
	for i := range n {
		if gap > 0 {
			// Not a wait: Redis left idle for gap is what is measured
			// (TOLLGATE_MEASURE_GAP; a measurement tool, skipped in
			// `make test`).
			time.Sleep(gap)
		}
		tag := fmt.Sprintf("tg:{%03d}", i%1000)
		reqs := make([]Request, len(ps))
		for j, p := range ps {
			reqs[j] = Request{Key: tag + strconv.Itoa(j), Params: p}
		}
		out, err := store.Check(ctx, Batch{Requests: reqs, Cost: 1, ReportState: true})
		if err != nil {
			t.Fatal(err)
		}
		if !out.Admitted {
			t.Fatalf("check %d denied: %+v", i, out)
		}
	}
	cpu := redisCPU(t, c) - cpu0
	return evalshaUsecPerCall(t, c), cpu / float64(n)
}

// redisCPU returns Redis's process CPU so far (INFO cpu: system + user), µs.
func redisCPU(t *testing.T, c *redis.Client) float64 {
	t.Helper()
	var sum float64
	for _, field := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, err := infoField(context.Background(), c, "cpu", field)
		if err != nil {
			t.Fatal(err)
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatal(err)
		}
		sum += f
	}
	return sum * 1e6
}

// measureKey is shaped like a production state key of a per-key rule
// (internal/statekey): the prefix, a one-byte hash tag, three
// bytes of rule and five of API key, 14 bytes in all.
const measureKey = "tg:{\x8a}\x01\x02\x03\xd4\x05\x96\x07\x38"

// measureRedis runs n checks of p on a fresh key and returns the Redis CPU
// µs per call and the key's MEMORY USAGE afterwards. Admitted checks come
// at 90% of the limit; denied ones at one instant after spending the whole
// capacity.
func measureRedis(t *testing.T, c *redis.Client, p Params, n int, denied bool) (usecPerCall, usage float64) {
	t.Helper()
	ctx := context.Background()
	store := flushedStore(t, c)
	reqs := single(measureKey, p)
	window, _ := scale(p)
	step := window / p.Limit * 10 / 9
	now := epoch
	if denied {
		if _, err := store.Check(ctx, Batch{Requests: reqs, Cost: capacity(p), NowUS: now}); err != nil {
			t.Fatal(err)
		}
		step = 0
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for range n {
		now += step
		out, err := store.Check(ctx, Batch{Requests: reqs, Cost: 1, NowUS: now})
		if err != nil {
			t.Fatal(err)
		}
		if out.Admitted == denied {
			t.Fatalf("%+v: got admitted %v, want %v", p, out.Admitted, !denied)
		}
	}
	return evalshaUsecPerCall(t, c), memoryUsage(t, c, measureKey)
}

// flushedStore empties Redis and returns a store on it whose keys live an
// hour longer, so that none expires in real time while measured.
func flushedStore(t *testing.T, c *redis.Client) *redisstore.Store {
	t.Helper()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	store := redisstore.New(c)
	store.ExtraTTL = time.Hour
	return store
}

// measureRedisFull runs n (at least 2 × limit) checks of a sliding log at
// exactly the limit's rate, which keeps the log full (limit entries), and
// returns the CPU per call and MEMORY USAGE.
func measureRedisFull(t *testing.T, c *redis.Client, p Params, n int64) (usecPerCall, usage float64) {
	t.Helper()
	ctx := context.Background()
	store := flushedStore(t, c)
	reqs := single(measureKey, p)
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	now := epoch
	for range max(n, 2*p.Limit) {
		now += p.PeriodUS / p.Limit
		if out, err := store.Check(ctx, Batch{Requests: reqs, Cost: 1, NowUS: now}); err != nil || !out.Admitted {
			t.Fatalf("filling the log: %+v, %v", out, err)
		}
	}
	if n, err := c.ZCard(ctx, measureKey).Result(); err != nil || n != p.Limit {
		t.Fatalf("log holds %d entries (%v), want %d", n, err, p.Limit)
	}
	return evalshaUsecPerCall(t, c), memoryUsage(t, c, measureKey)
}

// measureGo returns the Go heap bytes per key of a memory store holding
// keys copies of the state n checks of p leave (as measureRedis admits
// them), map and key strings included.
func measureGo(t *testing.T, p Params, n, keys int) float64 {
	t.Helper()
	s := NewMemoryStore(func() int64 { panic("injected") })
	reqs := single(measureKey, p)
	window, _ := scale(p)
	step := window / p.Limit * 10 / 9
	if p.Algorithm == SlidingWindowLog {
		step = p.PeriodUS / p.Limit // a full log, as measureRedisFull
	}
	now := epoch
	for range n {
		now += step
		if _, err := s.Check(context.Background(), Batch{Requests: reqs, Cost: 1, NowUS: now}); err != nil {
			t.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	entries := CopyEntry(s, measureKey, keys)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(entries)
	// Collect now, not while the next Redis measurement runs: on a small
	// machine the collector would compete with redis-server for CPU.
	runtime.GC()
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(keys)
}

func evalshaUsecPerCall(t *testing.T, c *redis.Client) float64 {
	t.Helper()
	stat, err := infoField(context.Background(), c, "commandstats", "cmdstat_evalsha")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(stat, ",") {
		if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no usec_per_call in %q", stat)
	return 0
}

func memoryUsage(t *testing.T, c *redis.Client, key string) float64 {
	t.Helper()
	n, err := c.MemoryUsage(context.Background(), key, 0).Result()
	if err != nil {
		t.Fatalf("MEMORY USAGE %s: %v", key, err)
	}
	return float64(n)
}

// infoField returns one field of an INFO section.
func infoField(ctx context.Context, c *redis.Client, section, field string) (string, error) {
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("INFO %s has no %s", section, field)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// TestMeasureCredits, like TestMeasure a measurement tool
// (TOLLGATE_MEASURE=1; 3 × TOLLGATE_MEASURE_RUNS runs), prints what a
// draw on a prepaid balance costs Redis beside the same check without
// one, on a redis-server of its own: the Redis script µs per check (INFO
// commandstats) of admitted checks of the pro plan's hourly GCRA rule,
//
//   - lone checks on one connection, over 1000 tenants: plain (through the
//     lean script, as a plan without credits goes), plain through
//     check.lua, and drawing on the tenant's balance;
//   - checks of 1000 keys of one tenant from 64 concurrent callers
//     through a batching store, as `make bench-http`'s allowed-keys and
//     allowed-credits scenarios send them: plain, and drawing on the
//     tenant's one balance.
//
// Alternating the shapes run by run, it prints the least and the median:
//
//	TOLLGATE_MEASURE=1 go test ./internal/limiter/ -run TestMeasureCredits -v -count=1
func TestMeasureCredits(t *testing.T) {
	c, runs := measureServer(t)
	const checks = 2000
	runs *= 3
	t.Logf("%d CPUs, %d runs of %d checks each, shapes alternating; load average %s", runtime.NumCPU(), runs, checks, loadAverage())
	shapes := []struct {
		name    string
		measure func() float64
	}{
		{"lone, plain (lean script)", func() float64 { return measureCreditsLone(t, c, checks, false, false) }},
		{"lone, plain (check.lua)", func() float64 { return measureCreditsLone(t, c, checks, false, true) }},
		{"lone, drawing on credits", func() float64 { return measureCreditsLone(t, c, checks, true, true) }},
		{"one tenant, 64 callers, plain (lean script)", func() float64 { return measureCreditsBatched(t, c, checks, false, false) }},
		{"one tenant, 64 callers, plain (check.lua)", func() float64 { return measureCreditsBatched(t, c, checks, false, true) }},
		{"one tenant, 64 callers, drawing on credits", func() float64 { return measureCreditsBatched(t, c, checks, true, true) }},
	}
	got := make([][]float64, len(shapes))
	for range runs {
		for i, s := range shapes {
			got[i] = append(got[i], s.measure())
		}
	}
	t.Log("| check | Redis script µs/check: least | median |")
	t.Log("| --- | --- | --- |")
	for i, s := range shapes {
		t.Logf("| %s | %.1f | %.1f |", s.name, slices.Min(got[i]), median(got[i]))
	}
}

// measureCredits' rule: the pro plan's hourly GCRA rule.
var measureCreditsRule = Params{Algorithm: GCRA, Limit: 5000, PeriodUS: HourUS, Burst: 5000}

// creditsOf returns the balance of the tenant whose hash tag is tag, as
// the check path sends it: a line far above what the checks draw.
func creditsOf(tag string) *Credits {
	return &Credits{Key: tag + "c", Log: tag + "l", Line: 1 << 40}
}

// measureCreditsLone runs n admitted checks one at a time on one
// connection over 1000 tenants, drawing on their balances or not, and
// returns the Redis script µs per check.
func measureCreditsLone(t *testing.T, c *redis.Client, n int, draw, general bool) float64 {
	t.Helper()
	ctx := context.Background()
	store := flushedStore(t, c)
	store.NoLean = general
	prime(t, c, store, 1000, draw)
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		tag := fmt.Sprintf("tg:{%03d}", i%1000)
		b := Batch{Requests: single(tag+"k", measureCreditsRule), Cost: 1}
		if draw {
			b.Credits = creditsOf(tag)
		}
		if out, err := store.Check(ctx, b); err != nil || !out.Admitted {
			t.Fatalf("check %d: %+v, %v", i, out, err)
		}
	}
	return evalshaUsecPerCall(t, c)
}

// prime makes the balances of tenants tenants exist (as the credits
// drainer does), so that checks find their counters.
func prime(t *testing.T, c *redis.Client, store *redisstore.Store, tenants int, draw bool) {
	t.Helper()
	if !draw {
		return
	}
	for i := range tenants {
		tag := fmt.Sprintf("tg:{%03d}", i)
		if _, err := store.RebuildCredits(context.Background(), creditsOf(tag).Key, creditsOf(tag).Log, "", 0); err != nil {
			t.Fatal(err)
		}
		// The log exists too, as it does once the drainer has trimmed it.
		if err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: creditsOf(tag).Log, Values: []string{"u", "0"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// measureCreditsBatched runs n admitted checks of 1000 keys of one tenant
// from 64 concurrent callers through a batching store, drawing on the
// tenant's balance or not, and returns the Redis script µs per check.
func measureCreditsBatched(t *testing.T, c *redis.Client, n int, draw, general bool) float64 {
	t.Helper()
	ctx := context.Background()
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	store := redisstore.NewBatching(c, redisstore.BatchConfig{})
	store.NoLean = general
	prime(t, c, store, 1, draw)
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const callers = 64
	tag := "tg:{000}"
	spread(callers, n, func(i int) bool {
		b := Batch{Requests: single(fmt.Sprintf("%sk%04d", tag, i%1000), measureCreditsRule), Cost: 1}
		if draw {
			b.Credits = creditsOf(tag)
		}
		if out, err := store.Check(ctx, b); err != nil || !out.Admitted {
			t.Errorf("check %d: %+v, %v", i, out, err)
			return false
		}
		return true
	})
	calls, usec := evalshaTotals(t, c)
	t.Logf("batched, credits %v: %.1f checks per call", draw, float64(n)/calls)
	return usec / float64(n)
}

// evalshaTotals returns the script calls and µs counted since the last
// CONFIG RESETSTAT.
func evalshaTotals(t *testing.T, c *redis.Client) (calls, usec float64) {
	t.Helper()
	stat, err := infoField(context.Background(), c, "commandstats", "cmdstat_evalsha")
	if err != nil {
		t.Fatal(err)
	}
	for kv := range strings.SplitSeq(stat, ",") {
		name, value, _ := strings.Cut(kv, "=")
		switch name {
		case "calls":
			calls, _ = strconv.ParseFloat(value, 64)
		case "usec":
			usec, _ = strconv.ParseFloat(value, 64)
		}
	}
	return calls, usec
}
