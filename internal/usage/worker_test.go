package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/testenv"
)

// publishBatches publishes n batches of known counts and returns their
// total for tenant tA / key kA.
func publishBatches(t *testing.T, p metering.Producer, n int) metering.Counts {
	t.Helper()
	var total metering.Counts
	for i := range n {
		c := metering.Counts{Allowed: int64(i%5 + 1), Denied: int64(i % 3), AllowedUnits: int64(2 * (i%5 + 1)), DeniedUnits: int64(i % 3)}
		total.Add(c)
		b := metering.Batch{Version: 1, ID: fmt.Sprintf("prod:%d", i), Rows: []metering.Row{
			row(at(t, "2026-11-20T10:00")+int64(i%7)*60, tA, kA, "GET /a", c),
		}}
		if err := p.Publish(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	return total
}

// waitDrained polls until every entry of the stream has been applied and
// acknowledged.
func waitDrained(t *testing.T, c *RedisConsumer) {
	t.Helper()
	testenv.Eventually(t, time.Now(), 30*time.Second, "stream drained", func() (bool, string) {
		entries, pending, err := c.Backlog(context.Background())
		return err == nil && entries == 0 && pending == 0, fmt.Sprintf("%d entries, %d pending, err %v", entries, pending, err)
	})
}

type workerRig struct {
	client redis.UniversalClient
	stream string
	db     *pgxpool.Pool
	store  *Store
}

func newWorkerRig(t *testing.T) *workerRig {
	client, prefix := testenv.Redis(t)
	db := testenv.DB(t)
	return &workerRig{client: client, stream: prefix + "usage", db: db,
		store: NewStore(db, StoreConfig{Now: fixedNow("2026-11-22T12:00:00Z")})}
}

func (r *workerRig) worker(consumer string, claimIdle time.Duration) *Worker {
	return &Worker{
		Consumer: NewRedisConsumer(r.client, RedisConsumerConfig{Stream: r.stream, Group: "g", Consumer: consumer,
			ClaimIdle: claimIdle, Block: 50 * time.Millisecond}),
		Store: r.store, FetchCount: 8, RetryMax: 100 * time.Millisecond,
	}
}

// watched returns a worker of consumer (claiming after an hour idle)
// that logs JSON to logs and counts in a registry of its own, reg.
func (r *workerRig) watched(consumer string) (w *Worker, logs *testenv.LogBuffer, reg *prometheus.Registry) {
	w, logs, reg = r.worker(consumer, time.Hour), &testenv.LogBuffer{}, prometheus.NewRegistry()
	w.Log = slog.New(slog.NewJSONHandler(logs, nil))
	w.Register(reg)
	return w, logs, reg
}

// runWorkers runs workers until the stream is drained, then stops them.
func (r *workerRig) runWorkers(t *testing.T, workers ...*Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(ctx); err != nil {
				t.Errorf("worker: %v", err)
			}
		}()
	}
	waitDrained(t, NewRedisConsumer(r.client, RedisConsumerConfig{Stream: r.stream, Group: "g"}))
	cancel()
	wg.Wait()
}

var errCrash = errors.New("simulated crash")

// crashAfter returns an AfterApply hook that fails on the n-th batch: the
// worker stops after that batch's commit and before its XACK.
func crashAfter(n int) func(Message) error {
	seen := 0
	return func(Message) error {
		seen++
		if seen == n {
			return errCrash
		}
		return nil
	}
}

