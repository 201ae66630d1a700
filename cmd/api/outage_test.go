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

// TestSentinelFailoverKeepsMoney: with TOLLGATE_REDIS_WAIT_REPLICAS=1, a
// prepaid balance is drawn by two api processes at once while the
// primary is killed (SIGKILL) and the sentinels promote the replica. A
// draw is admitted only once the replica has it, so the promoted replica
// has every admitted draw. Until the old primary is back as its replica
// no draw can be confirmed: draws are refused (the balance's deny mode is
// its failure mode), each taking its unit on the new primary all the
// same, so the load stops for that while; once the replica is back,
// draws are admitted again up to the balance's end. The units the
// clients saw admitted never exceed the balance, and the ledger, drained
// from the promoted replica, agrees with its counter and holds at least
// every admitted unit.
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
	)
	client := &http.Client{Timeout: 5 * time.Second}
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if paused.Load() {
					time.Sleep(10 * time.Millisecond) // polling the test's flag
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
					time.Sleep(5 * time.Millisecond) // the balance is spent; no need to spin
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
	// Without a replica, no draw is confirmed, and none is admitted.
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
}
