package exchange

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestRebalance: a global_split window of 1,000 a day across three
// regions (50 ms one way, E 50 ms, rebalancing every second). Demand in
// one region moves allotment to it; with one region cut off, demand in
// another moves allotment to it from the third while the cut-off region
// keeps its own; the allotments, sampled every 20 ms, never sum to more
// than the limit; the regions together never admit more than it; and
// once the moves have landed the allotments sum to the limit exactly
// (every release applied once).
func TestRebalance(t *testing.T) {
	if left := limiter.DayUS - time.Now().UnixMicro()%limiter.DayUS; left < 3*limiter.MinuteUS {
		t.Skip("the day's window would end during the test")
	}
	const limit = 1000
	id := [3]byte{7, 7, 7}
	const delay = 50 * time.Millisecond
	bed, regions := startExchange(t, delay, map[[3]byte]SplitRule{id: {Name: "p/split", Limit: limit}})
	ctx := context.Background()
	key := string(statekey.AppendKey(nil, prefix, 'b', id, []byte("tenat"), nil))
	table := statekey.AllotmentKey(prefix, statekey.Tag(prefix, key))
	names := []string{"us", "eu", "ap"}
	cfg := regions["us"].cfg
	floor := cfg.MinShare(limit, 0)
	share := map[string]int64{}
	for _, name := range names {
		share[name], _ = cfg.AllotmentOf(name, limit, limit)
	}

	// allotments reads every region's allotment, forwards then backwards,
	// and keeps each region's smaller reading; it reports how long the
	// reads took. A move lowers the donor before it raises the recipient,
	// so the sum of such readings never counts a move's units twice
	// (seeing a recipient raised in both passes means its first reading
	// came after the raise, and so both of the donor's, one before and
	// one after it, came after the lowering), however slow the reads.
	allotments := func() (map[string]int64, time.Duration) {
		start := time.Now()
		got := map[string]int64{}
		order := []string{"us", "eu", "ap", "ap", "eu", "us"}
		for _, name := range order {
			moved, err := regions[name].rdb.HGet(ctx, table, key).Int64()
			if err != nil && err != redis.Nil {
				t.Error(err)
			}
			if a, seen := got[name]; !seen || share[name]+moved < a {
				got[name] = share[name] + moved
			}
		}
		return got, time.Since(start)
	}
	var mu sync.Mutex
	var most int64
	var slowest time.Duration
	var samples int
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			a, took := allotments()
			mu.Lock()
			most, slowest, samples = max(most, a["us"]+a["eu"]+a["ap"]), max(slowest, took), samples+1
			mu.Unlock()
		}
	}()

	var admitted atomic.Int64
	offer := func(name string, rate int, d time.Duration) (n int64) {
		r := regions[name]
		p := limiter.Params{Algorithm: limiter.FixedWindow, Limit: share[name], PeriodUS: limiter.DayUS, Split: true}
		every := time.Second / time.Duration(rate)
		start := time.Now()
		for i := 0; time.Duration(i)*every < d; i++ {
			time.Sleep(time.Until(start.Add(time.Duration(i) * every))) // load injection: checks offered at rate
			o, err := r.store.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: key, Params: p}}, Cost: 1})
			testenv.Must(t, err)
			if o.Admitted {
				n++
			}
		}
		admitted.Add(n)
		return n
	}
	// until waits for cond on the allotments and returns how long it took.
	until := func(what string, cond func(map[string]int64) bool) time.Duration {
		start := time.Now()
		testenv.Eventually(t, start, 15*time.Second, what, func() (bool, string) {
			a, _ := allotments()
			return cond(a), fmt.Sprint(a)
		})
		return time.Since(start)
	}

	// Demand in us alone: its allotment grows towards L − 2 · floor.
	start := time.Now()
	var moved time.Duration
	var wg sync.WaitGroup
	wg.Go(func() {
		moved = until("us's allotment growing", func(a map[string]int64) bool { return a["us"] >= limit-2*floor-limit/50 })
	})
	usAdmitted := offer("us", 60, 8*time.Second)
	wg.Wait()
	afterUS, _ := allotments()

	// eu cut off; demand in ap alone: us gives ap what it has not used,
	// eu keeps its allotment.
	bed.Partition("eu")
	cut, _ := allotments()
	var apGrew time.Duration
	wg.Go(func() {
		apGrew = until("ap's allotment growing", func(a map[string]int64) bool { return a["ap"] > cut["ap"]+limit/10 })
	})
	apAdmitted := offer("ap", 60, 8*time.Second)
	wg.Wait()
	during, _ := allotments()
	if during["eu"] != cut["eu"] {
		t.Errorf("eu's allotment moved while it was cut off: %d, then %d", cut["eu"], during["eu"])
	}
	bed.Heal("eu")

	// All three at three times the limit: never more than the limit.
	for _, name := range names {
		wg.Go(func() { offer(name, 200, 5*time.Second) })
	}
	wg.Wait()
	settled := until("the allotments summing to the limit once every release landed", func(a map[string]int64) bool {
		return a["us"]+a["eu"]+a["ap"] == limit
	})
	close(stop)
	<-sampled
	final, _ := allotments()
	var counted int64
	for _, name := range names {
		counted += count(t, regions[name], key)
	}
	t.Logf("figure rebalance: equal shares %v, floor %d; us alone at 60/s: its allotment reached %d within %v (%d admitted in 8 s), allotments %v; eu cut off, ap alone at 60/s: ap's reached %d within %v (%d admitted), allotments %v, eu's kept at %d; all three at 200/s after the heal: %d admitted in all, counted %d (limit %d); allotments %v, summing to the limit %v after; most sum of %d samples %d (each sample's six reads within %v); %v in all",
		share, floor, afterUS["us"], moved.Round(10*time.Millisecond), usAdmitted, afterUS, during["ap"], apGrew.Round(10*time.Millisecond), apAdmitted,
		during, during["eu"], admitted.Load(), counted, limit, final, settled.Round(10*time.Millisecond), samples, most, slowest.Round(time.Microsecond), time.Since(start).Round(time.Second))
	if most > limit {
		t.Errorf("the allotments summed to %d in a sample, above the limit %d", most, limit)
	}
	if n := admitted.Load(); n > limit || counted > limit {
		t.Errorf("admitted %d (counted %d), above the limit %d", n, counted, limit)
	}
	if usAdmitted <= share["us"] {
		t.Errorf("us admitted %d, no more than its equal share %d: nothing moved to it", usAdmitted, share["us"])
	}
}