func TestWorkerCrashBetweenCommitAndAckCountsOnce(t *testing.T) {
	r := newWorkerRig(t)
	p := metering.NewRedisProducer(r.client, r.stream)
	want := publishBatches(t, p, 30)
	// A publish retried after a timeout that had in fact succeeded.
	dup := metering.Batch{Version: 1, ID: "prod:4", Rows: []metering.Row{row(at(t, "2026-11-20T10:04"), tA, kA, "GET /a", metering.Counts{Allowed: 5, AllowedUnits: 10})}}
	if err := p.Publish(context.Background(), dup); err != nil {
		t.Fatal(err)
	}

	first := r.worker("w1", time.Hour)
	first.AfterApply = crashAfter(7)
	if err := first.Run(context.Background()); !errors.Is(err, errCrash) {
		t.Fatalf("first worker: %v, want the simulated crash", err)
	}
	// It fetched 8 entries and applied them in one transaction; the
	// crash came before any XACK.
	if s := first.Stats(); s.Applied != 8 {
		t.Fatalf("first worker applied %d, want 8", s.Applied)
	}
	// Two new workers take over w1's unacknowledged entries (XAUTOCLAIM
	// once idle) and the rest of the stream.
	second, third := r.worker("w2", 100*time.Millisecond), r.worker("w3", 100*time.Millisecond)
	r.runWorkers(t, second, third)

	got := sums(t, r.db, "usage_minute")[tA+"/"+kA]
	if got != want {
		t.Errorf("minute totals %+v, want %+v", got, want)
	}
	if m := sums(t, r.db, "usage_month")[tA+"/"+kA]; m != want {
		t.Errorf("month totals %+v, want %+v", m, want)
	}
	// At least the 8 unacknowledged and the re-published one are
	// duplicates; on a slow machine a batch may outlast the claim idle
	// time and be claimed by the other worker too, which the totals above
	// show costs nothing.
	s2, s3 := second.Stats(), third.Stats()
	if s2.Applied+s3.Applied != 22 || s2.Duplicates+s3.Duplicates < 9 {
		t.Errorf("after the crash: applied %d, duplicates %d; want 22 and at least 9 (the 8 unacknowledged, the re-published one)",
			s2.Applied+s3.Applied, s2.Duplicates+s3.Duplicates)
	}
}

func TestWorkerRestartTakesBackItsOwnEntries(t *testing.T) {
	r := newWorkerRig(t)
	want := publishBatches(t, metering.NewRedisProducer(r.client, r.stream), 12)
	w := r.worker("w", time.Hour)
	w.AfterApply = crashAfter(3)
	if err := w.Run(context.Background()); !errors.Is(err, errCrash) {
		t.Fatalf("worker: %v", err)
	}
	// Same name, claim idle of an hour: only reading its own pending
	// entries first lets the restarted worker finish now.
	restarted := r.worker("w", time.Hour)
	r.runWorkers(t, restarted)
	if got := sums(t, r.db, "usage_hour")[tA+"/"+kA]; got != want {
		t.Errorf("totals %+v, want %+v", got, want)
	}
	if s := restarted.Stats(); s.Applied != 4 || s.Duplicates != 8 {
		t.Errorf("restarted worker %+v, want 4 applied and 8 duplicates (its first fetch)", s)
	}
}

func TestWorkerSetsAsideEntriesThatAreNotBatches(t *testing.T) {
	r := newWorkerRig(t)
	ctx := context.Background()
	if err := r.client.XAdd(ctx, &redis.XAddArgs{Stream: r.stream, Values: []any{"batch", "{not json"}}).Err(); err != nil {
		t.Fatal(err)
	}
	want := publishBatches(t, metering.NewRedisProducer(r.client, r.stream), 2)
	w := r.worker("w", time.Hour)
	r.runWorkers(t, w)
	if got := sums(t, r.db, "usage_minute")[tA+"/"+kA]; got != want {
		t.Errorf("totals %+v, want %+v", got, want)
	}
	var n int
	if err := r.db.QueryRow(ctx, `SELECT count(*) FROM usage_bad_batches WHERE payload = '{not json'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("bad batches %d (err %v), want 1", n, err)
	}
	if s := w.Stats(); s.SetAside != 1 || s.Applied != 2 {
		t.Errorf("stats %+v", s)
	}
}

func TestStreamOnRedisCluster(t *testing.T) {
	client, prefix := testenv.RedisCluster(t)
	db := testenv.DB(t)
	r := &workerRig{client: client, stream: prefix + "usage", db: db,
		store: NewStore(db, StoreConfig{Now: fixedNow("2026-11-22T12:00:00Z")})}
	want := publishBatches(t, metering.NewRedisProducer(client, r.stream), 5)
	r.runWorkers(t, r.worker("w", time.Hour))
	if got := sums(t, db, "usage_day")[tA+"/"+kA]; got != want {
		t.Errorf("totals %+v, want %+v", got, want)
	}
}

// TestWorkerSetsAsideBatchesPostgresRefuses: a batch that decodes but
// whose data Postgres refuses with a data exception (simulated by a
// trigger) is set aside; the batches fetched with it are applied, and the
// stream keeps moving.
func TestWorkerSetsAsideBatchesPostgresRefuses(t *testing.T) {
	r := newWorkerRig(t)
	p := metering.NewRedisProducer(r.client, r.stream)
	ctx := context.Background()
	poisonResource(t, r)
	testenv.Must(t, p.Publish(ctx, metering.Batch{Version: 1, ID: "poison:1",
		Rows: []metering.Row{row(at(t, "2026-11-20T10:00"), tB, kB, "GET /poison", metering.Counts{Allowed: 1, AllowedUnits: 1})}}))
	want := publishBatches(t, p, 3)
	w := r.worker("w", time.Hour)
	r.runWorkers(t, w)
	if got := sums(t, r.db, "usage_minute")[tA+"/"+kA]; got != want {
		t.Errorf("totals %+v, want %+v", got, want)
	}
	var n int
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT count(*) FROM usage_bad_batches WHERE error LIKE '%refused%'`).Scan(&n))
	if n != 1 {
		t.Errorf("%d batches set aside as refused, want 1", n)
	}
	if s := w.Stats(); s.SetAside != 1 || s.Applied != 3 {
		t.Errorf("stats %+v, want 1 set aside and 3 applied", s)
	}
}

