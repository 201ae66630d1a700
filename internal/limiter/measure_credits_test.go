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

	"github.com/redis/go-redis/v9"

	. "github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
)

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
	if os.Getenv("TOLLGATE_MEASURE") != "1" {
		t.Skip("a measurement tool: set TOLLGATE_MEASURE=1 to run it")
	}
	c, runs := measureServer(t)
	if err := redisstore.LoadScript(context.Background(), c); err != nil {
		t.Fatal(err)
	}
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
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	store := redisstore.New(c)
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
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += callers {
				b := Batch{Requests: single(fmt.Sprintf("%sk%04d", tag, i%1000), measureCreditsRule), Cost: 1}
				if draw {
					b.Credits = creditsOf(tag)
				}
				if out, err := store.Check(ctx, b); err != nil || !out.Admitted {
					t.Errorf("check %d: %+v, %v", i, out, err)
					return
				}
			}
		}()
	}
	wg.Wait()
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
