package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/testenv"

	. "github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
)

// storeCase names a store under test and opens a fresh instance of it.
type storeCase struct {
	name string
	open func(t testing.TB) openStore
}

// openStore is a store under test with a key namespace of its own.
type openStore struct {
	Store
	// ns prefixes every key of the test; it ends in a hash tag, so all the
	// keys of a test land in one Redis Cluster slot.
	ns string
	// rdb reads raw keys (DUMP, PEXPIRETIME); nil for the memory store.
	rdb redis.UniversalClient
}

// epoch is an arbitrary, realistic start time for injected clocks.
const epoch int64 = 1_767_225_600_000_000 // 2026-01-01T00:00:00Z

// stores returns the memory store, a single Redis and a 3-master Redis
// Cluster, the Redis ones both calling once per check and batching.
// Redis stores keep keys a minute longer than the injected clock asks, so
// that real time passing during the test expires nothing.
func stores() []storeCase {
	return append([]storeCase{memoryStoreCase()}, redisStores()...)
}

// redisStores returns the Redis stores only.
func redisStores() []storeCase {
	return []storeCase{redisStoreCase(), clusterStoreCase(), batchingStoreCase(redisStoreCase()), batchingStoreCase(clusterStoreCase())}
}

// batchingStoreCase is sc's store coalescing concurrent checks, and the
// operations that follow them.
func batchingStoreCase(sc storeCase) storeCase {
	return storeCase{sc.name + "-batching", func(t testing.TB) openStore {
		s := sc.open(t)
		b := redisstore.NewBatching(s.rdb, redisstore.BatchConfig{Operations: true})
		b.ExtraTTL = time.Minute
		b.HoldIndex = s.Store.(*redisstore.Store).HoldIndex
		s.Store = b
		return s
	}}
}

func memoryStoreCase() storeCase {
	return storeCase{"memory", func(t testing.TB) openStore {
		s := NewMemoryStore(func() int64 { panic("tests inject time") })
		SetReadClock(s, func() int64 { return epoch }) // what the credits' drainer reads
		return openStore{Store: s, ns: "{m}:"}
	}}
}

func redisStoreCase() storeCase {
	return redisServerCase("redis", "{r}:", func(t testing.TB) (redis.UniversalClient, string) { return testenv.Redis(t) })
}

func clusterStoreCase() storeCase {
	return redisServerCase("cluster", "{c}:", func(t testing.TB) (redis.UniversalClient, string) { return testenv.RedisCluster(t) })
}

// redisServerCase is the Redis store on the client that connect returns,
// its keys under connect's test prefix and then tag.
func redisServerCase(name, tag string, connect func(t testing.TB) (redis.UniversalClient, string)) storeCase {
	return storeCase{name, func(t testing.TB) openStore {
		c, prefix := connect(t)
		s := redisstore.New(c)
		s.ExtraTTL = time.Minute
		s.HoldIndex = prefix + "holds"
		return openStore{Store: s, ns: prefix + tag, rdb: c}
	}}
}

// step is one row of a vector table: at t (µs after the table's start) a
// check of cost expects the result.
type step struct {
	t    int64
	cost int64
	want Result
}

// runVector runs steps against every store, starting at epoch.
func runVector(t *testing.T, p Params, steps []step) {
	t.Helper()
	runVectorAt(t, epoch, p, steps)
}

// runVectorAt runs steps against every store, with times relative to start
// (µs since the Unix epoch).
func runVectorAt(t *testing.T, start int64, p Params, steps []step) {
	t.Helper()
	if problems := p.Validate(); len(problems) > 0 {
		t.Fatalf("invalid params %+v: %v", p, problems)
	}
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			store := sc.open(t)
			for i, s := range steps {
				out, err := store.Check(context.Background(), Batch{
					Requests: []Request{{Key: store.ns + "k", Params: p}},
					Cost:     s.cost,
					NowUS:    start + s.t,
				})
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := out.Results[0]; got != s.want {
					t.Errorf("step %d (t=%dµs cost=%d): got %+v, want %+v", i, s.t, s.cost, got, s.want)
				}
				if out.Admitted != s.want.Allowed {
					t.Errorf("step %d: admitted %v, want %v", i, out.Admitted, s.want.Allowed)
				}
			}
		})
	}
}

const ms = int64(1000)

func allow(remaining, resetAfter int64) Result {
	return Result{Allowed: true, Remaining: remaining, ResetAfterUS: resetAfter}
}

// delayed is an admitted shaping request held for delay µs.
func delayed(remaining, resetAfter, delay int64) Result {
	return Result{Allowed: true, Remaining: remaining, ResetAfterUS: resetAfter, DelayUS: delay}
}

func deny(remaining, retryAfter, resetAfter int64) Result {
	return Result{Remaining: remaining, RetryAfterUS: retryAfter, ResetAfterUS: resetAfter}
}

// TestGCRAVectors runs the table of docs/algorithms.md with its
// parameters.
func TestGCRAVectors(t *testing.T) {
	runVector(t, Params{Algorithm: GCRA, Limit: 10, PeriodUS: SecondUS, Burst: 5}, designTable)
}

// designTable is the GCRA table of docs/algorithms.md: 10/s, burst 5.
// A token bucket with the same parameters must answer it too.
var designTable = []step{
	{0, 1, allow(4, 100*ms)},
	{0, 1, allow(3, 200*ms)},
	{0, 1, allow(2, 300*ms)},
	{0, 1, allow(1, 400*ms)},
	{0, 1, allow(0, 500*ms)},
	{0, 1, deny(0, 100*ms, 500*ms)},
	{50 * ms, 1, deny(0, 50*ms, 450*ms)},
	{100 * ms, 1, allow(0, 500*ms)},
	{350 * ms, 1, allow(1, 350*ms)},
	{350 * ms, 0, allow(1, 350*ms)},
	{1000 * ms, 1, allow(4, 100*ms)},
	{1000 * ms, 6, deny(4, -1, 100*ms)},
}
