package limiter_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	. "github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/testenv"
)

// checkOnce runs one single-rule check and fails the test on error.
func checkOnce(t testing.TB, store Store, reqs []Request, cost, now int64) Result {
	t.Helper()
	out, err := store.Check(context.Background(), Batch{Requests: reqs, Cost: cost, NowUS: now})
	if err != nil {
		t.Fatal(err)
	}
	return out.Results[0]
}

// scriptCached reports whether the check script is cached on every
// master.
func scriptCached(t testing.TB, rdb redis.UniversalClient) bool {
	t.Helper()
	ctx := context.Background()
	var missing atomic.Bool // ForEachMaster calls each concurrently
	each := func(ctx context.Context, c *redis.Client) error {
		exists, err := c.ScriptExists(ctx, redisstore.ScriptHash()).Result()
		if err != nil {
			return err
		}
		if !exists[0] {
			missing.Store(true)
		}
		return nil
	}
	var err error
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		err = cluster.ForEachMaster(ctx, each)
	} else {
		err = each(ctx, rdb.(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
	return !missing.Load()
}

// ownRedisStores is redisStores on a redis-server and a 3-master Redis
// Cluster of the test's own, for tests that SCRIPT FLUSH: on the shared
// servers a flush would empty the script cache under the tests running
// beside them (in other packages too), and a transaction of EVALSHA
// there would fail with NOSCRIPT. Each store opened has a key prefix of
// its own, so the store cases of one test do not see each other's keys.
func ownRedisStores(t *testing.T) []storeCase {
	t.Helper()
	single := testenv.StartRedisServer(t).Addr()
	cluster := testenv.StartRedisCluster(t, 3)
	redisCase := redisServerCase("redis", "{r}:", func(t testing.TB) (redis.UniversalClient, string) {
		c := redis.NewClient(&redis.Options{Addr: single})
		t.Cleanup(func() { c.Close() })
		return c, "t" + testenv.RandomID(6) + ":"
	})
	clusterCase := redisServerCase("cluster", "{c}:", func(t testing.TB) (redis.UniversalClient, string) {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster})
		t.Cleanup(func() { c.Close() })
		return c, "t" + testenv.RandomID(6) + ":"
	})
	return []storeCase{redisCase, clusterCase, batchingStoreCase(redisCase), batchingStoreCase(clusterCase)}
}

// TestLoadScriptLoadsEveryMaster: LoadScript caches the script on every
// server, so that no node pays for EVAL on its first check.
func TestLoadScriptLoadsEveryMaster(t *testing.T) {
	for _, sc := range ownRedisStores(t) {
		t.Run(sc.name, func(t *testing.T) {
			store := sc.open(t)
			if err := store.rdb.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			if err := redisstore.LoadScript(context.Background(), store.rdb); err != nil {
				t.Fatal(err)
			}
			if !scriptCached(t, store.rdb) {
				t.Error("after LoadScript: script missing on a master")
			}
		})
	}
}

// TestCheckSurvivesScriptFlush: after SCRIPT FLUSH on every master the
// next check still works (EVALSHA fails with NOSCRIPT and falls back to
// EVAL) and sees the state written before.
func TestCheckSurvivesScriptFlush(t *testing.T) {
	p := Params{Algorithm: GCRA, Limit: 10, PeriodUS: SecondUS, Burst: 3}
	for _, sc := range ownRedisStores(t) {
		t.Run(sc.name, func(t *testing.T) {
			store := sc.open(t)
			reqs := single(store.ns+"k", p)
			if got, want := checkOnce(t, store, reqs, 1, epoch), allow(2, 100*ms); got != want {
				t.Fatalf("before flush: got %+v, want %+v", got, want)
			}
			if err := store.rdb.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			if scriptCached(t, store.rdb) {
				t.Fatal("script still cached after SCRIPT FLUSH")
			}
			if got, want := checkOnce(t, store, reqs, 1, epoch), allow(1, 200*ms); got != want {
				t.Errorf("after flush: got %+v, want %+v", got, want)
			}
		})
	}
}

// TestCheckSurvivesRedisRestart starts a throwaway redis-server with an
// append-only file, checks, stops it by PID, starts it again on the same
// port and data: the script cache is empty, the client reconnects, the
// check works and the state persisted by Redis is still enforced. Time
// comes from the server's TIME, as in production.
func TestCheckSurvivesRedisRestart(t *testing.T) {
	srv := testenv.StartRedisServer(t, "--appendonly", "yes", "--appendfsync", "always")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	store := redisstore.New(c)
	if err := redisstore.LoadScript(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	// One unit per hour, burst 3: nothing refills during the test.
	reqs := single("{restart}:k", Params{Algorithm: GCRA, Limit: 1, PeriodUS: HourUS, Burst: 3})
	for want := int64(2); want >= 1; want-- {
		if got := checkOnce(t, store, reqs, 1, 0); !got.Allowed || got.Remaining != want {
			t.Fatalf("before restart: got %+v, want allowed with %d remaining", got, want)
		}
	}

	srv.Restart()

	if scriptCached(t, c) {
		t.Fatal("script cached right after a restart")
	}
	if got := checkOnce(t, store, reqs, 1, 0); !got.Allowed || got.Remaining != 0 {
		t.Fatalf("after restart: got %+v, want allowed with 0 remaining", got)
	}
	if got := checkOnce(t, store, reqs, 1, 0); got.Allowed {
		t.Fatalf("after restart, allowance spent: got %+v, want denied", got)
	}
}
