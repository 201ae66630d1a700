// Package regions runs the scenarios of docs/regions.md on the test bed:
// three regions on loopback (each its own redis-server, NATS server with
// JetStream, check API and admin worker with its exchanger), one
// Postgres, 50 ms one-way between regions through toxiproxy. It prints
// the figures docs/benchmarks.md records ("Regions").
package regions

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
	"github.com/tollgate/tollgate/internal/testenv/testkeys"
)

func TestMain(m *testing.M) { admintest.Main(m) }

var names = []string{"us", "eu", "ap"}

const (
	delay    = 50 * time.Millisecond  // one way between regions
	interval = 100 * time.Millisecond // E, the exchange interval
	minute   = 1000                   // the hammered rules' limit a minute
	daily    = 600                    // the partitioned rule's limit a day
)

// bed is the running deployment.
type bed struct {
	t     *testing.T
	net   *testenv.Regions
	token string
	key   string
	// planID and tenant name the states: count reads them.
	planID int64
	tenant string
	apis   map[string]string // region → check API address
	single string            // a check API of a deployment of one region
	stats  map[string]string // region → worker metrics address
	// workers are the regions' admin workers (exchanger, usage, credits
	// drainer).
	workers map[string]*testenv.Process
	// months are the tenants whose month is limited (quota.go), by
	// the name of the limit.
	months map[string]monthTenant
	// admin is the admin binary; env the settings of each region's
	// processes.
	admin  string
	env    map[string][]string
	client *http.Client
	db     *pgxpool.Pool
	// allowed and denied count the answers of every check sent to the
	// regions.
	allowed, denied atomic.Int64
	// degraded counts the checks admitted by a rule's failure mode (the
	// region's Redis not answering in time on a loaded machine): no
	// limiter decided them, and one whose store call ran after all is
	// counted twice in the usage (docs/reliability.md, "a store answer
	// lost").
	degraded atomic.Int64
}

func start(t *testing.T) *bed {
	t.Helper()
	net := testenv.StartRegions(t, delay, names...) // first: it skips in -short mode
	dbURL := testenv.DatabaseURL(t)
	ctx := context.Background()
	db, err := postgres.Open(ctx, dbURL)
	testenv.Must(t, err)
	t.Cleanup(db.Close)
	api, admin := admintest.Binary(t, "cmd/api"), admintest.Binary(t, "cmd/admin")
	b := &bed{t: t, db: db, net: net, apis: map[string]string{}, stats: map[string]string{},
		workers: map[string]*testenv.Process{}, admin: admin, env: map[string][]string{},
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}}
	b.seed(ctx, db)
	// Every api knows every region's check API, where it forwards a
	// settlement of a hold another region opened.
	addrs, urls := map[string]string{}, []string{}
	for _, name := range names {
		addrs[name] = testenv.FreeAddr(t)
		urls = append(urls, name+"=http://"+addrs[name])
	}
	for _, r := range b.net.Regions {
		env := []string{"TOLLGATE_DATABASE_URL=" + dbURL, "TOLLGATE_REDIS_ADDR=" + r.Redis.Addr(), "TOLLGATE_SECRET_KEY=" + testenv.SecretKey,
			"TOLLGATE_REGION=" + r.Name, "TOLLGATE_REGIONS=" + strings.Join(names, ","), "TOLLGATE_LOG_LEVEL=warn"}
		b.env[r.Name] = append(env, "TOLLGATE_REGION_NATS_URL="+r.NATSURL, "TOLLGATE_REGION_EXCHANGE_INTERVAL="+interval.String())
		b.workers[r.Name], b.stats[r.Name] = b.startWorker(t, r.Name, "worker-"+r.Name)
		b.apis[r.Name] = b.startAPI(api, append(env, "TOLLGATE_REGION_CHECK_URLS="+strings.Join(urls, ",")), addrs[r.Name])
		if r.Name == "us" {
			// The same region's Redis, without regions: the baseline of
			// a check's latency. It counts its usage as the region's api
			// does (journal and stream), in a stream of its own that no
			// worker reads, so that the usage scenario counts the
			// regions' checks alone.
			b.single = b.startAPI(api, []string{"TOLLGATE_DATABASE_URL=" + dbURL, "TOLLGATE_REDIS_ADDR=" + r.Redis.Addr(),
				"TOLLGATE_SECRET_KEY=" + testenv.SecretKey, "TOLLGATE_KEY_PREFIX=single:", "TOLLGATE_LOG_LEVEL=warn",
				"TOLLGATE_USAGE_STREAM=single:usage"}, testenv.FreeAddr(t))
		}
	}
	for _, name := range names {
		testenv.WaitFor(t, 60*time.Second, "the exchange of "+name+" with every region", func() bool {
			up, err := scrape(b.stats[name], "tollgate_region_exchange_up")
			e, _ := scrape(b.stats[name], "tollgate_region_exchange_interval_seconds")
			// E as measured: at least the setting.
			return err == nil && up == float64(len(names)-1) && e >= interval.Seconds()
		})
	}
	return b
}

