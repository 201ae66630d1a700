package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/testkeys"
	"github.com/tollgate/tollgate/internal/usage"
)

// Settings of the run. The rate is what three API processes, a worker,
// Postgres, Redis and this client share comfortably on two cores.
const (
	nodes         = 3
	checksPerSec  = 300
	usageFlush    = 250 * time.Millisecond
	redisOutage   = 5 * time.Second
	pgOutage      = 20 * time.Second
	settle        = 3 * time.Second
	streamName    = "tollgate:usage"
	keyPrefix     = "tg:" // the processes' TOLLGATE_KEY_PREFIX (the default)
	nilUUID       = "00000000-0000-0000-0000-000000000000"
	maxOutageLogs = 20 // per process, during an outage
)

// suite is the running system: servers, processes and the client.
type suite struct {
	t      *testing.T
	dir    string
	api    string // binaries
	admin  string
	pg     *postgresServer
	redis  *redisServer
	db     *pgxpool.Pool
	apis   []*proc
	addrs  []string
	worker *proc
	// workerMetrics is the worker's --metrics-addr.
	workerMetrics string
	faultsDir     string
	callers       []caller
	victim        string // a key revoked after the Postgres outage
	token         string
	// duplicates the restarted worker found applied already.
	duplicates float64
	report     strings.Builder
}

func (s *suite) say(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	s.report.WriteString(line + "\n")
	s.t.Log(line)
}

