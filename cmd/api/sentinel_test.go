package main

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// sentinelSample is one check sent while the primary was killed and the
// sentinels promoted its replica.
type sentinelSample struct {
	at       time.Time
	err      error
	degraded bool
}

// TestSentinelFailover: two api processes reach Redis through three
// sentinels (TOLLGATE_REDIS_SENTINEL_ADDRS). The primary is killed
// (SIGKILL) under load. No check gets anything but a decision (no 5xx,
// no transport error); once the sentinels name the promoted replica,
// every check is decided by the store again within sentinelRecovery;
// and the promoted replica decides exactly: a tenant's fresh key is
// admitted exactly its plan's 30 an hour.
func TestSentinelFailover(t *testing.T) {
	const sentinelRecovery = 2 * time.Second
	ctx := context.Background()
	r := newRig(t, testenv.DatabaseURL(t))
	g := testenv.StartSentinelGroup(t)
	r.env["TOLLGATE_REDIS_ADDR"] = ""
	r.env["TOLLGATE_REDIS_SENTINEL_ADDRS"] = strings.Join(g.SentinelAddrs(), ",")
	r.env["TOLLGATE_REDIS_SENTINEL_MASTER"] = g.Master
	apis := addrs([]*api{r.startAPI(t), r.startAPI(t)})
	// A key first used after the failover: the promoted replica must
	// decide it exactly.
	ts := tenants.NewStore(r.db)
	all, err := ts.List(ctx)
	testenv.Must(t, err)
	fresh, _, err := ts.IssueKey(ctx, all[0].ID, "after the failover", nil)
	testenv.Must(t, err)

	// Cost-0 peeks always go to the store (never to the local denials),
	// so a peek answered without "degraded" was decided by Redis.
	var (
		mu      sync.Mutex
		samples []sentinelSample
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	client := &http.Client{Timeout: 5 * time.Second}
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := r.callers[i%2]
			for !stop.Load() {
				var d struct {
					Allowed  bool `json:"allowed"`
					Degraded bool `json:"degraded"`
				}
				err := postJSON(client, "http://"+apis[i%len(apis)]+"/v1/check", r.token,
					map[string]any{"key": c.key, "resource": "GET /x", "cost": i % 2}, &d)
				mu.Lock()
				samples = append(samples, sentinelSample{at: time.Now(), err: err, degraded: d.Degraded})
				mu.Unlock()
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	counted := func() int { mu.Lock(); defer mu.Unlock(); return len(samples) }
	testenv.WaitFor(t, 10*time.Second, "checks under way", func() bool { return counted() > 200 })

	// The breaker's ping follows the sentinels: it finds the primary, and
	// a name they do not know is an error.
	testenv.Must(t, redisstore.PingPrimary(g.Master, g.SentinelAddrs()...)(ctx))
	if err := redisstore.PingPrimary("unknown", g.SentinelAddrs()...)(ctx); err == nil {
		t.Error("ping of a primary the sentinels do not know: no error")
	}

	old := g.Primary.Addr()
	killedAt := time.Now()
	g.Primary.Kill()
	promotedAt := g.WaitForFailover(t, old, 30*time.Second)
	t.Logf("the sentinels named the new primary %v after the kill", promotedAt.Sub(killedAt).Round(time.Millisecond))
	// Load goes on past the recovery bound, so that the checks of after it
	// are seen.
	after := counted()
	testenv.WaitFor(t, 30*time.Second, "checks after the failover", func() bool {
		return time.Since(promotedAt) > sentinelRecovery+time.Second && counted() > after+200
	})
	stop.Store(true)
	wg.Wait()
	testenv.Must(t, redisstore.PingPrimary(g.Master, g.SentinelAddrs()...)(ctx))

	var degraded, late int
	var lastDegraded time.Time
	for _, s := range samples {
		if s.err != nil {
			t.Errorf("a check at +%v after the kill: %v", s.at.Sub(killedAt).Round(time.Millisecond), s.err)
			continue
		}
		if s.degraded {
			degraded++
			lastDegraded = s.at
			if s.at.After(promotedAt.Add(sentinelRecovery)) {
				late++
			}
		}
	}
	t.Logf("%d checks, %d degraded; the last degraded %v after the sentinels named the new primary",
		len(samples), degraded, lastDegraded.Sub(promotedAt).Round(time.Millisecond))
	if late > 0 {
		t.Errorf("%d checks degraded more than %v after the sentinels named the new primary", late, sentinelRecovery)
	}

	// The promoted replica decides exactly: the fresh key is admitted 30
	// of 40 (its plan's hourly allowance), through both processes.
	var admitted int
	for i := range 40 {
		var d struct {
			Allowed  bool `json:"allowed"`
			Degraded bool `json:"degraded"`
		}
		testenv.Must(t, postJSON(client, "http://"+apis[i%len(apis)]+"/v1/check", r.token,
			map[string]any{"key": fresh, "resource": "GET /x", "cost": 1}, &d))
		if d.Degraded {
			t.Fatalf("check %d after the failover: degraded", i+1)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 30 {
		t.Errorf("after the failover the fresh key was admitted %d of 40, want 30", admitted)
	}
}