// TestMulDivDoesNotOverflow: the rebalancer's arithmetic on a split
// window of billions (a month's tokens) with demand as large.
func TestMulDivDoesNotOverflow(t *testing.T) {
	for _, c := range []struct{ a, b, c, want int64 }{
		{10, 3, 4, 7},
		{3_000_000_000, 4_000_000_000, 5_000_000_000, 2_400_000_000},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{9_000_000_000_000_000_000, 1_000_000_000_000_000_000, 3_000_000_000_000_000_000, 3_000_000_000_000_000_000},
		{0, 5, 7, 0},
	} {
		if got := mulDiv(c.a, c.b, c.c); got != c.want {
			t.Errorf("mulDiv(%d, %d, %d) = %d, want %d", c.a, c.b, c.c, got, c.want)
		}
	}
}

// TestLargeReportsGoOutInParts: a region whose rebalance report names
// more states than a message can carry (NATS refuses a message past its
// max_payload, 1 MiB) sends it in parts, and the others put it together;
// its admissions and heartbeats keep flowing.
func TestLargeReportsGoOutInParts(t *testing.T) {
	const limit = 1000
	id := [3]byte{7, 7, 8}
	_, regions := startExchange(t, 0, map[[3]byte]SplitRule{id: {Name: "p/split", Limit: limit}})
	ctx := context.Background()
	us, eu := regions["us"], regions["eu"]
	const tag = byte('k')
	table := statekey.AllotmentKey(prefix, tag)

	// 30,000 states with a unit moved to us: well over 1 MiB of report.
	const states = 30_000
	pipe := us.rdb.Pipeline()
	var size int
	for i := range states {
		key := statekey.AppendKey(nil, prefix, tag, id, fmt.Appendf(nil, "tenant-%06d", i), nil)
		size += base64.StdEncoding.EncodedLen(len(key)) + 24
		pipe.HSet(ctx, table, string(key), 1)
	}
	_, err := pipe.Exec(ctx)
	testenv.Must(t, err)
	if size <= 1<<20 {
		t.Fatalf("a report of %d bytes: not past NATS's max_payload", size)
	}
	testenv.Eventually(t, time.Now(), 30*time.Second, "eu holding us's whole report", func() (bool, string) {
		eu.x.mu.Lock()
		defer eu.x.mu.Unlock()
		r := eu.x.reports["us"]
		if r == nil {
			return false, "no report"
		}
		return len(r.Keys) == states, fmt.Sprintf("%d states", len(r.Keys))
	})
	shared := string(statekey.AppendKey(nil, prefix, tag, [3]byte{1, 2, 3}, []byte("tenant"), nil))
	admit(t, us, shared, 3)
	converged(t, []*exchangeRegion{eu, regions["ap"]}, shared, 3, 20*time.Second)
	eu.x.mu.Lock()
	seen := eu.x.lastSeen["us"]
	eu.x.mu.Unlock()
	if silent := time.Since(seen); silent > 2*Heartbeat {
		t.Errorf("eu last heard from us %v ago", silent)
	}
}

