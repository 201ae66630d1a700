package limiter_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	. "github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
)

// redisTime returns the clock (µs) of the Redis server that holds key.
func redisTime(t testing.TB, rdb redis.UniversalClient, key string) int64 {
	t.Helper()
	ctx := context.Background()
	var node redis.Cmdable = rdb
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		master, err := cluster.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		node = master
	}
	now, err := node.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMicro()
}

// TestTTLNeverExpiresStateEarly runs every rule on Redis in real time with
// no extra TTL, the time taken either from Redis (the script's TIME, as in
// production) or injected as a TIME read just before. After every check
// the rule's state is not empty until now + reset_after, so its key must
// live that long: Redis keeps a key while its millisecond clock is at or
// before PEXPIRETIME, so (PEXPIRETIME + 1 ms) must not come before
// now + reset_after. (PTTL alone cannot tell: it is rounded to the
// millisecond and read later than now.) A never-refilling bucket must not
// expire at all. Keys must not linger either: they expire within a second
// of their state becoming empty. A key found gone is only checked against
// the clock: gone before its state is empty fails.
func TestTTLNeverExpiresStateEarly(t *testing.T) {
	for _, sc := range redisStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			store := sc.open(t)
			store.Store.(*redisstore.Store).ExtraTTL = 0
			for _, rc := range ruleConfigs {
				for _, clock := range []string{"script", "injected"} {
					key := store.ns + rc.name + "/" + clock
					r := seeded(rc.name+"/ttl", 0)
					for i := range 40 {
						cost := int64(1)
						switch r.IntN(5) {
						case 0:
							cost = 0
						case 1:
							cost = 1 + r.Int64N(capacity(rc.p))
						}
						var now int64
						if clock == "injected" {
							now = redisTime(t, store.rdb, key)
						}
						out, err := store.Check(context.Background(), Batch{Requests: single(key, rc.p), Cost: cost, NowUS: now})
						if err != nil {
							t.Fatal(err)
						}
						reset := out.Results[0].ResetAfterUS
						raw := rawKeys(t, store.rdb, []string{key})[0]
						emptyAt := out.NowUS + reset
						if reset > 0 && raw.expireAt == -2 {
							// The key is gone: fine once its state is empty
							// (a loaded machine can take longer than a short
							// window between the check and the read), an
							// early expiry before.
							if at := redisTime(t, store.rdb, key); at < emptyAt {
								t.Fatalf("%s %s, check %d: key gone at %d, %dµs before its state is empty", rc.name, clock, i, at, emptyAt-at)
							}
							continue
						}
						switch {
						case reset == -1 && raw.expireAt != -1:
							t.Fatalf("%s %s, check %d: never refills, but key expiry is %d", rc.name, clock, i, raw.expireAt)
						case reset > 0 && raw.expireAt < 0:
							t.Fatalf("%s %s, check %d: state empty in %dµs, but key expiry is %d", rc.name, clock, i, reset, raw.expireAt)
						case reset > 0 && (raw.expireAt+1)*1000 < emptyAt:
							t.Fatalf("%s %s, check %d: key expires at %d ms, %dµs before its state is empty (now %d, reset_after %d)",
								rc.name, clock, i, raw.expireAt, emptyAt-(raw.expireAt+1)*1000, out.NowUS, reset)
						case reset > 0 && raw.expireAt*1000 > emptyAt+SecondUS:
							t.Fatalf("%s %s, check %d: key expires at %d ms, %dµs after its state is empty", rc.name, clock, i, raw.expireAt, raw.expireAt*1000-emptyAt)
						}
					}
				}
			}
		})
	}
}