// TestWorkerLagMetrics: the backlog gauges count the batches not yet
// applied and the age of the oldest, and fall to 0 once the worker has
// caught up.
func TestWorkerLagMetrics(t *testing.T) {
	r := newWorkerRig(t)
	w := r.worker("c1", time.Minute)
	reg := prometheus.NewRegistry()
	w.Register(reg)
	gauge := func(name string) (float64, bool) {
		t.Helper()
		v, _, ok := testenv.Metric(t, reg, name)
		return v, ok
	}
	if v, ok := gauge("tollgate_usage_backlog_batches"); !ok || v != 0 {
		t.Fatalf("empty stream: backlog %v (reported %v), want 0", v, ok)
	}
	publishBatches(t, metering.NewRedisProducer(r.client, r.stream), 3)
	if v, _ := gauge("tollgate_usage_backlog_batches"); v != 3 {
		t.Errorf("backlog %v, want 3", v)
	}
	if age, ok := gauge("tollgate_usage_backlog_age_seconds"); !ok || age < 0 || age > 60 {
		t.Errorf("backlog age %v (reported %v), want a few seconds at most", age, ok)
	}
	r.runWorkers(t, w)
	if v, _ := gauge("tollgate_usage_backlog_batches"); v != 0 {
		t.Errorf("after the worker: backlog %v, want 0", v)
	}
	if age, _ := gauge("tollgate_usage_backlog_age_seconds"); age != 0 {
		t.Errorf("after the worker: age %v, want 0", age)
	}
}

