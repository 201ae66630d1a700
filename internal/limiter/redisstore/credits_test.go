package redisstore

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/testenv"
)

// TestCreditsLogOriginIsReadWithTheLog: a log's origin is made once, by
// the first read that offers one, and read in the same call as the log,
// on one Redis and on a Cluster (the origin shares the log's slot); a
// log is trimmed only while it carries the origin its caller read, so a
// log made since (Redis back empty) keeps every entry.
func TestCreditsLogOriginIsReadWithTheLog(t *testing.T) {
	one, onePrefix := testenv.Redis(t)
	cluster, clusterPrefix := testenv.RedisCluster(t)
	for _, c := range []struct {
		name   string
		client redis.Cmdable
		prefix string
	}{{"one", one, onePrefix}, {"cluster", cluster, clusterPrefix}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			s := New(c.client.(redis.Scripter))
			key, log := c.prefix+"{b}c", c.prefix+"{b}l"
			if _, origin, err := s.ReadCreditsOrigin(ctx, key, log, "", 10, ""); err != nil || origin != "" {
				t.Fatalf("origin of a new log, none offered: %q, %v; want none", origin, err)
			}
			if _, origin, err := s.ReadCreditsOrigin(ctx, key, log, "", 10, "first"); err != nil || origin != "first" {
				t.Fatalf("origin offered first: %q, %v", origin, err)
			}
			for _, id := range []string{"1-1", "2-1"} {
				testenv.Must(t, c.client.XAdd(ctx, &redis.XAddArgs{Stream: log, ID: id, Values: []any{"u", "1"}}).Err())
			}
			read, origin, err := s.ReadCreditsOrigin(ctx, key, log, "1-1", 10, "second")
			if err != nil || origin != "first" || len(read.Entries) != 1 || read.Entries[0].ID != "2-1" {
				t.Fatalf("read after 1-1: %+v, %q, %v; want entry 2-1 of origin first", read, origin, err)
			}
			testenv.Must(t, s.TrimCreditsOrigin(ctx, log, "2-1", "gone"))
			if n := c.client.XLen(ctx, log).Val(); n != 2 {
				t.Errorf("trimmed under another origin: %d entries left, want 2", n)
			}
			testenv.Must(t, s.TrimCreditsOrigin(ctx, log, "1-1", "first"))
			if n := c.client.XLen(ctx, log).Val(); n != 1 {
				t.Errorf("trimmed through 1-1 under its origin: %d entries left, want 1", n)
			}
			// Redis back empty: the new log's entries stay until read
			// under the new origin.
			testenv.Must(t, c.client.Del(ctx, CreditsOriginKey(log)).Err())
			testenv.Must(t, s.TrimCreditsOrigin(ctx, log, "2-1", "first"))
			if n := c.client.XLen(ctx, log).Val(); n != 1 {
				t.Errorf("trimmed with the origin gone: %d entries left, want 1", n)
			}
		})
	}
}