// startWorker starts an admin worker of region name, consumer of the
// usage stream, with its metrics at the address it returns.
func (b *bed) startWorker(t *testing.T, name, consumer string, env ...string) (*testenv.Process, string) {
	stats := testenv.FreeAddr(t)
	worker := exec.Command(b.admin, "worker", "--metrics-addr", stats)
	worker.Env = append(append(slices.Clone(b.env[name]), "TOLLGATE_USAGE_CONSUMER="+consumer), env...)
	return testenv.StartProcess(b.t, "worker "+consumer, worker, syscall.SIGTERM, 10*time.Second, nil), stats
}

// startAPI starts the api at addr with env and waits until it is ready.
func (b *bed) startAPI(bin string, env []string, addr string) string {
	cmd := exec.Command(bin)
	cmd.Env = append(env, "TOLLGATE_API_ADDR="+addr, "TOLLGATE_SNAPSHOT_RELOAD=1h")
	testenv.StartProcess(b.t, "api "+addr, cmd, syscall.SIGTERM, 10*time.Second, nil)
	testenv.WaitFor(b.t, 60*time.Second, "api "+addr+" ready", func() bool {
		res, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			res.Body.Close()
		}
		return err == nil && res.StatusCode == http.StatusOK
	})
	return addr
}

// seed stores the plan: per resource one rule, each scoped per tenant.
func (b *bed) seed(ctx context.Context, db *pgxpool.Pool) {
	rule := func(name, resource string, alg limiter.Algorithm, limit, period int64, scope region.Scope) plans.Rule {
		return plans.Rule{Name: name, Resource: resource, Algorithm: alg, Limit: limit, PeriodUS: period,
			Scope: plans.ScopeTenant, RegionScope: scope}
	}
	ops := plans.NewOps(db).InRegions(region.Config{Name: names[0], Names: names})
	p, err := ops.Create(ctx, audit.CLI, plans.PlanInput{Name: "global", Rules: []plans.Rule{
		rule("shared", "GET /shared", limiter.FixedWindow, minute, limiter.MinuteUS, region.GlobalShared),
		rule("split", "GET /split", limiter.FixedWindow, minute, limiter.MinuteUS, region.GlobalSplit),
		rule("daily", "GET /daily", limiter.FixedWindow, daily, limiter.DayUS, region.GlobalShared),
		rule("reset", "GET /reset", limiter.FixedWindow, daily, limiter.DayUS, region.GlobalShared),
		rule("latency", "GET /latency", limiter.GCRA, 1_000_000, limiter.SecondUS, region.GlobalShared),
		rule("moving", "GET /moving", limiter.FixedWindow, minute, limiter.HourUS, region.GlobalSplit),
		rule("failover", "GET /failover", limiter.FixedWindow, 1_000_000, limiter.DayUS, region.GlobalShared),
		rule("held", "GET /held", limiter.FixedWindow, 1_000_000, limiter.DayUS, region.GlobalShared),
	}})
	testenv.Must(b.t, err)
	tn := fixture.Tenant(b.t, db, "acme", p.ID)
	b.planID, b.tenant = p.ID, tn.ID
	b.key, _ = fixture.Key(b.t, db, tn.ID, "k")
	b.token, _, err = auth.NewStore(db).WithSecretKeys(testkeys.SecretKeys(b.t)).IssueServiceToken(ctx, "regions", 0)
	testenv.Must(b.t, err)
	b.seedMonths(ctx, db)
}

