package usage

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/testenv"
)

// journalRig is a worker rig with a key prefix of the test's own, under
// which the limiter's Redis store journals the usage of the checks.
type journalRig struct {
	*workerRig
	prefix string
	limits *redisstore.Store
}

func newJournalRig(t *testing.T) *journalRig {
	r := newWorkerRig(t)
	_, prefix := testenv.Redis(t) // a prefix of this test's own
	return &journalRig{workerRig: r, prefix: prefix, limits: redisstore.New(r.client)}
}

// stateKey is the limiter state key of a caller (an API key ID or an
// address) under the rig's prefix, and the hash tag of its journal.
func (r *journalRig) stateKey(caller string) (key string, tag byte) {
	tag, short := statekey.Compact(caller)
	return string(statekey.AppendKey(nil, r.prefix, tag, [3]byte{1, 2, 3}, short[:], nil)), tag
}

// admit checks cost units on key at nowUS, journaling entry, and fails
// the test unless the check is admitted and recorded.
func (r *journalRig) admit(t *testing.T, key string, params limiter.Params, cost, nowUS int64, entry string) {
	t.Helper()
	out, err := r.limits.Check(context.Background(), limiter.Batch{Requests: []limiter.Request{{Key: key, Params: params}},
		Cost: cost, NowUS: nowUS, Usage: entry})
	if err != nil || !out.Admitted || !out.Recorded {
		t.Fatalf("check at %d: %+v %v", nowUS, out, err)
	}
}

// journalsLeft counts the journals and claims of the tags still in Redis.
func (r *journalRig) journalsLeft(ctx context.Context, tags ...byte) (int64, error) {
	var keys []string
	for _, tag := range tags {
		keys = append(keys, statekey.JournalKey(r.prefix, tag), statekey.ClaimedJournalKey(r.prefix, tag))
	}
	return r.client.Exists(ctx, keys...).Result()
}

// journalWorker is a worker of the rig's journals alone.
func (r *journalRig) journalWorker(fetchCount int) *Worker {
	return &Worker{Consumer: NewJournalConsumer(r.client, r.prefix, time.Millisecond), Store: r.store, FetchCount: fetchCount,
		RetryMax: 100 * time.Millisecond}
}

// bothWorker is a worker of the rig's journals and its stream, and the
// consumer of the stream.
func (r *journalRig) bothWorker() (*Worker, *RedisConsumer) {
	stream := NewRedisConsumer(r.client, RedisConsumerConfig{Stream: r.stream, Group: "g", Consumer: "w", Block: 50 * time.Millisecond})
	return &Worker{Consumer: Consumers{Journal: NewJournalConsumer(r.client, r.prefix, time.Millisecond), Stream: stream},
		Store: r.store, FetchCount: 8, RetryMax: 100 * time.Millisecond}, stream
}

// drainJournals runs w until the tags have nothing journaled or claimed
// left: every entry applied or set aside.
func (r *journalRig) drainJournals(t *testing.T, w *Worker, tags ...byte) {
	t.Helper()
	stop := startWorker(t, w)
	testenv.Eventually(t, time.Now(), 30*time.Second, "journals applied or set aside", func() (bool, string) {
		n, err := r.journalsLeft(context.Background(), tags...)
		return err == nil && n == 0, fmt.Sprintf("%d journals left (%v)", n, err)
	})
	stop()
}

// startWorker runs w until the test calls the stop it returns, which
// fails the test if Run ended with an error.
func startWorker(t *testing.T, w *Worker) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		testenv.Must(t, <-done)
	}
}

// journalField is one field of a journal as the check scripts write it:
// the name and the value, each after its length.
func journalField(f, v string) string { return fmt.Sprintf("%d:%s%d:%s", len(f), f, len(v), v) }

// journaledCheck is a journal's entry of one check of units on resource
// by a tenant's key, in the minute of 2026-11-20T10:00.
func journaledCheck(tenant, apiKey, resource, units string) string {
	return statekey.UsageEntry(tenant, apiKey, "authenticated", resource) + "1795168800" + fmt.Sprintf("%d:%s", len(units), units)
}