// TestQuietStatesGoBackToEqualShares: units of a split window moved
// from one region to another, on a state no region has demand on and
// whose window ended, go back to the region they came from, and both
// allotment tables lose the state's field: the tables, and the reports
// made of them, hold only the states whose allotments are apart, not
// every state that ever had a move.
func TestQuietStatesGoBackToEqualShares(t *testing.T) {
	const limit = 1000
	id := [3]byte{7, 7, 9}
	_, regions := startExchange(t, 0, map[[3]byte]SplitRule{id: {Name: "p/split", Limit: limit}})
	ctx := context.Background()
	us, eu := regions["us"], regions["eu"]
	table := statekey.AllotmentKey(prefix, 'q')
	moved := string(statekey.AppendKey(nil, prefix, 'q', id, []byte("quiet"), nil))
	// A state whose window still counts admissions in us keeps them.
	counting := string(statekey.AppendKey(nil, prefix, 'q', id, []byte("counting"), nil))
	for _, key := range []string{moved, counting} {
		testenv.Must(t, us.rdb.HSet(ctx, table, key, 40).Err())
		testenv.Must(t, eu.rdb.HSet(ctx, table, key, -40).Err())
	}
	testenv.Must(t, us.rdb.HSet(ctx, counting, "window", 0, "count", 10).Err())
	testenv.Eventually(t, time.Now(), 20*time.Second, "the units back in eu, both fields gone", func() (bool, string) {
		a, errA := us.rdb.HExists(ctx, table, moved).Result()
		b, errB := eu.rdb.HExists(ctx, table, moved).Result()
		testenv.Must(t, errors.Join(errA, errB))
		return !a && !b, fmt.Sprintf("field in us %v, in eu %v", a, b)
	})
	if got, err := us.rdb.HGet(ctx, table, counting).Int64(); err != nil || got != 40 {
		t.Errorf("us's units of a state still counting: %d (%v), want the 40 kept", got, err)
	}
}

// evalshaCalls returns how many EVALSHA calls r's Redis has served.
func evalshaCalls(t *testing.T, r *exchangeRegion) int64 {
	t.Helper()
	info, err := r.rdb.Info(context.Background(), "commandstats").Result()
	testenv.Must(t, err)
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			testenv.Must(t, err)
			return n
		}
	}
	return 0
}

// TestQuietStatesThatCountCostNoCall: a rebalance calls donate.lua only
// for the quiet states that can give their moved units back (their
// window counts nothing), not for every quiet state with units moved
// here: those of a split month would otherwise cost a Redis round trip
// each, every interval, until the month ended.
func TestQuietStatesThatCountCostNoCall(t *testing.T) {
	const limit = 1000
	id := [3]byte{7, 7, 10}
	rules := map[[3]byte]SplitRule{id: {Name: "p/split", Limit: limit}}
	_, regions := startExchange(t, 0, rules)
	ctx := context.Background()
	us := regions["us"]
	us.stop()
	nc, err := Dial(us.cfg, 5*time.Second)
	testenv.Must(t, err)
	defer nc.Close()
	x, err := New(us.rdb, nc, Config{Region: us.cfg, Prefix: prefix,
		SplitRules: func(context.Context) (map[[3]byte]SplitRule, error) { return rules, nil }})
	testenv.Must(t, err)
	testenv.Must(t, x.loadScripts(ctx))

	// 200 states whose windows count, and one whose window counts
	// nothing, each with 40 units moved from eu to us (eu's report says
	// so).
	const tag, counting = byte('w'), 200
	table := statekey.AllotmentKey(prefix, tag)
	euShare, _ := us.cfg.AllotmentOf("eu", limit, limit)
	report := &demandReport{AtUS: time.Now().UnixMicro()}
	pipe := us.rdb.Pipeline()
	for i := range counting + 1 {
		key := string(statekey.AppendKey(nil, prefix, tag, id, fmt.Appendf(nil, "tenant-%03d", i), nil))
		pipe.HSet(ctx, table, key, 40)
		if i < counting {
			pipe.HSet(ctx, key, "window", 0, "count", 10)
		}
		report.Keys = append(report.Keys, keyDemand{Key: []byte(key), Allotment: euShare - 40})
	}
	_, err = pipe.Exec(ctx)
	testenv.Must(t, err)
	x.mu.Lock()
	x.reports["eu"] = report
	x.mu.Unlock()

	before := evalshaCalls(t, us)
	testenv.Must(t, x.rebalance(ctx))
	calls := evalshaCalls(t, us) - before - int64(len(statekey.Tags())) // less the demand reads, one a tag
	if calls != 1 {
		t.Errorf("one rebalance called donate.lua %d times, want 1: the one state that can give", calls)
	}
	moved, err := us.rdb.HGetAll(ctx, table).Result()
	testenv.Must(t, err)
	if len(moved) != counting {
		t.Errorf("us's allotment table after the rebalance: %d states, want the %d that count (the other's units given back)", len(moved), counting)
	}
}

