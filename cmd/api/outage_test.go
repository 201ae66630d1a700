package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// The paths a gateway under test protects: failClosedPath's location
// fails closed when Tollgate cannot be asked, failOpenPath's fails open.
// Both reach the upstream.
const (
	failClosedPath = "/repos"
	failOpenPath   = "/open/repos"
)

// startGateway runs a gateway in front of app, asking the check API at
// api with the service token, and returns its base URL.
type startGateway func(t *testing.T, api, app, token string) string

// outageSample is one request sent through a gateway while the check API
// was stopped and started again.
type outageSample struct {
	start, end time.Time
	path       string
	probe      bool // from a client whose allowance is used up
	status     int
	header     http.Header
	err        error
}

// testGatewayOutage stops the check API behind a gateway under a few
// hundred requests a second and starts it again on the same address: no
// request may get a 500; while it is down the fail-open location lets
// requests through to the upstream marked X-Tollgate-Degraded and the
// fail-closed one answers 503 problem+json with Retry-After; from 1 s
// after it is back every decision is enforced again (a client whose
// allowance is used up gets its 429, a client's own X-Tollgate-Degraded
// never reaches the upstream).
func testGatewayOutage(t *testing.T, start startGateway) {
	f := newFixture(t)
	apiAddr := testenv.FreeAddr(t)
	env := map[string]string{"TOLLGATE_API_ADDR": apiAddr}
	addrs, stop := f.startAPIStoppable(t, env)
	app := newUpstream(t)
	gw := start(t, addrs[0], app.URL, f.token)

	// The probe client's anonymous allowance (60 an hour) is used up.
	probe := clientFrom("127.0.0.9")
	for i := range 60 {
		if r := through(t, probe, "GET", gw+failClosedPath, nil); r.status != http.StatusOK {
			t.Fatalf("probe %d: %d %q", i+1, r.status, r.body)
		}
	}

	var (
		mu      sync.Mutex
		samples []outageSample
		wg      sync.WaitGroup
	)
	pro := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	send := func(c *http.Client, path string, isProbe bool) {
		defer wg.Done()
		s := outageSample{start: time.Now(), path: path, probe: isProbe}
		req, _ := http.NewRequest("GET", gw+path, nil)
		req.Header.Set("X-Tollgate-Degraded", "true") // forged: must never reach the upstream
		if !isProbe {
			req.Header.Set("X-API-Key", f.keys["pro"])
		}
		resp, err := c.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s.status, s.header = resp.StatusCode, resp.Header
		}
		s.end, s.err = time.Now(), err
		mu.Lock()
		samples = append(samples, s)
		mu.Unlock()
	}
	// About 300 requests a second, fail-open and fail-closed in turn, one
	// in ten from the probe client.
	done := make(chan struct{})
	var loadWG sync.WaitGroup
	loadWG.Add(1)
	go func() {
		defer loadWG.Done()
		tick := time.NewTicker(3 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			path := []string{failClosedPath, failOpenPath}[i%2]
			wg.Add(1)
			if i%10 < 2 {
				go send(probe, path, true)
			} else {
				go send(pro, path, false)
			}
		}
	}()

	// Each phase lasts until the load has sent what the checks below
	// count in it: at least 10 requests of each location answered before
	// the stop, 50 sent and answered while the api is down, and 50 sent
	// from 1 s after it is back (the contract's bound) and answered.
	answered := func(from time.Time) (n [2]int) { // by fail-closed, fail-open
		mu.Lock()
		defer mu.Unlock()
		for _, s := range samples {
			if s.start.Before(from) {
				continue
			}
			if s.path == failOpenPath {
				n[1]++
			} else {
				n[0]++
			}
		}
		return n
	}
	phase := func(what string, from time.Time, want int) {
		t.Helper()
		testenv.Eventually(t, time.Now(), 30*time.Second, what, func() (bool, string) {
			n := answered(from)
			return n[0] >= want && n[1] >= want, fmt.Sprintf("fail-closed, fail-open: %v answered", n)
		})
	}
	phase("requests answered before the stop", time.Time{}, 10)
	stopAt := time.Now()
	if err := stop(); err != nil {
		t.Errorf("api run: %v", err)
	}
	downAt := time.Now()
	phase("requests answered while the api is down", downAt, 50)
	addrs, stop = f.startAPIStoppable(t, env)
	upAt := time.Now()
	phase("requests answered from 1 s after the restart", upAt.Add(time.Second), 50)
	close(done)
	loadWG.Wait()
	wg.Wait()

	var down, after, before [2]int // by fail-closed, fail-open
	for _, s := range samples {
		what := fmt.Sprintf("GET %s (probe %v, %v after the stop)", s.path, s.probe, s.start.Sub(stopAt).Round(time.Millisecond))
		if s.err != nil {
			t.Errorf("%s: %v", what, s.err)
			continue
		}
		if s.status == http.StatusInternalServerError {
			t.Errorf("%s: 500 %s", what, s.header.Get("Content-Type"))
			continue
		}
		open := 0
		if s.path == failOpenPath {
			open = 1
		}
		switch {
		case !s.start.Before(downAt) && s.end.Before(upAt):
			down[open]++
			if open == 1 {
				if s.status != http.StatusOK || s.header.Get("X-Seen-Degraded") != "true" {
					t.Errorf("%s while down: %d, upstream saw X-Tollgate-Degraded %q; want 200 marked degraded", what, s.status, s.header.Get("X-Seen-Degraded"))
				}
			} else if s.status != http.StatusServiceUnavailable || s.header.Get("Content-Type") != "application/problem+json" ||
				s.header.Get("Retry-After") != "1" {
				t.Errorf("%s while down: %d %q Retry-After %q; want 503 problem+json with Retry-After 1", what, s.status,
					s.header.Get("Content-Type"), s.header.Get("Retry-After"))
			}
		case s.end.Before(stopAt), !s.start.Before(upAt.Add(time.Second)):
			if s.end.Before(stopAt) {
				before[open]++
			} else {
				after[open]++
			}
			want := http.StatusOK
			if s.probe {
				want = http.StatusTooManyRequests
			}
			if s.status != want || s.header.Get("X-Seen-Degraded") != "" {
				t.Errorf("%s with the api up: %d, upstream saw X-Tollgate-Degraded %q; want %d, not degraded", what, s.status,
					s.header.Get("X-Seen-Degraded"), want)
			}
		default: // stopping or starting: any clean answer
			switch s.status {
			case http.StatusOK, http.StatusTooManyRequests, http.StatusServiceUnavailable:
			default:
				t.Errorf("%s: %d", what, s.status)
			}
		}
	}
	t.Logf("%d requests; fail-closed/fail-open: %v before, %v while down, %v from 1 s after the restart", len(samples), before, down, after)
	for i, name := range []string{"fail-closed", "fail-open"} {
		if before[i] < 10 || down[i] < 50 || after[i] < 50 {
			t.Errorf("%s: %d requests before the stop, %d while down, %d from 1 s after the restart; want at least 10, 50, 50",
				name, before[i], down[i], after[i])
		}
	}
}