// TestJournalAppliedExactlyOnce: what the check scripts journaled (checks
// of several callers on several hash tags, a hold settled) reaches the
// usage tables once, through a worker that dies after its commit and
// before its Ack, and a second worker that takes over the same claims;
// claims made after the journals were applied find them gone.
func TestJournalAppliedExactlyOnce(t *testing.T) {
	r := newJournalRig(t)
	ctx := context.Background()
	gcra := limiter.Params{Algorithm: limiter.GCRA, Limit: 1000, PeriodUS: limiter.HourUS}
	now := at(t, "2026-11-20T10:00") * 1_000_000
	type caller struct{ tenant, key string }
	callers := []caller{{tA, kA}, {tB, kB}}
	want := map[string]metering.Counts{}
	for i, c := range callers {
		key, _ := r.stateKey(c.key)
		entry := statekey.UsageEntry(c.tenant, c.key, "authenticated", "GET /a")
		for n := range 10 + i {
			cost := int64(n%3 + (i * 2)) // some cost 0, some 1, some more
			r.admit(t, key, gcra, cost, now+int64(n)*limiter.MinuteUS, entry)
			w := want[c.tenant+"/"+c.key]
			w.Allowed++
			w.AllowedUnits += cost
			want[c.tenant+"/"+c.key] = w
		}
	}
	// A hold of the first caller: its decision at the check, its 7 units
	// at the settlement, retried.
	key, tag := r.stateKey(kA)
	hold := &limiter.Hold{ID: "h1", Key: statekey.HoldKey(r.prefix, tag, "h1"), TTLUS: limiter.HourUS,
		Usage: statekey.HoldUsage("00112233445566778899aabbccddeeff", "", statekey.UsageRow(tA, kA, "authenticated", "GET /a"))}
	if out, err := r.limits.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: key, Params: gcra}}, Cost: 20, Hold: hold,
		NowUS: now, Usage: statekey.UsageEntry(tA, kA, "authenticated", "GET /a")}); err != nil || !out.Recorded {
		t.Fatalf("hold: %+v %v", out, err)
	}
	for range 2 {
		if st, err := r.limits.Settle(ctx, limiter.Settle{Key: hold.Key, Cost: 7, NowUS: now + 1}); err != nil || !st.Recorded {
			t.Fatalf("settle: %+v %v", st, err)
		}
	}
	w := want[tA+"/"+kA]
	w.Allowed++
	w.AllowedUnits += 7
	want[tA+"/"+kA] = w

	first := r.journalWorker(1)
	first.AfterApply = crashAfter(1)
	if err := first.Run(ctx); !errors.Is(err, errCrash) {
		t.Fatalf("first worker: %v, want the simulated crash", err)
	}
	second := r.journalWorker(8)
	stop := startWorker(t, second)
	testenv.Eventually(t, time.Now(), 30*time.Second, "journals applied", func() (bool, string) {
		n, err := r.journalsLeft(ctx, tag)
		got := sums(t, r.db, "usage_minute")
		return err == nil && n == 0 && got[tA+"/"+kA] == want[tA+"/"+kA] && got[tB+"/"+kB] == want[tB+"/"+kB],
			"journals left or totals short"
	})
	stop()
	if s := second.Stats(); s.Duplicates != 1 || s.Journals != s.Applied || s.Journals < 1 {
		t.Errorf("second worker: %+v; want 1 duplicate (the claim the first applied and never acknowledged), and every batch it applied a journal", s)
	}
	for k, w := range want {
		if got := sums(t, r.db, "usage_month")[k]; got != w {
			t.Errorf("%s: month totals %+v, want %+v", k, got, w)
		}
	}
	// Nothing is left to claim.
	if msgs, err := NewJournalConsumer(r.client, r.prefix, time.Millisecond).Fetch(ctx, 100); err != nil || len(msgs) != 0 {
		t.Errorf("a claim after the apply: %d messages, %v", len(msgs), err)
	}
}

