package testenv

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// StartRedisCluster starts a Redis Cluster of the test's own: masters
// redis-servers (see StartRedisServer; no replicas), the slots split
// evenly between them, and waits until every node says the cluster is ok
// and knows every master. It returns the nodes' addresses ("127.0.0.1:
// port"), which stop when the test ends. A test that empties a server
// (SCRIPT FLUSH, FLUSHALL) uses one of these, never the shared cluster:
// the tests beside it, in other packages too, rely on that one's scripts
// and keys. The test is skipped when redis-server is not installed; the
// cluster bus port is set with --cluster-port, which needs Redis 7.
func StartRedisCluster(t testing.TB, masters int) []string {
	t.Helper()
	return StartReplicatedCluster(t, masters, 0, 5*time.Second).Addrs()
}

// OwnCluster is a Redis Cluster of one test's own (StartReplicatedCluster).
type OwnCluster struct {
	// Masters own the slots, split evenly; Replicas[i] replicates
	// Masters[i % len(Masters)].
	Masters, Replicas []*RedisServer
}

// Addrs returns the masters' addresses.
func (c *OwnCluster) Addrs() []string { return addrsOf(c.Masters) }

// AllAddrs returns every node's address, masters first: seed nodes a
// client can still reach when a master is gone.
func (c *OwnCluster) AllAddrs() []string { return append(c.Addrs(), addrsOf(c.Replicas)...) }

func addrsOf(nodes []*RedisServer) []string {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// StartReplicatedCluster starts a Redis Cluster of the test's own, as
// StartRedisCluster does, with replicas replicas of each master, and
// cluster-node-timeout nodeTimeout (after which a master that does not
// answer is failed over to its replica). It waits until every node says
// the cluster is ok and knows every node, and every master has its
// replicas connected.
func StartReplicatedCluster(t testing.TB, masters, replicas int, nodeTimeout time.Duration) *OwnCluster {
	t.Helper()
	c := &OwnCluster{}
	all := make([]*RedisServer, masters*(1+replicas))
	clients := make([]*redis.Client, len(all))
	firstBus := ""
	for i := range all {
		bus := strconv.Itoa(FreePort(t))
		if i == 0 {
			firstBus = bus
		}
		all[i] = StartRedisServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", bus, "--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10))
		clients[i] = redis.NewClient(&redis.Options{Addr: all[i].Addr()})
		defer clients[i].Close()
	}
	c.Masters, c.Replicas = all[:masters], all[masters:]
	ctx := context.Background()
	per := clusterSlots / masters
	for i, cl := range clients {
		if i < masters {
			first, last := i*per, (i+1)*per-1
			if i == masters-1 {
				last = clusterSlots - 1
			}
			if err := cl.ClusterAddSlotsRange(ctx, first, last).Err(); err != nil {
				t.Fatalf("testenv: cluster addslotsrange on %s: %v", all[i].Addr(), err)
			}
		}
		if i > 0 {
			// The bus port too: MEET assumes the port + 10000 otherwise.
			if err := cl.Do(ctx, "cluster", "meet", "127.0.0.1", all[0].port, firstBus).Err(); err != nil {
				t.Fatalf("testenv: cluster meet from %s: %v", all[i].Addr(), err)
			}
		}
	}
	formed := func(what string, extra func(i int, info string) string) {
		t.Helper()
		Eventually(t, time.Now(), 30*time.Second, what, func() (bool, string) {
			for i, cl := range clients {
				info, err := cl.ClusterInfo(ctx).Result()
				if err != nil {
					return false, fmt.Sprintf("%s: %v", all[i].Addr(), err)
				}
				for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:" + strconv.Itoa(len(all))} {
					if !strings.Contains(info, want+"\r\n") {
						return false, fmt.Sprintf("%s: no %s in\n%s", all[i].Addr(), want, info)
					}
				}
				if extra != nil {
					if state := extra(i, info); state != "" {
						return false, state
					}
				}
			}
			return true, ""
		})
	}
	formed("a Redis Cluster of the test's own to form", nil)
	if replicas == 0 {
		return c
	}
	for i, cl := range clients[masters:] {
		id, err := clients[i%masters].Do(ctx, "cluster", "myid").Text()
		Must(t, err)
		if err := cl.Do(ctx, "cluster", "replicate", id).Err(); err != nil {
			t.Fatalf("testenv: cluster replicate on %s: %v", c.Replicas[i].Addr(), err)
		}
	}
	formed("the replicas of a Redis Cluster of the test's own in sync", func(i int, _ string) string {
		if i >= masters {
			return ""
		}
		repl, err := clients[i].Info(ctx, "replication").Result()
		if err != nil || strings.Count(repl, "state=online") != replicas {
			return fmt.Sprintf("master %s: %v %s", all[i].Addr(), err, repl)
		}
		return ""
	})
	return c
}