// TestNoRegionGivesToOneNotReadingItsStream: a region new to the
// exchange whose reading of the others' streams keeps failing (here its
// Redis refuses its read notes) for longer than a rebalance interval,
// while it has demand on a split window, reports nothing until it reads
// them all: the others would give it units by releases on their streams
// that its first consumers, starting at the streams' ends, would never
// read, and those units would leave the limit for good. Once it reads,
// units move to it and the allotments sum to the limit.
func TestNoRegionGivesToOneNotReadingItsStream(t *testing.T) {
	if left := limiter.DayUS - time.Now().UnixMicro()%limiter.DayUS; left < 3*limiter.MinuteUS {
		t.Skip("the day's window would end during the test")
	}
	const limit = 1000
	id := [3]byte{7, 7, 11}
	_, regions := startExchange(t, 0, map[[3]byte]SplitRule{id: {Name: "p/split", Limit: limit}})
	ctx := context.Background()
	us, eu, ap := regions["us"], regions["eu"], regions["ap"]
	ap.stop()
	js := jetStreamOf(t, us.cfg)
	for _, source := range []string{"us", "eu"} { // ap new to both streams
		testenv.Must(t, js.DeleteConsumer(ctx, Stream(source), "tollgate-ap"))
	}
	read := prefix + "regions:read"
	testenv.Must(t, ap.rdb.Del(ctx, read).Err())
	client, grant := refusing(t, ap, "newcomer")
	ap.startAs(t, client)

	key := string(statekey.AppendKey(nil, prefix, 'v', id, []byte("tenant"), nil))
	table := statekey.AllotmentKey(prefix, 'v')
	share := map[string]int64{}
	for _, r := range []*exchangeRegion{us, eu, ap} {
		share[r.name], _ = r.cfg.AllotmentOf(r.name, limit, limit)
	}
	allotments := func() (map[string]int64, int64) {
		got, sum := map[string]int64{}, int64(0)
		for _, r := range []*exchangeRegion{ap, eu, us} { // the recipient first: a move in flight lowers the sum
			moved, err := r.rdb.HGet(ctx, table, key).Int64()
			if err != nil && err != redis.Nil {
				testenv.Must(t, err)
			}
			got[r.name] = share[r.name] + moved
			sum += got[r.name]
		}
		return got, sum
	}
	// Demand in ap alone, ten checks a second.
	stop := make(chan struct{})
	offered := make(chan struct{})
	go func() {
		defer close(offered)
		p := limiter.Params{Algorithm: limiter.FixedWindow, Limit: share["ap"], PeriodUS: limiter.DayUS, Split: true}
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond): // load injection: checks offered at a rate
			}
			_, err := ap.store.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: key, Params: p}}, Cost: 1})
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-offered
	}()
	testenv.Eventually(t, time.Now(), 20*time.Second, "ap's reading of the streams refused", func() (bool, string) {
		n := refusals(t, ap, "newcomer")
		return n >= 2, fmt.Sprintf("%d refused", n)
	})
	time.Sleep(4 * us.cfg.RebalanceInterval) // fault injection: the refusal lasts four rebalance intervals
	grant("~" + read)
	testenv.Eventually(t, time.Now(), 30*time.Second, "units moving to ap once it reads the streams", func() (bool, string) {
		a, _ := allotments()
		return a["ap"] >= share["ap"]+limit/10, fmt.Sprint(a)
	})
	close(stop)
	<-offered
	testenv.Eventually(t, time.Now(), 20*time.Second, "the allotments summing to the limit once every release landed", func() (bool, string) {
		a, sum := allotments()
		return sum == limit, fmt.Sprintf("%v, sum %d", a, sum)
	})
}