// TestWorkerAppliesUsagePastARowsBound: in one flush, an api process's
// aggregator counts a tenant's check and 1,100 denials of the largest
// cost the check API accepts (1e9) from one anonymous caller: more units
// than one row may count (2^40). Every unit reaches Postgres once, the
// tenant's too, and nothing is set aside.
func TestWorkerAppliesUsagePastARowsBound(t *testing.T) {
	r := newWorkerRig(t)
	ctx := context.Background()
	const cost, denials = 1_000_000_000, 1_100
	atUS := at(t, "2026-11-20T10:00") * 1_000_000
	agg := metering.NewAggregator(metering.AggregatorConfig{Producer: metering.NewRedisProducer(r.client, r.stream), ProducerID: "p"})
	agg.Record(tollgate.UsageEvent{AtUS: atUS, TenantID: tA, KeyID: kA, Tier: tollgate.TierAuthenticated, Resource: "GET /a",
		Cost: 5, Allowed: true, Reason: tollgate.ReasonOK})
	for range denials {
		agg.Record(tollgate.UsageEvent{AtUS: atUS + 1, Tier: tollgate.TierAnonymous, IP: "203.0.113.9", Resource: "GET /a",
			Cost: cost, Reason: tollgate.ReasonRateLimited, Denied: []string{"hourly"}})
	}
	testenv.Must(t, agg.Flush(ctx))
	w := r.worker("w", time.Hour)
	r.runWorkers(t, w)
	want := map[string]metering.Counts{tA + "/" + kA: {Allowed: 1, AllowedUnits: 5},
		NilUUID + "/" + NilUUID: {Denied: denials, DeniedUnits: denials * cost}}
	for _, table := range []string{"usage_minute", "usage_month"} {
		if got := sums(t, r.db, table); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %v, want %v", table, got, want)
		}
	}
	var ip metering.Counts
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT sum(denied), sum(denied_units) FROM usage_anon_ip_minute WHERE ip = '203.0.113.9'`).
		Scan(&ip.Denied, &ip.DeniedUnits))
	if ip != want[NilUUID+"/"+NilUUID] {
		t.Errorf("the address's usage %+v, want %+v", ip, want[NilUUID+"/"+NilUUID])
	}
	if s := w.Stats(); s.SetAside != 0 || s.Applied < 1 {
		t.Errorf("stats %+v, want batches applied and none set aside", s)
	}
	if n := setAsides(t, r.db); n != 0 {
		t.Errorf("%d batches set aside, want none", n)
	}
}

// setAsides counts the records of usage_bad_batches.
func setAsides(t *testing.T, db *pgxpool.Pool) int {
	t.Helper()
	var n int
	testenv.Must(t, db.QueryRow(context.Background(), `SELECT count(*) FROM usage_bad_batches`).Scan(&n))
	return n
}

// TestWorkerSetsAsideBadRowsAlone: a batch holding a row over a row's
// bound (from an api process older than the bound's split) and a row
// whose tenant is not a UUID is applied without them, under its ID: the
// two rows alone are set aside, with their reasons, under the entry's
// ID and /refused; the worker logs that at error level and counts it in
// tollgate_usage_batches_set_aside_total. The batches around it apply.
func TestWorkerSetsAsideBadRowsAlone(t *testing.T) {
	r := newWorkerRig(t)
	ctx := context.Background()
	p := metering.NewRedisProducer(r.client, r.stream)
	minute := at(t, "2026-11-20T10:00")
	good := row(minute, tA, kA, "GET /a", metering.Counts{Allowed: 2, AllowedUnits: 4})
	huge := row(minute, tB, kB, "GET /a", metering.Counts{Denied: 1_100, DeniedUnits: 1_100_000_000_000})
	notUUID := row(minute, "tenant-b", kB, "GET /a", metering.Counts{Allowed: 1})
	testenv.Must(t, p.Publish(ctx, metering.Batch{Version: 1, ID: "old:1", Rows: []metering.Row{good, huge, notUUID}}))
	want := publishBatches(t, p, 2)
	want.Add(good.Counts)

	w, logs, reg := r.watched("w")
	r.runWorkers(t, w)

	if got := sums(t, r.db, "usage_month"); len(got) != 1 || got[tA+"/"+kA] != want {
		t.Errorf("month totals %v, want %s/%s's %+v alone", got, tA, kA, want)
	}
	var rowCount int
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT row_count FROM usage_batches WHERE batch_id = 'old:1'`).Scan(&rowCount))
	if rowCount != 1 {
		t.Errorf("batch old:1 recorded with %d rows, want the good one", rowCount)
	}
	var entryID, payload, reason string
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT entry_id, payload, error FROM usage_bad_batches`).Scan(&entryID, &payload, &reason))
	var set metering.Batch
	testenv.Must(t, json.Unmarshal([]byte(payload), &set))
	if !strings.HasSuffix(entryID, "/refused") || set.ID != "old:1" || len(set.Rows) != 2 || set.Rows[0] != huge || set.Rows[1] != notUUID {
		t.Errorf("set aside %s: %+v, want batch old:1's two bad rows", entryID, set)
	}
	if !strings.Contains(reason, "rows[1]: counts above 1099511627776") || !strings.Contains(reason, `rows[2]: tenant ID "tenant-b"`) {
		t.Errorf("reason %q, want both rows named", reason)
	}
	if s := w.Stats(); s.Applied != 3 || s.PartlySetAside != 1 || s.SetAside != 0 {
		t.Errorf("stats %+v, want 3 applied, 1 of them partly set aside", s)
	}
	if v, _, _ := testenv.Metric(t, reg, "tollgate_usage_batches_set_aside_total"); v != 1 {
		t.Errorf("tollgate_usage_batches_set_aside_total = %v, want 1", v)
	}
	type logLine struct {
		Level, Msg, Entry, Batch string
		Rows                     int
	}
	var line logLine
	for l := range strings.Lines(logs.String()) {
		if line = (logLine{}); json.Unmarshal([]byte(l), &line) == nil && line.Level == "ERROR" {
			break
		}
	}
	if line.Level != "ERROR" || line.Entry != strings.TrimSuffix(entryID, "/refused") || line.Batch != "old:1" || line.Rows != 2 {
		t.Errorf("logged %+v, want an error naming the entry, batch old:1 and its 2 rows set aside\n%s", line, logs.String())
	}
}

// TestWorkerCountsEachClaimOnceWhenOneByOneFails: a fetch of three
// journal claims whose data Postgres refuses together is applied claim by
// claim: the first applies, the second is refused (set aside), and the
// connection fails on the third (a deadlock, simulated by a trigger on
// usage_hour that fails once), so the worker tries the fetch again. Each
// claim is counted once, as what happened to it: two applied journals,
// the first not found a duplicate of itself on the retry, and one set
// aside.
func TestWorkerCountsEachClaimOnceWhenOneByOneFails(t *testing.T) {
	r := newJournalRig(t)
	ctx := context.Background()
	poisonResource(t, r.workerRig)
	_, err := r.db.Exec(ctx, `CREATE SEQUENCE flaky_tries;
		CREATE FUNCTION flaky() RETURNS trigger AS $$
		BEGIN
			IF NEW.resource = 'GET /flaky' THEN
				IF nextval('flaky_tries') = 1 THEN
					RAISE EXCEPTION 'deadlock' USING ERRCODE = '40P01';
				END IF;
			END IF;
			RETURN NEW;
		END $$ LANGUAGE plpgsql;
		CREATE TRIGGER flaky BEFORE INSERT ON usage_hour FOR EACH ROW EXECUTE FUNCTION flaky();`)
	testenv.Must(t, err)
	check := journaledCheck
	tags := statekey.Tags()[10:13] // claimed, and handed on, in this order
	for i, raw := range []string{check(tA, kA, "GET /a", "3"), check(tB, kB, "GET /poison", "4"), check(tA, kA, "GET /flaky", "5")} {
		testenv.Must(t, r.client.Append(ctx, statekey.JournalKey(r.prefix, tags[i]), raw).Err())
	}
	w := r.journalWorker(8)
	reg := prometheus.NewRegistry()
	w.Register(reg)
	r.drainJournals(t, w, tags...)
	if got := sums(t, r.db, "usage_month"); len(got) != 1 || got[tA+"/"+kA] != (metering.Counts{Allowed: 2, AllowedUnits: 8}) {
		t.Errorf("totals %v, want %s/%s's two checks", got, tA, kA)
	}
	if n := setAsides(t, r.db); n != 1 {
		t.Errorf("%d set aside, want 1", n)
	}
	if s := w.Stats(); s.Applied != 2 || s.Journals != 2 || s.Duplicates != 0 || s.SetAside != 1 || s.Errors < 1 {
		t.Errorf("stats %+v, want 2 claims applied, 2 journals, no duplicate, 1 set aside, the failure counted", s)
	}
	for name, want := range map[string]float64{"tollgate_usage_batches_applied_total": 2, "tollgate_usage_journals_applied_total": 2,
		"tollgate_usage_batches_duplicate_total": 0, "tollgate_usage_batches_set_aside_total": 1} {
		if v, _, _ := testenv.Metric(t, reg, name); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
}

// failingAcks is a Consumer whose first acknowledgements fail, as when
// the connection to Redis drops between the worker's commit and its
// XACK; the rest go to the consumer it wraps.
type failingAcks struct {
	Consumer
	fails int
}

func (f *failingAcks) Ack(ctx context.Context, ids ...string) error {
	if f.fails > 0 {
		f.fails--
		return errors.New("simulated: connection lost before the acknowledgement")
	}
	return f.Consumer.Ack(ctx, ids...)
}

// TestWorkerCountsEachEntryOnceWhenTheAckFails: the acknowledgement of a
// fetch applied entry by entry (a batch Postgres refuses among them)
// fails twice. The worker acknowledges again without applying or
// counting the fetch again: the batch applied counts once as applied
// (not once more as a duplicate), the one set aside once.
func TestWorkerCountsEachEntryOnceWhenTheAckFails(t *testing.T) {
	r := newWorkerRig(t)
	ctx := context.Background()
	poisonResource(t, r)
	p := metering.NewRedisProducer(r.client, r.stream)
	want := publishBatches(t, p, 1)
	testenv.Must(t, p.Publish(ctx, metering.Batch{Version: 1, ID: "poison:1",
		Rows: []metering.Row{row(at(t, "2026-11-20T10:00"), tB, kB, "GET /poison", metering.Counts{Allowed: 1, AllowedUnits: 1})}}))
	w := r.worker("w", time.Hour)
	w.Consumer = &failingAcks{Consumer: w.Consumer, fails: 2}
	applied := 0
	w.AfterApply = func(Message) error { applied++; return nil }
	reg := prometheus.NewRegistry()
	w.Register(reg)
	r.runWorkers(t, w)
	if got := sums(t, r.db, "usage_minute"); len(got) != 1 || got[tA+"/"+kA] != want {
		t.Errorf("totals %v, want %s/%s's %+v alone", got, tA, kA, want)
	}
	if s := w.Stats(); s.Applied != 1 || s.Duplicates != 0 || s.SetAside != 1 || s.Errors != 2 {
		t.Errorf("stats %+v, want 1 applied, no duplicate, 1 set aside, the 2 failed acknowledgements", s)
	}
	if v, _, _ := testenv.Metric(t, reg, "tollgate_usage_batches_set_aside_total"); v != 1 {
		t.Errorf("tollgate_usage_batches_set_aside_total = %v, want 1", v)
	}
	if applied != 2 {
		t.Errorf("AfterApply ran %d times, want once for each of the 2 entries", applied)
	}
}

// badBatch is a record of usage_bad_batches.
type badBatch struct{ entryID, payload, reason string }

// badBatches returns the records of usage_bad_batches, by entry ID.
func badBatches(t *testing.T, db *pgxpool.Pool) []badBatch {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT entry_id, payload, error FROM usage_bad_batches ORDER BY entry_id`)
	testenv.Must(t, err)
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (badBatch, error) {
		var b badBatch
		return b, row.Scan(&b.entryID, &b.payload, &b.reason)
	})
	testenv.Must(t, err)
	return list
}

