package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/metering/meteringtest"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/testkeys"
	"github.com/tollgate/tollgate/internal/usage"
)

// These tests drive checks through two real api processes (run() twice,
// on free ports), stop them gracefully, run usage workers, and require the
// usage tables to hold exactly the decisions the client saw.

const nilUUID = "00000000-0000-0000-0000-000000000000"

// rig is a seeded database, a Redis key space and the api settings.
type rig struct {
	db     *pgxpool.Pool
	redis  redis.UniversalClient
	stream string
	// keyPrefix is the api processes' TOLLGATE_KEY_PREFIX, under which
	// their store journals the admitted checks' usage.
	keyPrefix string
	env       map[string]string
	token     string
	callers   []caller
}

// caller is whom a check is for: a key, or an anonymous IP.
type caller struct {
	key, ip string
}

func newRig(t *testing.T, dbURL string) *rig {
	t.Helper()
	ctx := context.Background()
	db, err := postgres.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	client, prefix := testenv.Redis(t)
	r := &rig{db: db, redis: client, stream: prefix + "usage", keyPrefix: prefix + "rl:"}
	r.env = map[string]string{
		"TOLLGATE_DATABASE_URL": dbURL, "TOLLGATE_REDIS_ADDR": testenv.RedisAddr(t),
		"TOLLGATE_KEY_PREFIX": r.keyPrefix, "TOLLGATE_USAGE_STREAM": r.stream,
		"TOLLGATE_USAGE_FLUSH": "50ms", "TOLLGATE_API_ADDR": "127.0.0.1:0", "TOLLGATE_LOG_LEVEL": "error",
	}
	// Small allowances, so that many checks are denied.
	ps, ts := plans.NewStore(db), tenants.NewStore(db)
	hourly := func(limit int64, scope plans.Scope) plans.Rule {
		return plans.Rule{Name: "hourly", Algorithm: limiter.GCRA, Limit: limit, PeriodUS: limiter.HourUS, Scope: scope}
	}
	if _, err := ps.Put(ctx, plans.Plan{Name: plans.AnonymousPlan, Rules: []plans.Rule{hourly(4, plans.ScopeIP)}}); err != nil {
		t.Fatal(err)
	}
	tiny, err := ps.Put(ctx, plans.Plan{Name: "tiny", IncludedUnits: 100, Rules: []plans.Rule{
		hourly(30, plans.ScopeKey),
		{Name: "search", Algorithm: limiter.FixedWindow, Limit: 6, PeriodUS: limiter.HourUS, Resource: "POST /search"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		tn, err := ts.Create(ctx, fmt.Sprintf("tenant-%d", i), tiny.ID)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			secret, _, err := ts.IssueKey(ctx, tn.ID, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			r.callers = append(r.callers, caller{key: secret})
		}
		if i == 0 {
			secret, k, err := ts.IssueKey(ctx, tn.ID, "revoked", nil)
			if err != nil {
				t.Fatal(err)
			}
			testenv.Must(t, ts.RevokeKey(ctx, k.ID))
			r.callers = append(r.callers, caller{key: secret})
		}
	}
	for _, ip := range []string{"192.0.2.1", "192.0.2.2", "2001:db8::7"} {
		r.callers = append(r.callers, caller{ip: ip})
	}
	bogus, _, _ := tenants.GenerateKey() // well-formed, unknown
	r.callers = append(r.callers, caller{key: bogus})
	if r.token, _, err = auth.NewStore(db).WithSecretKeys(testkeys.SecretKeys(t)).IssueServiceToken(ctx, "test", 0); err != nil {
		t.Fatal(err)
	}
	return r
}

// ownRedis moves the rig and the api processes it starts to a Redis
// server of the test's own, for a test whose FLUSHALL must not touch
// other tests'.
func (r *rig) ownRedis(t *testing.T) {
	t.Helper()
	srv := testenv.StartRedisServer(t)
	r.redis = redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { r.redis.Close() })
	r.env["TOLLGATE_REDIS_ADDR"] = srv.Addr()
}

// api is one running api process.
type api struct {
	addr string
	stop func() error
}

func (r *rig) startAPI(t *testing.T) *api {
	t.Helper()
	getenv := func(k string) string { return r.env[k] }
	addr, stop := testenv.Start(t, "api", func(ctx context.Context, ready chan<- string) error {
		return run(ctx, nil, getenv, io.Discard, io.Discard, ready)
	})
	t.Cleanup(func() { _ = stop() })
	return &api{addr: addr, stop: stop}
}

// tally is what the client saw, by tenant/key/tier.
type tally map[string]metering.Counts

func (t tally) add(o tally) {
	for k, c := range o {
		sum := t[k]
		sum.Add(c)
		t[k] = sum
	}
}

func (t tally) total() metering.Counts {
	var c metering.Counts
	for _, v := range t {
		c.Add(v)
	}
	return c
}

// drive sends n checks spread over the apis from 6 goroutines and tallies
// the decisions by what each response says.
func (r *rig) drive(t *testing.T, apis []*api, n int, seed int) (tally, map[string]int) {
	t.Helper()
	resources := []string{"GET /repos", "POST /search", "GET /users/1"}
	out := tally{}
	perAPI := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 6 {
				j := i + seed
				c := r.callers[j%len(r.callers)]
				body := map[string]any{"resource": resources[j%len(resources)], "cost": 1 + j%3}
				if c.key != "" {
					body["key"] = c.key
				}
				if c.ip != "" {
					body["ip"] = c.ip
				}
				a := apis[j%len(apis)]
				d, err := check(client, a.addr, r.token, body)
				if err != nil {
					t.Errorf("check %d: %v", i, err)
					return
				}
				k := orNil(d.TenantID) + "/" + orNil(d.KeyID) + "/" + d.Tier
				cost := int64(1 + j%3)
				mu.Lock()
				sum := out[k]
				if d.Allowed {
					sum.Add(metering.Counts{Allowed: 1, AllowedUnits: cost})
				} else {
					sum.Add(metering.Counts{Denied: 1, DeniedUnits: cost})
				}
				out[k] = sum
				perAPI[a.addr]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out, perAPI
}

type decision struct {
	Allowed  bool   `json:"allowed"`
	TenantID string `json:"tenant_id"`
	KeyID    string `json:"key_id"`
	Tier     string `json:"tier"`
}

func check(client *http.Client, addr, token string, body map[string]any) (decision, error) {
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/check", bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return decision{}, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return decision{}, fmt.Errorf("status %d: %s", resp.StatusCode, raw)
	}
	var d decision
	return d, json.Unmarshal(raw, &d)
}

func orNil(id string) string {
	if id == "" {
		return nilUUID
	}
	return id
}

// stored reads a usage table's totals by tenant/key/tier.
func stored(t *testing.T, db *pgxpool.Pool, table string) tally {
	t.Helper()
	return meteringtest.SumsByTier(t, db, table)
}

// requireReconciled compares every usage table with what the client saw.
func (r *rig) requireReconciled(t *testing.T, saw tally) {
	t.Helper()
	want := fmt.Sprint(map[string]metering.Counts(saw))
	for _, table := range []string{"usage_minute", "usage_hour", "usage_day", "usage_month"} {
		if got := fmt.Sprint(map[string]metering.Counts(stored(t, r.db, table))); got != want {
			t.Errorf("%s:\n got %s\nwant %s", table, got, want)
		}
	}
	// Anonymous traffic by IP sums to the anonymous tier.
	var ips metering.Counts
	err := r.db.QueryRow(context.Background(), `SELECT coalesce(sum(allowed), 0), coalesce(sum(denied), 0),
		coalesce(sum(allowed_units), 0), coalesce(sum(denied_units), 0) FROM usage_anon_ip_minute`).
		Scan(&ips.Allowed, &ips.Denied, &ips.AllowedUnits, &ips.DeniedUnits)
	if err != nil {
		t.Fatal(err)
	}
	if anon := saw[nilUUID+"/"+nilUUID+"/anonymous"]; ips != anon {
		t.Errorf("anonymous IP rows sum to %+v, want %+v", ips, anon)
	}
	s := saw.total()
	if s.Allowed == 0 || s.Denied < s.Allowed/2 {
		t.Errorf("traffic %+v: want both allowed and many denied checks", s)
	}
}

func (r *rig) consumer(name string) *usage.RedisConsumer {
	return usage.NewRedisConsumer(r.redis, usage.RedisConsumerConfig{Stream: r.stream, Group: "usage",
		Consumer: name, ClaimIdle: 200 * time.Millisecond, Block: 50 * time.Millisecond})
}

// journal returns a consumer of the store's usage journals, claiming them
// every 50 ms.
func (r *rig) journal() *usage.JournalConsumer {
	return usage.NewJournalConsumer(r.redis, r.keyPrefix, 50*time.Millisecond)
}

// worker returns a usage worker on the journals and the stream, as
// `admin worker` runs one.
func (r *rig) worker(name string) *usage.Worker {
	return &usage.Worker{Consumer: usage.Consumers{Journal: r.journal(), Stream: r.consumer(name)}, Store: usage.NewStore(r.db, usage.StoreConfig{Hooks: []usage.Hook{quota.NewIngest(r.db, quota.IngestConfig{})}}),
		FetchCount: 16, RetryMax: 200 * time.Millisecond}
}

// runWorker runs w until stop is called; stop returns Run's error.
func runWorker(w *usage.Worker) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	return func() error { cancel(); return <-errc }
}

// waitDrained polls until every published batch and every journal is
// applied and acknowledged.
func (r *rig) waitDrained(t *testing.T) {
	t.Helper()
	c, j := r.consumer("observer"), r.journal()
	testenv.Eventually(t, time.Now(), 60*time.Second, "usage stream and journals drained", func() (bool, string) {
		entries, pending, err := c.Backlog(context.Background())
		journals, jerr := j.Backlog(context.Background())
		return err == nil && jerr == nil && entries == 0 && pending == 0 && journals == 0,
			fmt.Sprintf("%d entries, %d pending, %d journals, err %v %v", entries, pending, journals, err, jerr)
	})
}

// metric reads one unlabelled metric from an api's /metrics.
func metric(t *testing.T, addr, name string) float64 {
	t.Helper()
	v, err := testenv.ScrapeSum(addr, name)
	testenv.Must(t, err)
	return v
}

func TestUsageReconcilesAcrossTwoAPIs(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	a, b := r.startAPI(t), r.startAPI(t)
	// Two workers at once, applying while the traffic flows.
	stop1, stop2 := runWorker(r.worker("w1")), runWorker(r.worker("w2"))
	saw, perAPI := r.drive(t, []*api{a, b}, 900, 0)
	for _, x := range []*api{a, b} {
		if got := metric(t, x.addr, "tollgate_usage_recorded_total"); got != float64(perAPI[x.addr]) {
			t.Errorf("api %s recorded %v decisions, the client saw %d", x.addr, got, perAPI[x.addr])
		}
	}
	testenv.Must(t, a.stop())
	testenv.Must(t, b.stop())
	r.waitDrained(t)
	testenv.Must(t, stop1())
	testenv.Must(t, stop2())
	r.requireReconciled(t, saw)
}

func TestUsageExactlyOnceWhenTheWorkerDiesBeforeAck(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	a, b := r.startAPI(t), r.startAPI(t)
	crashed := errors.New("simulated crash after commit, before XACK")
	doomed := r.worker("doomed")
	doomed.AfterApply = func(usage.Message) error { return crashed }
	doomedDone := make(chan error, 1)
	go func() { doomedDone <- doomed.Run(context.Background()) }()
	saw, _ := r.drive(t, []*api{a, b}, 600, 1)
	// It dies on its own with the first batch the apis publish.
	select {
	case err := <-doomedDone:
		if !errors.Is(err, crashed) {
			t.Fatalf("the doomed worker ended with %v, want the simulated crash", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the doomed worker never got a batch")
	}
	doomedApplied := doomed.Stats().Applied
	if doomedApplied < 1 {
		t.Fatalf("the doomed worker applied %d batches, want some", doomedApplied)
	}
	// Its batches are committed but unacknowledged: the successor (another
	// consumer name, so it must XAUTOCLAIM) finds them applied and skips
	// them.
	successor := r.worker("successor")
	stop := runWorker(successor)
	more, _ := r.drive(t, []*api{b, a}, 300, 2)
	saw.add(more)
	testenv.Must(t, a.stop())
	testenv.Must(t, b.stop())
	r.waitDrained(t)
	testenv.Must(t, stop())
	if s := successor.Stats(); s.Duplicates < doomedApplied {
		t.Errorf("successor stats %+v: want the %d batches applied before the crash skipped as duplicates", s, doomedApplied)
	}
	r.requireReconciled(t, saw)
}

func TestUsageSurvivesAPostgresOutage(t *testing.T) {
	pg := testenv.OwnPostgres(t)
	r := newRig(t, pg.URL)
	a, b := r.startAPI(t), r.startAPI(t)
	w := r.worker("w")
	stop := runWorker(w)
	saw, _ := r.drive(t, []*api{a, b}, 300, 3)

	pg.Stop()
	// Checks go on from the snapshot; batches pile up in the stream.
	more, _ := r.drive(t, []*api{a, b}, 300, 4)
	saw.add(more)
	testenv.WaitFor(t, 30*time.Second, "a batch waiting in the stream while Postgres is down", func() bool {
		entries, _, err := r.consumer("observer").Backlog(context.Background())
		return err == nil && entries > 0
	})
	pg.Start()

	more, _ = r.drive(t, []*api{a, b}, 300, 5)
	saw.add(more)
	testenv.Must(t, a.stop())
	testenv.Must(t, b.stop())
	r.waitDrained(t)
	testenv.Must(t, stop())
	if s := w.Stats(); s.Errors == 0 {
		t.Errorf("worker stats %+v: want failed applies during the outage", s)
	}
	r.requireReconciled(t, saw)
}

func TestUsageInMemoryModeGoesStraightToPostgres(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	r.env["TOLLGATE_STORE"] = "memory" // no Redis at all: usage is applied by the api itself
	r.env["TOLLGATE_REDIS_ADDR"] = "127.0.0.1:1"
	a := r.startAPI(t)
	saw, _ := r.drive(t, []*api{a}, 300, 6)
	testenv.Must(t, a.stop())
	r.requireReconciled(t, saw)
	if n, _ := r.redis.Exists(context.Background(), r.stream).Result(); n != 0 {
		t.Error("memory mode wrote to the usage stream")
	}
}
