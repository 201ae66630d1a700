package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelGroup is a Redis primary, one replica of it and three sentinels
// watching them (quorum 2, a primary down after 1 s), all of one test's
// own: the test may kill the primary and watch the sentinels promote the
// replica.
type SentinelGroup struct {
	Primary, Replica *RedisServer
	Sentinels        []*RedisServer
	// Master is the name the sentinels know the primary by.
	Master string
}

// StartSentinelGroup starts the servers on free loopback ports and waits
// until the replica has synced and every sentinel knows the replica and
// the other two sentinels, so that a failover can start at once. The test
// is skipped when redis-server is not installed.
func StartSentinelGroup(t testing.TB) *SentinelGroup {
	t.Helper()
	g := &SentinelGroup{Master: "tollgate"}
	g.Primary = StartRedisServer(t)
	host, port, _ := net.SplitHostPort(g.Primary.Addr())
	g.Replica = StartRedisServer(t, "--replicaof", host, port)
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: g.Replica.Addr()})
	defer rc.Close()
	WaitFor(t, 30*time.Second, "the replica in sync with the primary", func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	for range 3 {
		s := &RedisServer{t: t, dir: t.TempDir(), port: FreePort(t)}
		s.conf = filepath.Join(s.dir, "sentinel.conf")
		conf := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s 2\n"+
			"sentinel down-after-milliseconds %[1]s 1000\n"+
			"sentinel failover-timeout %[1]s 10000\n"+
			"sentinel parallel-syncs %[1]s 1\n", g.Master, host, port)
		Must(t, os.WriteFile(s.conf, []byte(conf), 0o600))
		s.Start()
		t.Cleanup(s.Stop)
		g.Sentinels = append(g.Sentinels, s)
	}
	for _, s := range g.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
		Eventually(t, time.Now(), 30*time.Second, "sentinel "+s.Addr()+" knows the replica and the other sentinels", func() (bool, string) {
			replicas, err := sc.Replicas(ctx, g.Master).Result()
			if err != nil {
				return false, err.Error()
			}
			sentinels, err := sc.Sentinels(ctx, g.Master).Result()
			if err != nil {
				return false, err.Error()
			}
			return len(replicas) == 1 && len(sentinels) == 2, fmt.Sprintf("%d replicas, %d other sentinels", len(replicas), len(sentinels))
		})
		sc.Close()
	}
	return g
}

// SentinelAddrs returns the sentinels' addresses.
func (g *SentinelGroup) SentinelAddrs() []string {
	addrs := make([]string, len(g.Sentinels))
	for i, s := range g.Sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// PrimaryAddr returns the address the first sentinel that answers names
// as the primary's ("" when none answers).
func (g *SentinelGroup) PrimaryAddr(ctx context.Context) string {
	for _, s := range g.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
		hostPort, err := sc.GetMasterAddrByName(ctx, g.Master).Result()
		sc.Close()
		if err == nil && len(hostPort) == 2 {
			return net.JoinHostPort(hostPort[0], hostPort[1])
		}
	}
	return ""
}

// WaitForFailover waits up to limit until every sentinel names a primary
// other than old and that primary answers as a master, and returns when
// that was seen.
func (g *SentinelGroup) WaitForFailover(t testing.TB, old string, limit time.Duration) time.Time {
	t.Helper()
	ctx := context.Background()
	Eventually(t, time.Now(), limit, "the sentinels promote the replica", func() (bool, string) {
		var named []string
		for _, s := range g.Sentinels {
			sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
			hostPort, err := sc.GetMasterAddrByName(ctx, g.Master).Result()
			sc.Close()
			if err != nil || len(hostPort) != 2 {
				return false, fmt.Sprint("sentinel ", s.Addr(), ": ", err)
			}
			named = append(named, net.JoinHostPort(hostPort[0], hostPort[1]))
		}
		for _, a := range named {
			if a == old || a != named[0] {
				return false, "the sentinels name " + strings.Join(named, ", ")
			}
		}
		c := redis.NewClient(&redis.Options{Addr: named[0], MaxRetries: -1})
		defer c.Close()
		role, err := c.Do(ctx, "ROLE").Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			return false, fmt.Sprint(named[0], " answers ROLE ", role, err)
		}
		return true, ""
	})
	return time.Now()
}