// answer is what the test reads of a check's answer.
type answer struct {
	Allowed   bool  `json:"allowed"`
	Degraded  bool  `json:"degraded"`
	Remaining int64 `json:"remaining"`
	Limit     int64 `json:"limit"`
}

// check sends one check to the API at addr.
func (b *bed) check(addr, resource string, cost int) (answer, time.Duration, error) {
	return b.checkKey(addr, b.key, resource, cost)
}

// checkKey sends one check of key to the API at addr.
func (b *bed) checkKey(addr, key, resource string, cost int) (answer, time.Duration, error) {
	var a answer
	status, took, err := b.post(addr, "/v1/check", map[string]any{"key": key, "resource": resource, "cost": cost}, &a)
	if err == nil && status != http.StatusOK {
		return answer{}, took, fmt.Errorf("check %s: %d", resource, status)
	}
	return a, took, err
}

// post sends body as JSON to path of the API at addr with the service
// token and decodes the answer into out; it returns the answer's status
// and how long the call took.
func (b *bed) post(addr, path string, body, out any) (int, time.Duration, error) {
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+b.token)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	res, err := b.client.Do(req)
	took := time.Since(start)
	if err != nil {
		return 0, took, err
	}
	defer res.Body.Close()
	return res.StatusCode, took, json.NewDecoder(res.Body).Decode(out)
}

// count reads the count of region name's state of the fixed window
// rule (its current window), from the region's Redis.
func (b *bed) count(name, rule string) int64 {
	tag, short := statekey.Compact(b.tenant)
	key := statekey.AppendKey(nil, "tg:", tag, statekey.RuleID(b.planID, rule, limiter.FixedWindow, 0), short[:], nil)
	rdb := redis.NewClient(&redis.Options{Addr: b.net.Region(name).Redis.Addr()})
	defer rdb.Close()
	n, err := rdb.HGet(context.Background(), string(key), "count").Int64()
	if err == redis.Nil {
		return 0
	}
	testenv.Must(b.t, err)
	return n
}

// load offers rate checks a second of resource to addr for d, and
// returns when each admitted one was answered and every latency.
func (b *bed) load(addr, resource string, rate int, d time.Duration) (admitted []time.Time, latencies []time.Duration) {
	return b.loadKey(addr, b.key, resource, rate, d)
}

// loadKey is load with key's checks. admitted holds the checks the
// limiter admitted, not those a failure mode admitted (b.degraded).
func (b *bed) loadKey(addr, key, resource string, rate int, d time.Duration) (admitted []time.Time, latencies []time.Duration) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	every := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; time.Duration(i)*every < d; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * every))) // load injection: checks offered at rate
		wg.Go(func() {
			a, took, err := b.checkKey(addr, key, resource, 1)
			if err != nil {
				b.t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			latencies = append(latencies, took)
			if a.Allowed && a.Degraded {
				b.degraded.Add(1)
			} else if a.Allowed {
				admitted = append(admitted, time.Now())
			}
			switch {
			case addr == b.single:
			case a.Allowed:
				b.allowed.Add(1)
			default:
				b.denied.Add(1)
			}
		})
	}
	wg.Wait()
	return admitted, latencies
}

// sharedBound is the bound of docs/regions.md for a global_shared fixed
// window of limit, for the region i that admitted last: L + Σ_{j≠i}
// min(L, λ_j·(E+d)), with λ_j·(E+d) the most region j admitted (times by
// region) within w = E + d, d the largest lag measured.
func sharedBound(limit int64, admitted map[string][]time.Time, w time.Duration) int64 {
	var bound int64
	for _, i := range names {
		b := limit
		for _, j := range names {
			if j != i {
				b += min(limit, mostWithin(admitted[j], w))
			}
		}
		bound = max(bound, b)
	}
	return bound
}

// mostWithin returns the most admissions of times within any span of w.
func mostWithin(times []time.Time, w time.Duration) int64 {
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	most, from := 0, 0
	for i, t := range times {
		for t.Sub(times[from]) > w {
			from++
		}
		most = max(most, i-from+1)
	}
	return int64(most)
}

// staleness is how late a region may learn of another's admission: E,
// the time between two claims of the sender's outboxes (the interval and
// what the machine adds to it), and d, from a claim to its debits.
type staleness struct{ e, d time.Duration }