func TestFaults(t *testing.T) {
	if os.Getenv("TOLLGATE_FAULTS") == "" {
		t.Skip("the fault suite runs with TOLLGATE_FAULTS=1 (make test-faults)")
	}
	began := time.Now()
	s := &suite{t: t}
	var err error
	// Not under TOLLGATE_TEST_WORK: the logs of a failed run outlive it.
	s.dir, err = os.MkdirTemp("", "tollgate-faults-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(s.dir, 0o755); err != nil { // Postgres runs as another user
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs kept in %s", s.dir)
			return
		}
		os.RemoveAll(s.dir)
	})
	s.api, s.admin = buildBinaries(t, s.dir)
	s.startStores()
	s.seed()
	s.startWorker()
	for i := range nodes {
		s.startAPI(i)
	}
	s.say("setup (build, initdb, start): %v", time.Since(began).Round(100*time.Millisecond))

	load := newLoadGen(s.addrs, s.token, s.callers, checksPerSec)
	load.start()
	marks := map[string]time.Time{"start": time.Now()}
	// Fault injection, here and below: the suite is a timeline. Each
	// fault lasts a set time (redisOutage, pgOutage) and each phase runs
	// the load for settle, because what the suite checks is measured over
	// those spans (answers and log lines per phase, the answers from 3 s
	// after Redis is back, the usage of the whole run): a duration is
	// the point, and nothing in the system signals the end of a span.
	time.Sleep(settle) // fault injection: a span of load before the first fault

	// 1. Redis: kill -9, and start again on the same port and data.
	redisLines := s.logLines()
	marks["redis killed"] = time.Now()
	s.redis.p.kill()
	time.Sleep(redisOutage) // fault injection: Redis down this long
	marks["redis restarted"] = time.Now()
	marks["redis answers"] = s.redis.start(t)
	time.Sleep(settle) // fault injection: a span of load after Redis is back
	s.checkRedisOutageLogs(redisLines, s.logLines())

	// 2. Postgres: stop -m immediate, and start again.
	linesBefore := s.logLines()
	workerLines := s.worker.logLines()
	marks["postgres stopped"] = time.Now()
	s.pg.stopImmediate(t)
	time.Sleep(pgOutage) // fault injection: Postgres down this long
	linesDuring := s.logLines()
	workerLog := s.worker.logSince(workerLines)
	s.say("worker: %d log lines during the Postgres outage", len(workerLog))
	for _, l := range workerLog {
		s.say("    worker: %s", l)
	}
	if len(workerLog) > maxOutageLogs {
		t.Errorf("the worker logged %d lines during a %v Postgres outage, want at most %d", len(workerLog), pgOutage, maxOutageLogs)
	}
	reloadsBefore := s.scrapeAll("tollgate_snapshot_reloads_total")
	marks["postgres started"] = time.Now()
	s.pg.start(t)
	s.waitAll("LISTEN again", `tollgate_dependency_up{component="snapshot_listener"`, 1)
	marks["listening again"] = time.Now()
	time.Sleep(settle) // fault injection: a span of load after Postgres is back
	reloadsAfter := s.scrapeAll("tollgate_snapshot_reloads_total")
	linesAfter := s.logLines()
	s.checkPostgresOutage(linesBefore, linesDuring, linesAfter, reloadsBefore, reloadsAfter)

	// A revocation made now reaches every node by notification: the
	// periodic reload is an hour away.
	s.revokeVictim()

	// 3. kill -9 one API node, under load.
	const killed = nodes - 1
	marks["unpublished read"] = time.Now()
	unpublished, err := scrape(s.addrs[killed], "tollgate_usage_unpublished_decisions")
	if err != nil {
		t.Fatal(err)
	}
	marks["api killed"] = time.Now()
	s.apis[killed].kill()
	time.Sleep(settle) // fault injection: a span of load with one node dead

	// 4. kill -9 the worker between a commit and its acknowledgement.
	s.killWorkerAfterCommit()
	marks["worker restarted"] = time.Now()
	time.Sleep(settle) // fault injection: a span of load after the worker's restart

	// 5. SIGTERM everything.
	load.finish()
	marks["load stopped"] = time.Now()
	results := load.snapshot()
	s.terminateAll(killed)

	s.checkAnswers(results, marks, load.skipped.Load())
	s.checkUsage(results, marks, killed, unpublished)
	s.redis.p.terminate(t, 30*time.Second) //nolint:errcheck // its exit status is its own business
	s.db.Close()                           // a smart shutdown waits for every session to end
	s.pg.terminate(t)
	s.say("whole run: %v", time.Since(began).Round(100*time.Millisecond))
	if path := os.Getenv("TOLLGATE_FAULTS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(s.report.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func (s *suite) startStores() {
	t := s.t
	s.pg = startPostgres(t, filepath.Join(s.dir, "pg"))
	s.redis = startRedis(t, filepath.Join(s.dir, "redis"))
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, s.pg.url("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE tollgate")
	admin.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.run(s.admin, "migrate", "up")
	if err != nil {
		t.Fatalf("admin migrate up: %v\n%s", err, out)
	}
	s.db, err = postgres.Open(ctx, s.pg.url("tollgate"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.db.Close)
}

func (s *suite) env(extra ...string) []string {
	return append([]string{
		"PATH=" + os.Getenv("PATH"),
		"TOLLGATE_DATABASE_URL=" + s.pg.url("tollgate"),
		"TOLLGATE_REDIS_ADDR=" + s.redis.addr(),
		"TOLLGATE_SECRET_KEY=" + testenv.SecretKey,
	}, extra...)
}

func (s *suite) run(bin string, args ...string) ([]byte, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = s.env()
	return cmd.CombinedOutput()
}

// seed stores the plans, tenants and keys of the run and the callers:
// per API node a key on a fail-open plan, a key on a fail-closed plan, an
// anonymous IP and an unknown key. Each plan allows 20 checks a second
// per caller and gets 25, so some are denied.
func (s *suite) seed() {
	t, ctx := s.t, context.Background()
	ps, ts := plans.NewStore(s.db), tenants.NewStore(s.db)
	rules := func(mode plans.FailureMode, scope plans.Scope) []plans.Rule {
		return []plans.Rule{
			{Name: "hourly", Algorithm: limiter.GCRA, Limit: 1_000_000, PeriodUS: limiter.HourUS, FailureMode: mode, Scope: scope},
			{Name: "persec", Algorithm: limiter.TokenBucket, Limit: 20, PeriodUS: limiter.SecondUS, FailureMode: mode, Scope: scope},
		}
	}
	if _, err := ps.Put(ctx, plans.Plan{Name: plans.AnonymousPlan, Rules: rules(plans.FailOpen, plans.ScopeIP)}); err != nil {
		t.Fatal(err)
	}
	planIDs := map[string]int64{}
	for _, mode := range []plans.FailureMode{plans.FailOpen, plans.FailClosed} {
		p, err := ps.Put(ctx, plans.Plan{Name: "fail-" + string(mode), Rules: rules(mode, plans.ScopeKey)})
		if err != nil {
			t.Fatal(err)
		}
		planIDs[string(mode)] = p.ID
	}
	body := func(v map[string]any) []byte {
		v["resource"], v["cost"] = "GET /v1/things", 1
		b, _ := json.Marshal(v)
		return b
	}
	for node := range nodes {
		for _, mode := range []string{"open", "closed"} {
			tn, err := ts.Create(ctx, fmt.Sprintf("%s-%d", mode, node), planIDs[mode])
			if err != nil {
				t.Fatal(err)
			}
			secret, _, err := ts.IssueKey(ctx, tn.ID, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			s.callers = append(s.callers, caller{name: fmt.Sprintf("%s-%d", mode, node), mode: mode, home: node,
				body: body(map[string]any{"key": secret})})
			if mode == "open" && node == 0 {
				if s.victim, _, err = ts.IssueKey(ctx, tn.ID, "victim", nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		s.callers = append(s.callers, caller{name: fmt.Sprintf("anonymous-%d", node), mode: "anonymous", home: node,
			body: body(map[string]any{"ip": fmt.Sprintf("192.0.2.%d", 10+node)})})
		unknown, _, _ := tenants.GenerateKey()
		s.callers = append(s.callers, caller{name: fmt.Sprintf("unknown-%d", node), mode: "unknown", home: node,
			body: body(map[string]any{"key": unknown})})
	}
	var err error
	if s.token, _, err = auth.NewStore(s.db).WithSecretKeys(testkeys.SecretKeys(s.t)).IssueServiceToken(ctx, "faults", 0); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) startAPI(i int) {
	port := testenv.FreePort(s.t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p := startProc(s.t, fmt.Sprintf("api-%d", i), filepath.Join(s.dir, fmt.Sprintf("api-%d.log", i)), s.env(
		"TOLLGATE_API_ADDR="+addr,
		"TOLLGATE_SNAPSHOT_RELOAD=1h", // changes arrive by notification, or not at all
		"TOLLGATE_USAGE_FLUSH="+usageFlush.String(),
		"TOLLGATE_LAST_USED_FLUSH=1s",
	), s.api)
	waitHTTP(s.t, p, "http://"+addr+"/readyz")
	s.apis = append(s.apis, p)
	s.addrs = append(s.addrs, addr)
}

func (s *suite) startWorker() {
	s.faultsDir = filepath.Join(s.dir, "worker-faults")
	if err := os.MkdirAll(s.faultsDir, 0o755); err != nil {
		s.t.Fatal(err)
	}
	if s.workerMetrics == "" {
		s.workerMetrics = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(s.t))
	}
	s.worker = startProc(s.t, "worker", filepath.Join(s.dir, "worker.log"), s.env(
		"TOLLGATE_USAGE_CONSUMER=faults-worker", // a restarted worker takes back its own pending entries
		"TOLLGATE_FAULTS_DIR="+s.faultsDir,
	), s.admin, "worker", "--metrics-addr", s.workerMetrics)
	waitHTTP(s.t, s.worker, "http://"+s.workerMetrics+"/metrics")
}

// logLines counts each API process's log lines so far.
func (s *suite) logLines() []int {
	out := make([]int, len(s.apis))
	for i, p := range s.apis {
		out[i] = p.logLines()
	}
	return out
}

// scrapeAll reads a metric of every live API node.
func (s *suite) scrapeAll(name string) []float64 {
	out := make([]float64, len(s.addrs))
	for i, addr := range s.addrs {
		v, err := scrape(addr, name)
		if err != nil {
			s.t.Fatal(err)
		}
		out[i] = v
	}
	return out
}

// waitAll polls until metric is want on every API node.
func (s *suite) waitAll(what, metric string, want float64) {
	testenv.WaitFor(s.t, 30*time.Second, fmt.Sprintf("%s: %s %v on every node", what, metric, want), func() bool {
		for _, addr := range s.addrs {
			if v, err := scrape(addr, metric); err != nil || v != want {
				return false
			}
		}
		return true
	})
}

// checkRedisOutageLogs bounds each API process's log lines from the kill
// of Redis to a few seconds after it is back: lines saying so, and
// go-redis's own line for each failed dial before the circuit opened.
func (s *suite) checkRedisOutageLogs(before, after []int) {
	for i, p := range s.apis {
		n := after[i] - before[i]
		s.say("redis outage (%v, kill -9): %s logged %d lines from the kill to %v after Redis was back", redisOutage, p.name, n, settle)
		if n > maxOutageLogs {
			s.t.Errorf("%s logged %d lines during a %v Redis outage, want at most %d:\n%s", p.name, n, redisOutage,
				maxOutageLogs, strings.Join(p.logSince(before[i])[:n], "\n"))
		}
	}
	for _, l := range s.apis[0].logSince(before[0])[:after[0]-before[0]] {
		s.say("    api-0: %s", l)
	}
}

func (s *suite) checkPostgresOutage(before, during, after []int, reloadsBefore, reloadsAfter []float64) {
	t := s.t
	s.say("postgres outage (%v, pg_ctl stop -m immediate):", pgOutage)
	for i, p := range s.apis {
		n := during[i] - before[i]
		s.say("  %s: %d log lines during the outage, %d from its end to %v after LISTEN was back; %v snapshot reloads in that time",
			p.name, n, after[i]-during[i], settle, reloadsAfter[i]-reloadsBefore[i])
		if n > maxOutageLogs {
			t.Errorf("%s logged %d lines during a %v Postgres outage, want at most %d:\n%s", p.name, n, pgOutage,
				maxOutageLogs, strings.Join(p.logSince(before[i])[:n], "\n"))
		}
		// One reload when LISTEN is back; a spinning listener made hundreds a second.
		if got := reloadsAfter[i] - reloadsBefore[i]; got > 3 {
			t.Errorf("%s: %v snapshot reloads after Postgres came back, want 1 (at most 3)", p.name, got)
		}
	}
	for _, l := range s.apis[0].logSince(before[0])[:during[0]-before[0]] {
		s.say("    api-0: %s", l)
	}
}

// revokeVictim revokes a key and waits until every node denies it.
func (s *suite) revokeVictim() {
	t, ctx := s.t, context.Background()
	ts := tenants.NewStore(s.db)
	k, err := ts.FindKeyByHash(ctx, tenants.HashKey(s.victim))
	if err != nil {
		t.Fatal(err)
	}
	reloads := s.scrapeAll("tollgate_snapshot_reloads_total")
	revoked := time.Now()
	if err := ts.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"key": s.victim, "dry_run": true}) // dry runs count no usage
	client := newLoadGen(s.addrs, s.token, []caller{{body: body}}, 1)
	var slowest time.Duration
	for node := range s.addrs {
		what := fmt.Sprintf("node %d denying the revoked key (LISTEN re-established)", node)
		testenv.Eventually(t, revoked, 10*time.Second, what, func() (bool, string) {
			r := result{start: time.Now()}
			if err := client.send(&r, node); err != nil {
				t.Fatal(err)
			}
			if r.reason == "key_revoked" {
				slowest = max(slowest, time.Since(revoked))
				return true, ""
			}
			return false, "answered " + r.reason
		})
	}
	after := s.scrapeAll("tollgate_snapshot_reloads_total")
	for i := range after {
		if after[i] == reloads[i] {
			t.Errorf("api-%d denies the revoked key without a reload", i)
		}
	}
	s.say("revocation after the outage reached all %d nodes by notification in %v", len(s.addrs), slowest.Round(time.Millisecond))
}

func (s *suite) killWorkerAfterCommit() {
	t := s.t
	arm := filepath.Join(s.faultsDir, "hold-after-commit")
	held := filepath.Join(s.faultsDir, "held")
	if err := os.WriteFile(arm, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the worker stopping after a commit", func() bool {
		_, err := os.Stat(held)
		return err == nil
	})
	id, _ := os.ReadFile(held)
	s.worker.kill()
	os.Remove(arm)
	os.Remove(held)
	s.startWorker()
	testenv.Eventually(t, time.Now(), 30*time.Second, "the restarted worker skipping a batch as applied before", func() (bool, string) {
		n, err := scrape(s.workerMetrics, "tollgate_usage_batches_duplicate_total")
		s.duplicates = n
		return err == nil && n >= 1, fmt.Sprintf("%v, %v", n, err)
	})
	s.say("worker killed (kill -9) after committing a fetch (from entry %s) and before acknowledging it; "+
		"restarted, it skipped %v batches as applied already", id, s.duplicates)
}

// terminateAll sends SIGTERM to the API nodes still running and the
// worker at once; each must exit 0. Then a fresh worker applies what the
// nodes flushed at shutdown and the stream is drained.
func (s *suite) terminateAll(killed int) {
	t := s.t
	var wg sync.WaitGroup
	procs := []*proc{s.worker}
	for i, p := range s.apis {
		if i != killed {
			procs = append(procs, p)
		}
	}
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.terminate(t, 30*time.Second); err != nil {
				t.Errorf("%s exited with %v after SIGTERM, want 0\n%s", p.name, err, strings.Join(p.logSince(0), "\n"))
			}
		}()
	}
	wg.Wait()
	s.startWorker()
	client := redis.NewClient(&redis.Options{Addr: s.redis.addr()})
	defer client.Close()
	journals := usage.NewJournalConsumer(client, keyPrefix, time.Second)
	testenv.Eventually(t, time.Now(), 60*time.Second, "usage stream and journals drained", func() (bool, string) {
		n, err := client.XLen(context.Background(), streamName).Result()
		j, jerr := journals.Backlog(context.Background())
		return err == nil && jerr == nil && n == 0 && j == 0, fmt.Sprintf("%d entries, %d journals (%v, %v)", n, j, err, jerr)
	})
	if err := s.worker.terminate(t, 30*time.Second); err != nil {
		t.Errorf("worker exited with %v after SIGTERM, want 0", err)
	}
}