// TestJournalBatchRefusesWhatItCannotRead: a journal's entries add up by
// row and minute, one decision each, and read back as the rows and
// settlement they hold (a hold's entry once); an entry of another shape
// fails JournalBatch (the worker's SplitJournal sets it aside alone:
// TestJournalSetsAsideEntriesAlone).
func TestJournalBatchRefusesWhatItCannotRead(t *testing.T) {
	row, head := statekey.UsageRow(tA, kA, "authenticated", "GET /a"), statekey.UsageEntry(tA, kA, "authenticated", "GET /a")
	entry := journalField
	check := func(minute, units string) string {
		return head + minute + fmt.Sprintf("%d:%s", len(units), units)
	}
	hold := "1795168800\x007\x001\x00\x00" + row
	raw := check("1795168800", "3") + check("1795168800", "0") + check("1795168860", "0") +
		entry("s00112233445566778899aabbccddeeff", hold) + check("1795168800", "2") +
		entry("s00112233445566778899aabbccddeeff", "ignored: a hold counts once")
	b, err := metering.JournalBatch("journal:01:e:1", 0, raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rows) != 2 || b.Rows[0].Allowed != 3 || b.Rows[0].AllowedUnits != 5 || b.Rows[1].Allowed != 1 || b.Rows[1].AllowedUnits != 0 {
		t.Errorf("rows %+v", b.Rows)
	}
	if len(b.Settlements) != 1 || b.Settlements[0].Cost != 7 || !b.Settlements[0].Expired {
		t.Errorf("settlements %+v", b.Settlements)
	}
	for _, raw := range []string{
		entry("x", "1"),
		check("1795168800", "five"),
		entry("r"+"t\x00k\x001795168800", "1"),
		entry("s0011", "1795168800\x007"),
		"12:short",
		"x:1",
	} {
		if _, err := metering.JournalBatch("journal:01:e:1", 0, raw); err == nil {
			t.Errorf("%q: no error", raw)
		}
	}
}