// TestNginxOutage: the recipe in deploy/nginx when the check API stops.
func TestNginxOutage(t *testing.T) { testGatewayOutage(t, startNginx) }

// failoverSample is one check sent while a Redis master was killed and
// its replica promoted.
type failoverSample struct {
	at       time.Time
	err      error
	degraded bool
}

// failover is a Redis failover under load: two api processes of rig r,
// four clients checking keys of r's callers (half of them cost-0 peeks,
// which always go to the store, never to the local denials, so a peek
// answered without "degraded" was decided by Redis), and a key first used
// after the failover.
type failover struct {
	r       *rig
	apis    []string
	fresh   string
	client  *http.Client
	mu      sync.Mutex
	samples []failoverSample
	stop    atomic.Bool
	wg      sync.WaitGroup
}

// startFailover starts the api processes with r's settings, issues the
// fresh key (of the tenant of r.callers[0]) and starts the load.
func startFailover(t *testing.T, r *rig) *failover {
	t.Helper()
	ctx := context.Background()
	f := &failover{r: r, apis: addrs([]*api{r.startAPI(t), r.startAPI(t)}), client: &http.Client{Timeout: 5 * time.Second}}
	tenantID := f.tenantOf(t, r.callers[0].key)
	var err error
	f.fresh, _, err = tenants.NewStore(r.db).IssueKey(ctx, tenantID, "after the failover", nil)
	testenv.Must(t, err)
	for i := range 4 {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			c := r.callers[i%2]
			for !f.stop.Load() {
				var d struct {
					Degraded bool `json:"degraded"`
				}
				err := postJSON(f.client, "http://"+f.apis[i%len(f.apis)]+"/v1/check", r.token,
					map[string]any{"key": c.key, "resource": "GET /x", "cost": i % 2}, &d)
				f.mu.Lock()
				f.samples = append(f.samples, failoverSample{at: time.Now(), err: err, degraded: d.Degraded})
				f.mu.Unlock()
			}
		}()
	}
	t.Cleanup(f.end)
	testenv.WaitFor(t, 10*time.Second, "checks under way", func() bool { return f.count() > 200 })
	return f
}

