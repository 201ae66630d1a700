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
	nodes := make([]*RedisServer, masters)
	addrs := make([]string, masters)
	clients := make([]*redis.Client, masters)
	firstBus := ""
	for i := range nodes {
		bus := strconv.Itoa(FreePort(t))
		if i == 0 {
			firstBus = bus
		}
		nodes[i] = StartRedisServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", bus, "--cluster-node-timeout", "5000")
		addrs[i] = nodes[i].Addr()
		clients[i] = redis.NewClient(&redis.Options{Addr: addrs[i]})
		defer clients[i].Close()
	}
	ctx := context.Background()
	per := clusterSlots / masters
	for i, c := range clients {
		first, last := i*per, (i+1)*per-1
		if i == masters-1 {
			last = clusterSlots - 1
		}
		if err := c.ClusterAddSlotsRange(ctx, first, last).Err(); err != nil {
			t.Fatalf("testenv: cluster addslotsrange on %s: %v", addrs[i], err)
		}
		if i > 0 {
			// The bus port too: MEET assumes the port + 10000 otherwise.
			if err := c.Do(ctx, "cluster", "meet", "127.0.0.1", nodes[0].port, firstBus).Err(); err != nil {
				t.Fatalf("testenv: cluster meet from %s: %v", addrs[i], err)
			}
		}
	}
	Eventually(t, time.Now(), 30*time.Second, "a Redis Cluster of the test's own to form", func() (bool, string) {
		for i, c := range clients {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return false, fmt.Sprintf("%s: %v", addrs[i], err)
			}
			for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:" + strconv.Itoa(masters)} {
				if !strings.Contains(info, want+"\r\n") {
					return false, fmt.Sprintf("%s: no %s in\n%s", addrs[i], want, info)
				}
			}
		}
		return true, ""
	})
	return addrs
}