// TestJournalClaimsOutliveARedisRewind: a Redis that goes back in time
// (restored from an older snapshot, its last second lost in a crash, a
// failover to a replica that lagged) rewinds the journals' claim sequence
// but not Postgres, where the claims applied since are recorded. The
// claims made after the rewind still get names of their own, so their
// usage counts; a claim the snapshot holds keeps its name, so that one
// applied before is known and counts once.
func TestJournalClaimsOutliveARedisRewind(t *testing.T) {
	r := newJournalRig(t)
	ctx := context.Background()
	gcra := limiter.Params{Algorithm: limiter.GCRA, Limit: 1000, PeriodUS: limiter.HourUS}
	now := at(t, "2026-11-20T10:00") * 1_000_000
	key, tag := r.stateKey(kA)
	var want metering.Counts
	journal := func(checks int, cost int64) {
		t.Helper()
		for range checks {
			r.admit(t, key, gcra, cost, now, statekey.UsageEntry(tA, kA, "authenticated", "GET /a"))
			want.Allowed++
			want.AllowedUnits += cost
		}
	}
	clock := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	consumer := NewJournalConsumer(r.client, r.prefix, time.Second)
	consumer.now = func() time.Time { return clock }
	// fetch is one of a worker's passes a second later: what it applied
	// (its IDs) and how many were duplicates.
	var applied []string
	duplicates := 0
	fetch := func() {
		t.Helper()
		clock = clock.Add(time.Second)
		msgs, err := consumer.Fetch(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		var batches []metering.Batch
		var ids []string
		for _, m := range msgs {
			if m.Err != nil {
				t.Fatalf("%s: %v", m.ID, m.Err)
			}
			batches = append(batches, m.Batch)
			ids = append(ids, m.ID)
		}
		res, err := r.store.ApplyAll(ctx, batches)
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range res {
			if x.Duplicate {
				duplicates++
			} else {
				applied = append(applied, ids[i])
			}
		}
		if err := consumer.Ack(ctx, ids...); err != nil {
			t.Fatal(err)
		}
	}
	// drain fetches until the tag has nothing journaled or claimed.
	drain := func() {
		t.Helper()
		for range 10 {
			fetch()
			if n, err := r.journalsLeft(ctx, tag); err != nil || n == 0 {
				return
			}
		}
		t.Fatal("the journal is never drained")
	}
	// The tag's journal, its claim and the claims' sequence, as a snapshot
	// of Redis holds them (nil: no such key).
	keys := []string{statekey.JournalKey(r.prefix, tag), statekey.ClaimedJournalKey(r.prefix, tag), statekey.JournalSeqKey(r.prefix, tag)}
	snapshot := func() []*string {
		t.Helper()
		state := make([]*string, len(keys))
		for i, k := range keys {
			v, err := r.client.Dump(ctx, k).Result()
			if err == redis.Nil {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			state[i] = &v
		}
		return state
	}
	restore := func(state []*string) {
		t.Helper()
		for i, k := range keys {
			r.client.Del(ctx, k)
			if state[i] != nil {
				if err := r.client.Restore(ctx, k, 0, *state[i]).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}

	journal(3, 2)
	drain()
	journal(2, 1)
	fetch() // claims it; it is handed on from the next fetch
	older := snapshot()
	drain()
	journal(4, 3)
	drain()
	if len(applied) != 3 || duplicates != 0 {
		t.Fatalf("before the rewind: applied %q, %d duplicates; want three claims applied", applied, duplicates)
	}
	restoredClaim := applied[1]

	// Redis goes back to the snapshot: the second claim is pending again,
	// and the sequence as it was then.
	restore(older)
	journal(5, 4)
	drain()
	if duplicates != 1 {
		t.Errorf("%d duplicates, want 1: the restored claim, applied before", duplicates)
	}
	if len(applied) != 4 || applied[3] == restoredClaim {
		t.Errorf("applied %q: want the claim made after the rewind applied under a name of its own", applied)
	}
	seen := map[string]bool{}
	for _, id := range applied {
		if seen[id] {
			t.Errorf("claim %s applied twice", id)
		}
		seen[id] = true
	}
	if got := sums(t, r.db, "usage_month")[tA+"/"+kA]; got != want {
		t.Errorf("month totals %+v, want %+v: every check journaled, once", got, want)
	}
}

// TestJournalPastItsCapCountsThroughTheStream: a tag's journal that
// nobody claimed has grown to the limiter store's cap (64 MiB): the
// checks admitted then are not journaled but answered not Recorded, so
// the api process's aggregator counts them and publishes them to the
// stream. Once the worker claims the journal, checks journal again. Every
// check counts once, and so does every entry the full journal held.
func TestJournalPastItsCapCountsThroughTheStream(t *testing.T) {
	r := newJournalRig(t)
	ctx := context.Background()
	agg := metering.NewAggregator(metering.AggregatorConfig{Producer: metering.NewRedisProducer(r.client, r.stream)})
	gcra := limiter.Params{Algorithm: limiter.GCRA, Limit: 1000, PeriodUS: limiter.HourUS}
	minute := at(t, "2026-11-20T10:00")
	key, tag := r.stateKey(kA)
	other := statekey.UsageEntry(tB, kB, "authenticated", "GET /b") + fmt.Sprintf("%010d", minute) + "1:1"
	full := (64<<20)/len(other) + 1
	if err := r.client.Set(ctx, statekey.JournalKey(r.prefix, tag), strings.Repeat(other, full), 0).Err(); err != nil {
		t.Fatal(err)
	}
	var want metering.Counts
	check := func(cost int64, recorded bool) {
		t.Helper()
		out, err := r.limits.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: key, Params: gcra}}, Cost: cost,
			NowUS: minute * 1_000_000, Usage: statekey.UsageEntry(tA, kA, "authenticated", "GET /a")})
		if err != nil || !out.Admitted || out.Recorded != recorded {
			t.Fatalf("check: %+v %v; want admitted, recorded %v", out, err, recorded)
		}
		agg.Record(tollgate.UsageEvent{AtUS: out.NowUS, TenantID: tA, KeyID: kA, Tier: tollgate.TierAuthenticated,
			Resource: "GET /a", Cost: cost, Allowed: true, Reason: tollgate.ReasonOK, Recorded: out.Recorded})
		want.Allowed++
		want.AllowedUnits += cost
	}
	w, _ := r.bothWorker()
	applied := func(what string) {
		t.Helper()
		if err := agg.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Now(), 60*time.Second, what, func() (bool, string) {
			got := sums(t, r.db, "usage_month")
			return got[tA+"/"+kA] == want && got[tB+"/"+kB].Allowed == int64(full),
				fmt.Sprintf("%+v of %+v, and %d of the full journal's %d", got[tA+"/"+kA], want, got[tB+"/"+kB].Allowed, full)
		})
	}

	for i := range 5 {
		check(int64(i+1), false) // past the cap
	}
	stop := startWorker(t, w)
	applied("the full journal and the checks past it")
	for i := range 3 {
		check(int64(i+1), true) // the journal was claimed
	}
	applied("the checks journaled again")
	stop()
	if s := agg.Stats(); s.Journaled != 3 || s.Recorded != 8 {
		t.Errorf("aggregator: %+v, want 8 decisions of which 3 journaled", s)
	}
}