// tenantOf returns the tenant ID of API key secret.
func (f *failover) tenantOf(t *testing.T, secret string) string {
	t.Helper()
	k, err := tenants.NewStore(f.r.db).FindKeyByHash(context.Background(), tenants.HashKey(secret))
	testenv.Must(t, err)
	return k.TenantID
}

func (f *failover) count() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.samples) }

func (f *failover) end() { f.stop.Store(true); f.wg.Wait() }

// check asserts what the load saw once the new master was known at
// promotedAt: no check got anything but a decision, none was degraded
// later than recovery after it, and the fresh key is admitted exactly
// its plan's 30 an hour, of 40, through both processes.
func (f *failover) check(t *testing.T, killedAt, promotedAt time.Time, recovery time.Duration) {
	t.Helper()
	// Load goes on past the recovery bound, so that the checks of after it
	// are seen.
	after := f.count()
	testenv.WaitFor(t, 30*time.Second, "checks after the failover", func() bool {
		return time.Since(promotedAt) > recovery+time.Second && f.count() > after+200
	})
	f.end()
	var degraded, late int
	var lastDegraded time.Time
	for _, s := range f.samples {
		if s.err != nil {
			t.Errorf("a check at +%v after the kill: %v", s.at.Sub(killedAt).Round(time.Millisecond), s.err)
			continue
		}
		if s.degraded {
			degraded++
			lastDegraded = s.at
			if s.at.After(promotedAt.Add(recovery)) {
				late++
			}
		}
	}
	t.Logf("%d checks, %d degraded; the last degraded %v after the new master was known",
		len(f.samples), degraded, lastDegraded.Sub(promotedAt).Round(time.Millisecond))
	if late > 0 {
		t.Errorf("%d checks degraded more than %v after the new master was known", late, recovery)
	}
	var admitted int
	for i := range 40 {
		var d struct {
			Allowed  bool `json:"allowed"`
			Degraded bool `json:"degraded"`
		}
		testenv.Must(t, postJSON(f.client, "http://"+f.apis[i%len(f.apis)]+"/v1/check", f.r.token,
			map[string]any{"key": f.fresh, "resource": "GET /x", "cost": 1}, &d))
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

// TestSentinelFailover: two api processes reach Redis through three
// sentinels (TOLLGATE_REDIS_SENTINEL_ADDRS). The primary is killed
// (SIGKILL) under load. No check gets anything but a decision (no 5xx,
// no transport error); once the sentinels name the promoted replica,
// every check is decided by the store again within 2 s; and the
// promoted replica decides exactly.
func TestSentinelFailover(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, testenv.DatabaseURL(t))
	g := testenv.StartSentinelGroup(t)
	r.env["TOLLGATE_REDIS_ADDR"] = ""
	r.env["TOLLGATE_REDIS_SENTINEL_ADDRS"] = strings.Join(g.SentinelAddrs(), ",")
	r.env["TOLLGATE_REDIS_SENTINEL_MASTER"] = g.Master
	f := startFailover(t, r)

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
	f.check(t, killedAt, promotedAt, 2*time.Second)
	testenv.Must(t, redisstore.PingPrimary(g.Master, g.SentinelAddrs()...)(ctx))
}

// TestClusterMasterFailover: two api processes on a 3-master Cluster with
// a replica each (cluster-node-timeout 2 s). The master that holds the
// slot of a loaded tenant's keys is killed (SIGKILL) under load. No check
// gets anything but a decision; once the Cluster reports the replica as
// master, every check is decided by the store again within a second;
// and the new master decides exactly.
func TestClusterMasterFailover(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, testenv.DatabaseURL(t))
	cluster := testenv.StartReplicatedCluster(t, 3, 1, 2*time.Second)
	r.env["TOLLGATE_REDIS_ADDR"] = ""
	r.env["TOLLGATE_REDIS_CLUSTER_ADDRS"] = strings.Join(cluster.AllAddrs(), ",")
	f := startFailover(t, r)

	// The master of the slot of the loaded tenant's hash tag.
	tag, _ := statekey.Compact(f.tenantOf(t, r.callers[0].key))
	seed := redis.NewClient(&redis.Options{Addr: cluster.Masters[0].Addr()})
	defer seed.Close()
	slot, err := seed.ClusterKeySlot(ctx, "{"+string([]byte{tag})+"}").Result()
	testenv.Must(t, err)
	victim := int(slot) / (16384 / 3)
	if victim > 2 {
		victim = 2
	}
	survivor := redis.NewClient(&redis.Options{Addr: cluster.Masters[(victim+1)%3].Addr()})
	defer survivor.Close()
	replica := cluster.Replicas[victim].Addr()

	killedAt := time.Now()
	cluster.Masters[victim].Kill()
	testenv.Eventually(t, killedAt, 30*time.Second, "the Cluster promotes the replica", func() (bool, string) {
		nodes, err := survivor.ClusterNodes(ctx).Result()
		if err != nil {
			return false, err.Error()
		}
		info, err := survivor.ClusterInfo(ctx).Result()
		if err != nil {
			return false, err.Error()
		}
		for _, line := range strings.Split(nodes, "\n") {
			fields := strings.Fields(line)
			if len(fields) > 2 && strings.HasPrefix(fields[1], replica) && strings.Contains(fields[2], "master") &&
				strings.Contains(info, "cluster_state:ok") {
				return true, ""
			}
		}
		return false, nodes
	})
	promotedAt := time.Now()
	t.Logf("the Cluster reported the new master %v after the kill", promotedAt.Sub(killedAt).Round(time.Millisecond))
	f.check(t, killedAt, promotedAt, time.Second)
}