// entryIDs returns the IDs of the stream's entries, oldest first.
func (r *workerRig) entryIDs(t *testing.T) []string {
	t.Helper()
	entries, err := r.client.XRange(context.Background(), r.stream, "-", "+").Result()
	testenv.Must(t, err)
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return ids
}

// TestWorkerSetsAsideABatchPostgresRefusesOnce: a batch holding a row
// validation refuses (over a row's bound) and a row Postgres refuses
// (a data exception, simulated by a trigger) is set aside whole, once:
// one record under its entry ID, its payload the batch as published,
// every row of it once, and its reason naming both; no record of its
// refused parts besides, which would hold the refused row a second time
// (and one an earlier release wrote before applying the batch goes). The
// batch fetched with it applies.
func TestWorkerSetsAsideABatchPostgresRefusesOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		// earlier writes the record of the refused parts as a release
		// that wrote it before the batch's apply did.
		earlier bool
	}{
		{name: "refused parts"},
		{name: "refused parts recorded by an earlier release", earlier: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newWorkerRig(t)
			ctx := context.Background()
			poisonResource(t, r)
			p := metering.NewRedisProducer(r.client, r.stream)
			minute := at(t, "2026-11-20T10:00")
			good := row(minute, tB, kB, "GET /b", metering.Counts{Allowed: 2, AllowedUnits: 4})
			huge := row(minute, tB, kB, "GET /a", metering.Counts{Denied: 1_100, DeniedUnits: 1_100_000_000_000})
			poison := row(minute, tB, kB, "GET /poison", metering.Counts{Allowed: 1, AllowedUnits: 1})
			b := metering.Batch{Version: 1, ID: "mixed:1", Rows: []metering.Row{good, huge, poison}}
			testenv.Must(t, p.Publish(ctx, b))
			want := publishBatches(t, p, 1)
			entry := r.entryIDs(t)[0]
			if tc.earlier {
				_, refused, err := metering.SplitBatch(mustJSON(t, b))
				testenv.Must(t, err)
				testenv.Must(t, r.store.SetAside(ctx, entry+"/refused", refused.Payload, refused.Err()))
			}

			w, logs, reg := r.watched("w")
			r.runWorkers(t, w)

			if got := sums(t, r.db, "usage_month"); len(got) != 1 || got[tA+"/"+kA] != want {
				t.Errorf("month totals %v, want %s/%s's %+v alone", got, tA, kA, want)
			}
			list := badBatches(t, r.db)
			if len(list) != 1 || list[0].entryID != entry {
				t.Fatalf("set aside %+v, want entry %s alone, whole", list, entry)
			}
			var set metering.Batch
			testenv.Must(t, json.Unmarshal([]byte(list[0].payload), &set))
			if set.ID != b.ID || fmt.Sprint(set.Rows) != fmt.Sprint(b.Rows) {
				t.Errorf("set aside %+v, want batch %s as published, each row once", set, b.ID)
			}
			if reason := list[0].reason; !strings.Contains(reason, "Postgres refused") || !strings.Contains(reason, "rows[1]: counts above 1099511627776") {
				t.Errorf("reason %q, want Postgres's refusal and the row validation refused", reason)
			}
			if s := w.Stats(); s.Applied != 1 || s.SetAside != 1 || s.PartlySetAside != 0 {
				t.Errorf("stats %+v, want 1 applied and 1 set aside whole", s)
			}
			if v, _, _ := testenv.Metric(t, reg, "tollgate_usage_batches_set_aside_total"); v != 1 {
				t.Errorf("tollgate_usage_batches_set_aside_total = %v, want 1", v)
			}
			var errorLines []string
			for l := range strings.Lines(logs.String()) {
				var line struct {
					Level, Msg, Entry, Batch string
					Rows                     int
				}
				if json.Unmarshal([]byte(l), &line) == nil && line.Level == "ERROR" {
					errorLines = append(errorLines, l)
					if line.Entry != entry || line.Batch != b.ID || line.Rows != 3 || !strings.Contains(line.Msg, "none of it applied") {
						t.Errorf("logged %s, want entry %s, batch %s, its 3 rows set aside whole", l, entry, b.ID)
					}
				}
			}
			if len(errorLines) != 1 {
				t.Errorf("%d error lines, want 1:\n%s", len(errorLines), logs.String())
			}
		})
	}
}