// TestJournalAppliesRowsPastTheBound: 1,100 admitted checks of the
// largest cost the check API accepts (1e9), journaled by the check script
// in one minute, sum past what one row may count (2^40 units). The claim
// holding them, and another tenant's checks on the same hash tag, is
// applied whole, each unit once: the journal's reader splits the row
// rather than refuse the claim.
func TestJournalAppliesRowsPastTheBound(t *testing.T) {
	r := newJournalRig(t)
	ctx := context.Background()
	const cost, checks = 1_000_000_000, 1_100
	window := limiter.Params{Algorithm: limiter.FixedWindow, Limit: 2 * checks * cost, PeriodUS: limiter.HourUS}
	now := at(t, "2026-11-20T10:00") * 1_000_000
	key, tag := r.stateKey(kA)
	check := func(n int, tenant, apiKey string, cost int64) {
		r.admit(t, key, window, cost, now+int64(n), statekey.UsageEntry(tenant, apiKey, "authenticated", "GET /a"))
	}
	for n := range checks {
		check(n, tA, kA, cost)
	}
	for n := range 3 {
		check(checks+n, tB, kB, 5)
	}
	want := map[string]metering.Counts{tA + "/" + kA: {Allowed: checks, AllowedUnits: checks * cost},
		tB + "/" + kB: {Allowed: 3, AllowedUnits: 15}}

	w := r.journalWorker(0)
	stop := startWorker(t, w)
	testenv.Eventually(t, time.Now(), 30*time.Second, "journal applied", func() (bool, string) {
		n, err := r.journalsLeft(ctx, tag)
		got := sums(t, r.db, "usage_minute")
		return err == nil && n == 0 && fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("journals left %d, totals %v", n, got)
	})
	stop()
	if got := sums(t, r.db, "usage_month"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("month totals %v, want %v", got, want)
	}
	if s := w.Stats(); s.Journals != 1 || s.SetAside != 0 {
		t.Errorf("stats %+v, want one journal applied, nothing set aside", s)
	}
	if n := setAsides(t, r.db); n != 0 {
		t.Errorf("%d set aside, want none", n)
	}
}

// TestJournalSetsAsideEntriesAlone: a claimed journal's entries that
// cannot be applied (a row whose tenant is not a UUID, a field of no
// known kind) are set aside alone, in the journal's form, and the rest of
// the claim is applied; a journal that cannot be read at all is set
// aside whole, with the separators Postgres text cannot hold escaped, and
// blocks nothing.
func TestJournalSetsAsideEntriesAlone(t *testing.T) {
	r := newJournalRig(t)
	ctx := context.Background()
	entry := journalField
	check := func(tenant, apiKey string, units string) string {
		return journaledCheck(tenant, apiKey, "GET /a", units)
	}
	good, unreadable := statekey.Tags()[10], statekey.Tags()[11]
	badRow := check("tenant-b", kB, "7")
	testenv.Must(t, r.client.Append(ctx, statekey.JournalKey(r.prefix, good),
		check(tA, kA, "3")+badRow+entry("x", "1")+check(tA, kA, "2")).Err())
	testenv.Must(t, r.client.Append(ctx, statekey.JournalKey(r.prefix, unreadable), check(tB, kB, "1")+"12:short").Err())

	w := r.journalWorker(0)
	r.drainJournals(t, w, good, unreadable)
	if got := sums(t, r.db, "usage_minute"); len(got) != 1 || got[tA+"/"+kA] != (metering.Counts{Allowed: 2, AllowedUnits: 5}) {
		t.Errorf("totals %v, want %s/%s's two checks alone", got, tA, kA)
	}
	rows, err := r.db.Query(ctx, `SELECT entry_id, payload, error FROM usage_bad_batches ORDER BY entry_id`)
	testenv.Must(t, err)
	type setAside struct{ entryID, payload, reason string }
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (setAside, error) {
		var s setAside
		return s, row.Scan(&s.entryID, &s.payload, &s.reason)
	})
	testenv.Must(t, err)
	escaped := func(s string) string { return strings.ReplaceAll(s, "\x00", `\x00`) }
	if len(list) != 2 {
		t.Fatalf("set aside %+v, want the good tag's bad entries and the unreadable journal", list)
	}
	parts, whole := list[0], list[1]
	if !strings.HasPrefix(parts.entryID, "journal:"+hex.EncodeToString([]byte{good})+":") || !strings.HasSuffix(parts.entryID, "/refused") ||
		parts.payload != escaped(badRow+entry("x", "1")) ||
		!strings.Contains(parts.reason, `tenant ID "tenant-b" is not a UUID`) || !strings.Contains(parts.reason, `unknown field "x"`) {
		t.Errorf("entries set aside %+v, want the bad row's and the unknown field's", parts)
	}
	if !strings.HasPrefix(whole.entryID, "journal:"+hex.EncodeToString([]byte{unreadable})+":") || strings.HasSuffix(whole.entryID, "/refused") ||
		whole.payload != escaped(check(tB, kB, "1")+"12:short") || !strings.Contains(whole.reason, "no length-prefixed part") {
		t.Errorf("journal set aside %+v, want the unreadable one whole", whole)
	}
	if s := w.Stats(); s.PartlySetAside != 1 || s.SetAside != 1 || s.Journals != 1 {
		t.Errorf("stats %+v, want one journal applied with parts set aside, one set aside whole", s)
	}
}