// TestSentinelFailoverKeepsMoney: with TOLLGATE_REDIS_WAIT_REPLICAS=1, a
// prepaid balance is drawn by two api processes at once while the
// primary is killed (SIGKILL) and the sentinels promote the replica. A
// draw is admitted only once the replica has it, so the promoted replica
// has every admitted draw. Until the old primary is back as its replica
// no draw can be confirmed (one the new primary admits is answered
// admitted and degraded, its unit taken), so the load stops for that
// while; once the replica is back, draws are admitted and confirmed
// again up to the balance's end. The units the
// clients saw admitted never exceed the balance, and the ledger, drained
// from the promoted replica, agrees with its counter and holds at least
// every admitted unit; so does the usage the worker applies from the
// journals.
func TestSentinelFailoverKeepsMoney(t *testing.T) {
	const balance = 300
	r := newRig(t, testenv.DatabaseURL(t))
	g := testenv.StartSentinelGroup(t)
	r.env["TOLLGATE_REDIS_ADDR"] = ""
	r.env["TOLLGATE_REDIS_SENTINEL_ADDRS"] = strings.Join(g.SentinelAddrs(), ",")
	r.env["TOLLGATE_REDIS_SENTINEL_MASTER"] = g.Master
	r.env["TOLLGATE_REDIS_WAIT_REPLICAS"] = "1"
	// The rig's client (the drainer's, the ledger check's) follows the
	// sentinels too.
	r.redis = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: g.Master, SentinelAddrs: g.SentinelAddrs()})
	t.Cleanup(func() { r.redis.Close() })
	tenantID, key := creditTenant(t, r, "prepaid", credits.ModeDeny, 0, balance)
	r.env["TOLLGATE_REDIS_TIMEOUT"] = "1s"
	apis := addrs([]*api{r.startAPI(t), r.startAPI(t)})

	var (
		admitted, exhausted, unavailable atomic.Int64
		stop, paused                     atomic.Bool
		wg                               sync.WaitGroup
		// resumed is closed when the load may go on after its pause.
		resumed = make(chan struct{})
	)
	client := &http.Client{Timeout: 5 * time.Second}
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if paused.Load() {
					<-resumed
					continue
				}
				d, err := checkReason(client, apis[i%len(apis)], r.token, map[string]any{"key": key, "resource": "GET /x", "cost": 1})
				switch {
				case err != nil:
					t.Errorf("a check: %v", err)
					return
				case d.Allowed:
					admitted.Add(1)
				case d.Reason == tollgate.ReasonCreditsExhausted:
					exhausted.Add(1)
				case d.Reason == tollgate.ReasonUnavailable:
					unavailable.Add(1)
				default:
					t.Errorf("denied for %s", d.Reason)
					return
				}
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	testenv.Eventually(t, time.Now(), 30*time.Second, "draws admitted", func() (bool, string) {
		return admitted.Load() >= balance/3, fmt.Sprint(admitted.Load())
	})
	old := g.Primary.Addr()
	killedAt := time.Now()
	g.Primary.Kill()
	promotedAt := g.WaitForFailover(t, old, 30*time.Second)
	atPromotion := admitted.Load()
	t.Logf("%d units admitted before the promotion, %v after the kill", atPromotion, promotedAt.Sub(killedAt).Round(time.Millisecond))
	// Draws were refused as unavailable while the sentinels had no
	// primary; without a replica, none is confirmed from now on.
	testenv.WaitFor(t, 10*time.Second, "draws refused as unavailable", func() bool { return unavailable.Load() > 20 })
	paused.Store(true)
	// The old primary comes back empty; the sentinels make it the new
	// primary's replica, and draws are confirmed again.
	g.Primary.Start()
	oldAsReplica := redis.NewClient(&redis.Options{Addr: old, MaxRetries: -1})
	defer oldAsReplica.Close()
	testenv.WaitFor(t, 60*time.Second, "the old primary a replica of the new one, in sync", func() bool {
		info, err := oldAsReplica.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
	})
	atRecovery := admitted.Load()
	paused.Store(false)
	close(resumed)
	testenv.Eventually(t, time.Now(), 60*time.Second, "the balance spent", func() (bool, string) {
		return exhausted.Load() > 50, fmt.Sprintf("%d admitted, %d exhausted, %d unavailable", admitted.Load(), exhausted.Load(), unavailable.Load())
	})
	stop.Store(true)
	wg.Wait()

	t.Logf("%d units admitted (%d before the promotion, %d before the replica was back), %d refused as unavailable, %d as exhausted",
		admitted.Load(), atPromotion, atRecovery, unavailable.Load(), exhausted.Load())
	if admitted.Load() == atRecovery {
		t.Error("no draw admitted once the replica was back")
	}
	if admitted.Load() > balance {
		t.Errorf("%d units admitted on a balance of %d", admitted.Load(), balance)
	}
	acct := r.ledgerAgrees(t, tenantID)
	if acct.Consumed < admitted.Load() || acct.Consumed > balance {
		t.Errorf("the ledger consumed %d; want at least the %d admitted and at most the balance %d", acct.Consumed, admitted.Load(), balance)
	}
	// No usage lost: the call that admitted a draw journaled its unit, and
	// the replica had both before the answer.
	stopWorker := runWorker(r.worker("w"))
	r.waitDrained(t)
	testenv.Must(t, stopWorker())
	var units int64
	testenv.Must(t, r.db.QueryRow(context.Background(), `SELECT coalesce(sum(allowed_units), 0)::bigint FROM usage_minute
		WHERE tenant_id = $1`, tenantID).Scan(&units))
	t.Logf("usage: %d units", units)
	if units < admitted.Load() || units > acct.Consumed {
		t.Errorf("usage holds %d units; want at least the %d admitted and at most the %d the ledger consumed", units, admitted.Load(), acct.Consumed)
	}
}