// window is E + d, the span of the bounds.
func (s staleness) window() time.Duration { return s.e + s.d }

func (s staleness) String() string {
	return fmt.Sprintf("E ≤ %v, d ≤ %v", s.e.Round(time.Millisecond), s.d.Round(time.Millisecond))
}

// sampleStaleness samples the workers' gauges of E and d every 50 ms
// until the function it returns is called, which returns the largest
// of each seen: the bounds' E and d while checks run (never less than
// the configured interval).
func (b *bed) sampleStaleness() func() staleness {
	done, most := make(chan struct{}), make(chan staleness)
	go func() {
		m := staleness{e: interval}
		for {
			m.e, m.d = max(m.e, b.gauge("tollgate_region_exchange_interval_seconds")), max(m.d, b.gauge("tollgate_region_exchange_lag_seconds"))
			select {
			case <-done:
				most <- m
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() staleness {
		close(done)
		return <-most
	}
}

// gauge returns the largest sample of the gauge name any worker reports
// now.
func (b *bed) gauge(name string) time.Duration {
	var most float64
	for _, addr := range b.stats {
		v, err := scrapeMax(addr, name)
		if err == nil {
			most = max(most, v)
		}
	}
	return time.Duration(most * float64(time.Second))
}

func percentile(d []time.Duration, p float64) time.Duration {
	slices.Sort(d)
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// TestRegions runs the scenarios in one deployment, one after the other.
func TestRegions(t *testing.T) {
	b := start(t)

	// A check's latency in a region (a global_shared rule: the lean
	// script with its outbox, the exchanger running) beside a deployment
	// of one region on the same Redis (the same rule, regional there),
	// both at once at the same offered rate; then the region's again
	// while the other regions take the same load (on this one machine,
	// they also take its CPU).
	t.Run("latency", func(t *testing.T) {
		const rate, d = 200, 2 * time.Second
		// Both at once, each at the rate, so that both see the same
		// machine at the same moments (in turns, a burst of other work
		// on this shared machine fell on one side only).
		var single, regional []time.Duration
		var both sync.WaitGroup
		both.Go(func() { _, single = b.load(b.single, "GET /latency", rate, 3*d) })
		both.Go(func() { _, regional = b.load(b.apis["us"], "GET /latency", rate, 3*d) })
		both.Wait()
		var wg sync.WaitGroup
		var loaded []time.Duration
		for _, name := range names {
			wg.Go(func() {
				_, l := b.load(b.apis[name], "GET /latency", rate, d)
				if name == "us" {
					loaded = l
				}
			})
		}
		wg.Wait()
		t.Logf("figure latency at %d checks/s: one region p50 %v p99 %v; region us of three p50 %v p99 %v (%+.0f %%); with the other two regions under the same load on this machine p50 %v p99 %v",
			rate, percentile(single, 0.5), percentile(single, 0.99), percentile(regional, 0.5), percentile(regional, 0.99),
			100*(float64(percentile(regional, 0.99))/float64(percentile(single, 0.99))-1), percentile(loaded, 0.5), percentile(loaded, 0.99))
	})

	// global_shared and global_split rules of 1,000 a minute, offered
	// 3,000 in one window from three regions.
	t.Run("hammer", func(t *testing.T) {
		if left := time.Minute - time.Duration(time.Now().UnixNano())%time.Minute; left < 25*time.Second {
			time.Sleep(left + 100*time.Millisecond) // load injection: the load starts with a window of the wall clock Redis keeps
		}
		const perRegion, d = 1000, 20 * time.Second // 3 × the limit in all
		rate := int(perRegion / d.Seconds())
		admitted := map[string]map[string][]time.Time{"GET /shared": {}, "GET /split": {}}
		var mu sync.Mutex
		var wg sync.WaitGroup
		degraded := b.degraded.Load()
		sampled := b.sampleStaleness()
		for _, name := range names {
			for resource := range admitted {
				wg.Go(func() {
					a, _ := b.load(b.apis[name], resource, rate, d)
					mu.Lock()
					admitted[resource][name] = a
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		degraded = b.degraded.Load() - degraded
		stale := sampled()
		var shared, split int64
		for _, name := range names {
			shared += int64(len(admitted["GET /shared"][name]))
			split += int64(len(admitted["GET /split"][name]))
		}
		bound := sharedBound(minute, admitted["GET /shared"], stale.window())
		t.Logf("figure hammer: global_shared admitted %d of %d offered (limit %d, bound %d with %v: overshoot %d); global_split admitted %d (limit %d); %d admitted by failure modes besides",
			shared, 3*perRegion, minute, bound, stale, shared-minute, split, minute, degraded)
		if shared > bound {
			t.Errorf("global_shared admitted %d, above the bound %d", shared, bound)
		}
		if split > minute {
			t.Errorf("global_split admitted %d, above the limit %d", split, minute)
		}
		// The same demand everywhere: the rebalancer leaves the equal
		// shares (it makes no move under a fiftieth of the limit). Not
		// when a failure mode decided some checks: those never reached
		// their region's Redis, whose demand was then another.
		for name, want := range map[string]float64{"us": 0.334, "ap": 0.333} {
			if degraded > 0 {
				break
			}
			if got, err := scrape(b.stats[name], `tollgate_region_share{rule="global/split"}`); err != nil || got < want-0.02 || got > want+0.02 {
				t.Errorf("%s's tollgate_region_share: got %v (%v), want %v ± 0.02", name, got, err, want)
			}
		}
		if degraded == 0 && (shared < minute || split < minute-int64(len(names))) {
			t.Errorf("admitted shared %d, split %d: fewer than the limit", shared, split)
		}
	})

	// A 30-second partition of one region under load, as a cut network
	// makes (what passes waits), then a 10-second one that closes the
	// routes (NATS makes them again after the heal).
	t.Run("partition", func(t *testing.T) { b.partition(t, "GET /daily", "daily", 30*time.Second, b.net.Partition) })
	t.Run("reset", func(t *testing.T) { b.partition(t, "GET /reset", "reset", 10*time.Second, b.net.Disconnect) })

	// A global_split rule's allotment follows demand: checks in us alone
	// move the other regions' allotments to it, down to their floors
	// (limit / (4 · 3) = 83), which tollgate_region_share reports.
	t.Run("rebalance", func(t *testing.T) {
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() { b.load(b.apis["us"], "GET /moving", 40, 4*time.Second) })
		defer wg.Wait()
		var got map[string]float64
		testenv.Eventually(t, start, 15*time.Second, "us's share of global/moving growing", func() (bool, string) {
			got = map[string]float64{}
			for _, name := range names {
				got[name], _ = scrape(b.stats[name], `tollgate_region_share{rule="global/moving"}`)
			}
			return got["us"] >= 0.8 && got["eu"] < 0.1 && got["ap"] < 0.1, fmt.Sprint(got)
		})
		t.Logf("figure rebalance: us alone at 40 checks/s on a global_split rule of %d: shares %v %v after its first check (rebalance interval %v)",
			minute, got, time.Since(start).Round(100*time.Millisecond), region.DefaultRebalanceInterval)
	})

	t.Run("settle", b.settle)
	t.Run("failover", b.failover)
	t.Run("quota", b.quota)
	t.Run("money", b.money)

	// Usage: every region's worker applies its region's usage to the one
	// Postgres, each check once.
	t.Run("usage", func(t *testing.T) {
		// A check a failure mode admitted may have been admitted by its
		// store call as well, whose answer came too late: counted twice.
		wantAllowed, wantDenied, twice := b.allowed.Load(), b.denied.Load(), b.degraded.Load()
		want := fmt.Sprintf("%d allowed (%d more at most), %d denied", wantAllowed, twice, wantDenied)
		tenants := []string{b.tenant} // and the quota scenario's
		for _, tn := range b.months {
			tenants = append(tenants, tn.id)
		}
		testenv.Eventually(t, time.Now(), 30*time.Second, "the usage tables counting every check once", func() (bool, string) {
			var allowed, denied int64
			err := b.db.QueryRow(context.Background(), `SELECT COALESCE(sum(allowed_units), 0), COALESCE(sum(denied), 0)
				FROM usage_month WHERE tenant_id = ANY($1::uuid[])`, tenants).Scan(&allowed, &denied)
			got := fmt.Sprintf("%d allowed, %d denied", allowed, denied)
			return err == nil && allowed >= wantAllowed && allowed <= wantAllowed+twice && denied == wantDenied,
				fmt.Sprintf("%s, want %s (%v)", got, want, err)
		})
		t.Logf("figure usage: %s, counted once in the one Postgres", want)
	})
}

// scrape returns the sum of the samples of /metrics at addr named name.
func scrape(addr, name string) (float64, error) { return testenv.ScrapeSum(addr, name) }

// scrapeMax returns the largest sample.
func scrapeMax(addr, name string) (float64, error) {
	values, err := testenv.Scrape(addr, name)
	if err != nil {
		return 0, err
	}
	return slices.Max(values), nil
}

// partition cuts ap off for length with cut, under load on resource
// (the fixed window rule named rule, of daily a day), and checks each
// side's bound and how soon the regions converge after the heal.
func (b *bed) partition(t *testing.T, resource, rule string, length time.Duration, cut func(string)) {
	if left := 24*time.Hour - time.Duration(time.Now().UnixNano())%(24*time.Hour); left < 2*time.Minute {
		t.Skip("the daily window would end during the partition")
	}
	const rate = 20
	var mu sync.Mutex
	admitted := map[string]int64{}
	times := map[string][]time.Time{}
	offer := func(d time.Duration) {
		var wg sync.WaitGroup
		for _, name := range names {
			wg.Go(func() {
				a, _ := b.load(b.apis[name], resource, rate, d)
				mu.Lock()
				admitted[name] += int64(len(a))
				times[name] = append(times[name], a...)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	degraded := b.degraded.Load()
	offer(4 * time.Second) // 240 of 600
	before := admitted["us"] + admitted["eu"] + admitted["ap"]
	cut("ap")
	from := time.Now()
	// The lag during the cut (before it, the previous scenario's heal
	// may still show in the metric).
	sampled := b.sampleStaleness()
	offer(length)
	stale := sampled()
	during := map[string]int64{}
	for _, name := range names {
		during[name] = b.count(name, rule)
	}
	b.net.Heal("ap")
	healed := time.Now()
	total := admitted["us"] + admitted["eu"] + admitted["ap"]
	// A check a failure mode admitted (its region's Redis not answering
	// in time on a loaded machine) may have been counted by its store
	// call as well: every region then counts it, once.
	twice := b.degraded.Load() - degraded
	var converged, joined time.Duration
	testenv.Eventually(t, healed, 30*time.Second, "every region counting every admission", func() (bool, string) {
		if joined == 0 && b.net.Joined("ap") {
			joined = time.Since(healed)
		}
		got := map[string]int64{}
		all := true
		for _, name := range names {
			got[name] = b.count(name, rule)
			all = all && got[name] >= total && got[name] <= total+twice && got[name] == got[names[0]]
		}
		converged = time.Since(healed)
		return all, fmt.Sprintf("%v, admitted %d (%d more at most, by failure modes)", got, total, twice)
	})
	if joined == 0 {
		joined = converged
	}
	// Each side decides on its own count and what it heard before
	// the cut: ap alone at most the limit; us and eu, sharing, the
	// limit and what the other admitted within E + d.
	bounds := map[string]int64{"ap": daily,
		"us": daily + min(daily, mostWithin(times["eu"], stale.window())),
		"eu": daily + min(daily, mostWithin(times["us"], stale.window()))}
	apSide, otherSide := admitted["ap"], admitted["us"]+admitted["eu"]
	t.Logf("figure %s: %v cut off; before %d admitted; during, ap's side saw %d and admitted %d in all, us+eu saw %d/%d (bounds %d/%d) and admitted %d in all; %d in all (limit %d, partition bound %d); converged %v after the heal, %v after NATS had its routes again (%v)",
		t.Name()[len("TestRegions/"):], healed.Sub(from).Round(time.Second), before, during["ap"], apSide, during["us"], during["eu"], bounds["us"], bounds["eu"], otherSide, total, daily, 2*daily,
		converged.Round(time.Millisecond), (converged - joined).Round(time.Millisecond), stale)
	if total > 2*daily {
		t.Errorf("admitted %d in all, above the partition bound %d", total, 2*daily)
	}
	for side, bound := range bounds {
		if during[side] > bound {
			t.Errorf("%s counted %d during the partition, above its bound %d", side, during[side], bound)
		}
	}
}