// TestJournaledAnonymousHoldCountsOnceByIP: an anonymous caller's hold,
// journaled by the check script and by settle.lua, its settlement
// answered twice (the client's retry, repeated), counts under the
// caller's address as it counts in the anonymous tier's rows, and as a
// keyed tenant's hold counts in its rows: one decision at the check, the
// settled units once. The api process records each answer as the
// checker does (enforce: the check's decision, then one event per
// settlement answer with the store's Recorded).
func TestJournaledAnonymousHoldCountsOnceByIP(t *testing.T) {
	r := newJournalRig(t)
	ctx := context.Background()
	agg := metering.NewAggregator(metering.AggregatorConfig{Producer: metering.NewRedisProducer(r.client, r.stream), ProducerID: "p"})
	gcra := limiter.Params{Algorithm: limiter.GCRA, Limit: 1000, PeriodUS: limiter.HourUS}
	now := at(t, "2026-11-20T10:00") * 1_000_000
	const ip, resource = "192.0.2.7", "POST /v1/complete"
	key, tag := r.stateKey(ip)
	entry := statekey.UsageEntry("", "", tollgate.TierAnonymous, resource)
	hold := &limiter.Hold{ID: "h1", Key: statekey.HoldKey(r.prefix, tag, "h1"), TTLUS: limiter.HourUS,
		Usage: statekey.HoldUsage("00112233445566778899aabbccddeeff", ip, statekey.EntryRow(entry))}
	out, err := r.limits.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: key, Params: gcra}}, Cost: 20, Hold: hold,
		NowUS: now, Usage: entry})
	if err != nil || !out.Admitted || !out.Recorded {
		t.Fatalf("hold: %+v %v", out, err)
	}
	agg.Record(tollgate.UsageEvent{AtUS: out.NowUS, Tier: tollgate.TierAnonymous, IP: ip, Resource: resource, Cost: 20,
		Allowed: true, Reason: tollgate.ReasonOK, Hold: tollgate.HoldOpened, Recorded: out.Recorded})
	for range 2 {
		st, err := r.limits.Settle(ctx, limiter.Settle{Key: hold.Key, Cost: 7, NowUS: now + 1})
		if err != nil || !st.Recorded {
			t.Fatalf("settle: %+v %v", st, err)
		}
		agg.Record(tollgate.UsageEvent{AtUS: st.OpenedUS, Tier: tollgate.TierAnonymous, IP: ip, Resource: resource, Cost: st.Cost,
			Allowed: true, Reason: tollgate.ReasonOK, Hold: tollgate.HoldSettled, HoldHash: "00112233445566778899aabbccddeeff",
			Recorded: st.Recorded})
	}
	testenv.Must(t, agg.Flush(ctx))

	w, stream := r.bothWorker()
	stop := startWorker(t, w)
	want := metering.Counts{Allowed: 1, AllowedUnits: 7}
	testenv.Eventually(t, time.Now(), 30*time.Second, "journal and stream applied", func() (bool, string) {
		n, err := r.journalsLeft(ctx, tag)
		entries, pending, lerr := stream.Backlog(ctx)
		got := sums(t, r.db, "usage_minute")[NilUUID+"/"+NilUUID]
		return err == nil && lerr == nil && n == 0 && entries == 0 && pending == 0 && got == want,
			fmt.Sprintf("journals left %d, stream %d/%d, anonymous %+v", n, entries, pending, got)
	})
	stop()
	var byIP metering.Counts
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT coalesce(sum(allowed), 0), coalesce(sum(denied), 0),
		coalesce(sum(allowed_units), 0), coalesce(sum(denied_units), 0) FROM usage_anon_ip_minute WHERE ip = $1`, ip).
		Scan(&byIP.Allowed, &byIP.Denied, &byIP.AllowedUnits, &byIP.DeniedUnits))
	if byIP != want {
		t.Errorf("usage of %s: %+v, want %+v: the hold's decision and its settled units, once", ip, byIP, want)
	}
	for _, table := range []string{"usage_minute", "usage_month"} {
		if got := sums(t, r.db, table)[NilUUID+"/"+NilUUID]; got != want {
			t.Errorf("%s: anonymous %+v, want %+v", table, got, want)
		}
	}
}

// poisonResource makes Postgres refuse, with a data exception (simulated
// by a trigger on usage_minute), every row of the resource GET /poison.
func poisonResource(t *testing.T, r *workerRig) {
	t.Helper()
	_, err := r.db.Exec(context.Background(), `CREATE FUNCTION poison() RETURNS trigger AS $$
		BEGIN
			IF NEW.resource = 'GET /poison' THEN
				RAISE EXCEPTION 'refused' USING ERRCODE = '22023';
			END IF;
			RETURN NEW;
		END $$ LANGUAGE plpgsql;
		CREATE TRIGGER poison BEFORE INSERT ON usage_minute FOR EACH ROW EXECUTE FUNCTION poison();`)
	testenv.Must(t, err)
}

// TestJournalClaimPostgresRefusesKeepsItsPayload: a journal claim whose
// data Postgres refuses is set aside whole, as a stream entry Postgres
// refuses is, with what it claimed as its payload (the separators
// escaped), so that `admin usage set-aside --payload` shows it; the claim
// of another tag fetched with it applies.
func TestJournalClaimPostgresRefusesKeepsItsPayload(t *testing.T) {
	r := newJournalRig(t)
	ctx := context.Background()
	poisonResource(t, r.workerRig)
	check := journaledCheck
	good, refused := statekey.Tags()[10], statekey.Tags()[11]
	poisoned := check(tB, kB, "GET /poison", "4") + check(tB, kB, "GET /b", "1")
	testenv.Must(t, r.client.Append(ctx, statekey.JournalKey(r.prefix, good), check(tA, kA, "GET /a", "3")).Err())
	testenv.Must(t, r.client.Append(ctx, statekey.JournalKey(r.prefix, refused), poisoned).Err())

	w := r.journalWorker(8)
	r.drainJournals(t, w, good, refused)
	if got := sums(t, r.db, "usage_minute"); len(got) != 1 || got[tA+"/"+kA] != (metering.Counts{Allowed: 1, AllowedUnits: 3}) {
		t.Errorf("totals %v, want %s/%s's check alone", got, tA, kA)
	}
	var entryID, payload, reason string
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT entry_id, payload, error FROM usage_bad_batches`).Scan(&entryID, &payload, &reason))
	if want := strings.ReplaceAll(poisoned, "\x00", `\x00`); payload != want {
		t.Errorf("set aside with payload %q, want the claimed journal %q", payload, want)
	}
	if !strings.HasPrefix(entryID, "journal:"+hex.EncodeToString([]byte{refused})+":") || strings.HasSuffix(entryID, "/refused") ||
		!strings.Contains(reason, "Postgres refused") {
		t.Errorf("set aside %s (%s), want the refused tag's claim whole", entryID, reason)
	}
	if s := w.Stats(); s.SetAside != 1 || s.Applied != 1 || s.Journals != 1 {
		t.Errorf("stats %+v, want one claim applied and one set aside", s)
	}
}