// TestWorkerSetsAsideARepublishedBatchsPartsOnce: a batch holding a row
// validation refuses is in the stream twice (its XADD timed out after it
// had succeeded, and was retried), fetched together or apart. Its good
// row counts once, its refused row is set aside once, under the entry
// applied (the first), and the second entry is a duplicate, counted as
// nothing else.
func TestWorkerSetsAsideARepublishedBatchsPartsOnce(t *testing.T) {
	for _, fetch := range []int{8, 1} {
		t.Run(fmt.Sprintf("fetching %d", fetch), func(t *testing.T) {
			r := newWorkerRig(t)
			ctx := context.Background()
			p := metering.NewRedisProducer(r.client, r.stream)
			minute := at(t, "2026-11-20T10:00")
			good := row(minute, tA, kA, "GET /a", metering.Counts{Allowed: 2, AllowedUnits: 4})
			huge := row(minute, tB, kB, "GET /a", metering.Counts{Denied: 1_100, DeniedUnits: 1_100_000_000_000})
			b := metering.Batch{Version: 1, ID: "retried:1", Rows: []metering.Row{good, huge}}
			testenv.Must(t, p.Publish(ctx, b))
			testenv.Must(t, p.Publish(ctx, b))
			entries := r.entryIDs(t)

			w, _, reg := r.watched("w")
			w.FetchCount = fetch
			r.runWorkers(t, w)

			if got := sums(t, r.db, "usage_month"); len(got) != 1 || got[tA+"/"+kA] != good.Counts {
				t.Errorf("month totals %v, want %s/%s's %+v once", got, tA, kA, good.Counts)
			}
			list := badBatches(t, r.db)
			if len(list) != 1 || list[0].entryID != entries[0]+"/refused" {
				t.Fatalf("set aside %+v, want the refused row once, under %s/refused", list, entries[0])
			}
			var set metering.Batch
			testenv.Must(t, json.Unmarshal([]byte(list[0].payload), &set))
			if set.ID != b.ID || len(set.Rows) != 1 || set.Rows[0] != huge {
				t.Errorf("set aside %+v, want batch %s's refused row", set, b.ID)
			}
			if s := w.Stats(); s.Applied != 1 || s.Duplicates != 1 || s.PartlySetAside != 1 || s.SetAside != 0 {
				t.Errorf("stats %+v, want 1 applied (partly set aside) and 1 duplicate", s)
			}
			if v, _, _ := testenv.Metric(t, reg, "tollgate_usage_batches_set_aside_total"); v != 1 {
				t.Errorf("tollgate_usage_batches_set_aside_total = %v, want 1", v)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	testenv.Must(t, err)
	return data
}
