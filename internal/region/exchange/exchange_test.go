package exchange

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/testenv"
)

const prefix = "tg:"

// exchangeRegion is one region of TestExchange: its Redis, its store and
// its exchanger, which the test may stop and start again.
type exchangeRegion struct {
	name   string
	rdb    *redis.Client
	store  *redisstore.Store
	cfg    region.Config
	stop   func()
	logOut *testenv.LogBuffer
	// rules are the rebalancer's global_split windows (nil: none runs).
	rules map[[3]byte]SplitRule
	x     *Exchanger
}

func (r *exchangeRegion) start(t *testing.T) {
	t.Helper()
	nc, err := Dial(r.cfg, 5*time.Second)
	testenv.Must(t, err)
	cfg := Config{Region: r.cfg, Prefix: prefix, Log: slog.New(slog.NewTextHandler(io.MultiWriter(r.logOut), nil))}
	if r.rules != nil {
		cfg.SplitRules = func(context.Context) (map[[3]byte]SplitRule, error) { return r.rules, nil }
	}
	x, err := New(r.rdb, nc, cfg)
	testenv.Must(t, err)
	r.x = x
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); x.Run(ctx) }()
	r.stop = func() { cancel(); <-done; nc.Close() }
}

// startExchange starts the bed and an exchanger per region, with a
// rebalancer of rules when not nil.
func startExchange(t *testing.T, delay time.Duration, rules map[[3]byte]SplitRule) (*testenv.Regions, map[string]*exchangeRegion) {
	t.Helper()
	names := []string{"us", "eu", "ap"}
	bed := testenv.StartRegions(t, delay, names...)
	regions := map[string]*exchangeRegion{}
	for _, br := range bed.Regions {
		rdb := redis.NewClient(&redis.Options{Addr: br.Redis.Addr()})
		t.Cleanup(func() { rdb.Close() })
		r := &exchangeRegion{name: br.Name, rdb: rdb, store: redisstore.New(rdb), logOut: &testenv.LogBuffer{}, rules: rules,
			cfg: region.Config{Name: br.Name, Names: names, NATSURL: br.NATSURL, ExchangeInterval: 50 * time.Millisecond,
				RebalanceInterval: region.DefaultRebalanceInterval}}
		r.start(t)
		t.Cleanup(func() {
			r.stop()
			if t.Failed() {
				t.Logf("exchanger %s:\n%s", r.name, r.logOut.String())
			}
		})
		regions[br.Name] = r
	}
	for _, r := range regions {
		testenv.WaitFor(t, 60*time.Second, "region "+r.name+" hearing from every other region", func() bool {
			for _, other := range names {
				r.x.mu.Lock()
				seen := r.x.lastSeen[other]
				r.x.mu.Unlock()
				if other != r.name && seen.IsZero() {
					return false
				}
			}
			return true
		})
	}
	return bed, regions
}

// count returns the units a fixed window's state counts now.
func count(t *testing.T, r *exchangeRegion, key string) int64 {
	t.Helper()
	n, err := r.rdb.HGet(context.Background(), key, "count").Int64()
	if err == redis.Nil {
		return 0
	}
	testenv.Must(t, err)
	return n
}

// hourly is a global_shared fixed window of an hour that never binds.
var hourly = limiter.Params{Algorithm: limiter.FixedWindow, Limit: 1_000_000, PeriodUS: limiter.HourUS, Exchange: true}

// admit admits n checks of key on the hourly window in region r, one by
// one; a denial or an error fails the test.
func admit(t *testing.T, r *exchangeRegion, key string, n int) {
	t.Helper()
	for range n {
		o, err := r.store.Check(context.Background(), limiter.Batch{Requests: []limiter.Request{{Key: key, Params: hourly}}, Cost: 1})
		testenv.Must(t, err)
		if !o.Admitted {
			t.Fatalf("%s: denied", r.name)
		}
	}
}

// converged waits until every region of in counts want on key's window.
func converged(t *testing.T, in []*exchangeRegion, key string, want int64, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, time.Now(), within, fmt.Sprintf("counting %d", want), func() (bool, string) {
		got := map[string]int64{}
		all := true
		for _, r := range in {
			got[r.name] = count(t, r, key)
			all = all && got[r.name] == want
		}
		return all, fmt.Sprint(got)
	})
}

// all returns the regions of m.
func all(m map[string]*exchangeRegion) []*exchangeRegion {
	var rs []*exchangeRegion
	for _, r := range m {
		rs = append(rs, r)
	}
	return rs
}

// TestExchange: admissions on a global_shared rule in each region reach
// the others' states exactly once — through a restart of an exchanger
// that published but had not cleared its claim, and through a partition
// (the cut-off region keeps deciding, and its admissions and the others'
// arrive once it is back).
func TestExchange(t *testing.T) {
	bed, regions := startExchange(t, 20*time.Millisecond, nil)
	ctx := context.Background()
	tag := byte('a')
	key := string(statekey.AppendKey(nil, prefix, tag, [3]byte{1, 2, 3}, []byte("tenat"), nil))
	var wg sync.WaitGroup
	for _, r := range regions {
		wg.Go(func() { admit(t, r, key, 40) })
	}
	wg.Wait()
	converged(t, all(regions), key, 120, 20*time.Second)

	// A claim published again after its acknowledgement (a crash
	// between the publication and the clearing of the claim; a
	// redelivery) is applied once: the receivers skip its sequence.
	us := regions["us"]
	us.stop()
	admit(t, us, key, 5)
	testenv.Must(t, us.rdb.Rename(ctx, statekey.OutboxKey(prefix, tag), statekey.ClaimedKey(prefix, tag)).Err())
	seq, err := us.rdb.Incr(ctx, prefix+"regions:seq").Result()
	testenv.Must(t, err)
	claimed := statekey.ClaimedKey(prefix, tag)
	testenv.Must(t, us.rdb.HSet(ctx, claimed, "#", seq).Err())
	fields, err := us.rdb.HGetAll(ctx, claimed).Result()
	testenv.Must(t, err)
	us.start(t)
	converged(t, all(regions), key, 125, 20*time.Second)
	nc, err := Dial(us.cfg, 5*time.Second)
	testenv.Must(t, err)
	defer nc.Close()
	var again tagBatch
	again.Tag = tag
	for f := range fields {
		if f != "#" {
			again.Debits = append(again.Debits, debit{Field: []byte(f), Units: 5})
		}
	}
	body, err := json.Marshal(message{Region: "us", Seq: seq, AtUS: time.Now().UnixMicro(), Tags: []tagBatch{again}})
	testenv.Must(t, err)
	js, err := jetstream.New(nc)
	testenv.Must(t, err)
	_, err = js.Publish(ctx, Subject("us"), body) // no message ID: JetStream keeps it
	testenv.Must(t, err)
	admit(t, us, key, 1)
	converged(t, all(regions), key, 126, 20*time.Second)

	// A partition (its routes reset; the scenarios of test/regions
	// and bed_test.go drop what passes instead): every side keeps
	// deciding; after it heals, every region counts everything once.
	bed.Disconnect("ap")
	admit(t, regions["ap"], key, 7)
	admit(t, regions["eu"], key, 3)
	// us counting eu's admissions says the exchange has run since both
	// sides admitted; neither side has counted the other's.
	converged(t, []*exchangeRegion{regions["us"]}, key, 129, 10*time.Second)
	if got := count(t, regions["ap"], key); got != 133 {
		t.Errorf("ap during the partition: %d, want 133 (its own, not eu's)", got)
	}
	if got := count(t, regions["us"], key); got != 129 {
		t.Errorf("us during the partition: %d, want 129 (eu's, not ap's)", got)
	}
	bed.Heal("ap")
	converged(t, all(regions), key, 136, 30*time.Second)

	// A partition that drops what passes, as a cut network does: the
	// readers' fetch requests wait in it and reach the other side when
	// it heals, after their clients gave up on them, and take the
	// messages waiting there to nobody. Each region still counts every
	// admission once, and soon (not after the consumers' acknowledgement
	// wait, 30 s; without the reader's restart at a gap, never: the later
	// messages applied first made the earlier ones skipped).
	bed.Partition("ap")
	for range 4 {
		admit(t, regions["ap"], key, 2)
		admit(t, regions["us"], key, 1)
		time.Sleep(300 * time.Millisecond) // fault injection: the partition lasts
	}
	bed.Heal("ap")
	converged(t, all(regions), key, 148, 10*time.Second)
}

// TestSequencesOutliveAnEmptyRedis: a region whose Redis comes back
// empty (its sequence counter lost with the rest) goes on with
// sequences above those the other regions applied, so they count what
// it admits after, not skip it as already applied.
func TestSequencesOutliveAnEmptyRedis(t *testing.T) {
	_, regions := startExchange(t, 20*time.Millisecond, nil)
	ctx := context.Background()
	us := regions["us"]
	key := string(statekey.AppendKey(nil, prefix, 'z', [3]byte{3, 2, 1}, []byte("tenat"), nil))
	others := []*exchangeRegion{regions["eu"], regions["ap"]}
	admit(t, us, key, 10)
	converged(t, others, key, 10, 15*time.Second)
	testenv.Must(t, us.rdb.FlushAll(ctx).Err()) // fault injection: the data lost, the scripts kept
	admit(t, us, key, 7)
	converged(t, others, key, 17, 15*time.Second)
}

// TestSettlementsReachTheOtherRegions: a hold on a global_shared window
// counts its estimate in every region; settled below it, or expired
// and given back, every region counts what was settled; settled above
// it, the excess too.
func TestSettlementsReachTheOtherRegions(t *testing.T) {
	_, regions := startExchange(t, 20*time.Millisecond, nil)
	ctx := context.Background()
	us := regions["us"]
	tag := byte('h')
	key := string(statekey.AppendKey(nil, prefix, tag, [3]byte{6, 6, 6}, []byte("tenat"), nil))
	hold := func(id string, estimate int64) string {
		t.Helper()
		hkey := prefix + "{" + string(tag) + "}hold:" + id
		o, err := us.store.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: key, Params: hourly}}, Cost: estimate,
			Hold: &limiter.Hold{ID: id, Key: hkey, TTLUS: limiter.SecondUS}})
		testenv.Must(t, err)
		if !o.Admitted {
			t.Fatal("denied")
		}
		return hkey
	}
	a, b, c := hold("a", 10), hold("b", 10), hold("c", 10)
	converged(t, all(regions), key, 30, 15*time.Second)
	_, err := us.store.Settle(ctx, limiter.Settle{Key: a, Cost: 3})
	testenv.Must(t, err)
	_, err = us.store.Settle(ctx, limiter.Settle{Key: b, Cost: 25})
	testenv.Must(t, err)
	converged(t, all(regions), key, 3+25+10, 15*time.Second)
	// c expires unsettled and is given back (no charge on expiry).
	testenv.WaitFor(t, 10*time.Second, "hold c expiring", func() bool {
		_, err := us.store.Settle(ctx, limiter.Settle{Key: c, Expire: true})
		return err == nil
	})
	converged(t, all(regions), key, 3+25, 15*time.Second)
}

// TestAFailedApplyHoldsBackTheTagsLaterSequences: of two messages of a
// region that debit states of one hash tag, the first fails to apply in
// another region (its state is not a hash there); the second is not
// applied meanwhile, since apply.lua would then skip the first as
// applied: once the state is repaired, both count there.
func TestAFailedApplyHoldsBackTheTagsLaterSequences(t *testing.T) {
	_, regions := startExchange(t, 0, nil)
	ctx := context.Background()
	us, eu := regions["us"], regions["eu"]
	tag := byte('b')
	first := string(statekey.AppendKey(nil, prefix, tag, [3]byte{4, 5, 6}, []byte("first"), nil))
	second := string(statekey.AppendKey(nil, prefix, tag, [3]byte{4, 5, 7}, []byte("second"), nil))
	// us's admissions, published by hand as two messages: its exchanger
	// stopped, its outbox read and emptied.
	us.stop()
	admit(t, us, first, 5)
	admit(t, us, second, 3)
	outbox := statekey.OutboxKey(prefix, tag)
	fields, err := us.rdb.HGetAll(ctx, outbox).Result()
	testenv.Must(t, err)
	testenv.Must(t, us.rdb.Del(ctx, outbox).Err())
	testenv.Must(t, eu.rdb.Set(ctx, first, "not a hash", 0).Err())
	js := jetStreamOf(t, us.cfg)
	for _, key := range []string{first, second} {
		var tb tagBatch
		tb.Tag = tag
		for f, v := range fields {
			if _, k, _ := splitField([]byte(f)); k == key {
				n, _ := strconv.ParseInt(v, 10, 64)
				tb.Debits = append(tb.Debits, debit{Field: []byte(f), Units: n})
			}
		}
		seq, err := us.rdb.Incr(ctx, prefix+"regions:seq").Result()
		testenv.Must(t, err)
		body, err := json.Marshal(message{Region: "us", Seq: seq, AtUS: time.Now().UnixMicro(), Tags: []tagBatch{tb}})
		testenv.Must(t, err)
		_, err = js.Publish(ctx, Subject("us"), body)
		testenv.Must(t, err)
	}
	converged(t, []*exchangeRegion{regions["ap"]}, second, 3, 20*time.Second)
	testenv.WaitFor(t, 20*time.Second, "eu failing to apply the first message", func() bool {
		return strings.Contains(eu.logOut.String(), "WRONGTYPE")
	})
	if got := count(t, eu, second); got != 0 {
		t.Errorf("eu applied the second message while the first failed: %d", got)
	}
	testenv.Must(t, eu.rdb.Del(ctx, first).Err())
	converged(t, []*exchangeRegion{eu, regions["ap"]}, first, 5, 20*time.Second)
	converged(t, []*exchangeRegion{eu, regions["ap"]}, second, 3, 20*time.Second)
}

// TestLargeOutboxesGoOutInParts: an outbox that grew past what a claim
// takes (the exchange held up; here the limits made small) goes out over
// several claims, and a sequence's claims over several messages, each of
// whole hash tags: the other regions count every admission once.
func TestLargeOutboxesGoOutInParts(t *testing.T) {
	_, regions := startExchange(t, 0, nil)
	ctx := context.Background()
	us := regions["us"]
	us.stop()
	defer func(fields, budget int) { claimFields, messageBudget = fields, budget }(claimFields, messageBudget)
	claimFields, messageBudget = 7, 1000
	nc, err := Dial(us.cfg, 5*time.Second)
	testenv.Must(t, err)
	defer nc.Close()
	x, err := New(us.rdb, nc, Config{Region: us.cfg, Prefix: prefix})
	testenv.Must(t, err)
	testenv.Must(t, x.setup(ctx))
	js, err := jetstream.New(nc)
	testenv.Must(t, err)
	stream, err := js.Stream(ctx, Stream("us"))
	testenv.Must(t, err)
	messages := func() uint64 {
		info, err := stream.Info(ctx)
		testenv.Must(t, err)
		return info.State.Msgs
	}

	var keys []string
	for i := range 60 {
		tag := "cde"[i%3]
		keys = append(keys, string(statekey.AppendKey(nil, prefix, tag, [3]byte{9, 9, byte(i)}, []byte("tenant"), nil)))
	}
	for i, key := range keys {
		admit(t, us, key, 1+i%4)
	}
	before := messages()
	_, err = x.send(ctx, false)
	testenv.Must(t, err)
	if n := messages() - before; n < 2 {
		t.Errorf("one claim of 3 tags × 7 fields went out in %d messages, want several under a budget of %d bytes", n, messageBudget)
	}
	for _, tag := range []byte("cde") {
		if n, err := us.rdb.HLen(ctx, statekey.OutboxKey(prefix, tag)).Result(); err != nil || n != 20-7 {
			t.Errorf("tag %c's outbox after one claim: %d fields (%v), want 13 left of 20", tag, n, err)
		}
	}
	for range 3 {
		_, err = x.send(ctx, false)
		testenv.Must(t, err)
	}
	// An outbox Redis keeps as a hash table (more fields than a small
	// hash has), claimed in parts of 50.
	claimFields = 50
	var many []string
	for i := range 300 {
		many = append(many, string(statekey.AppendKey(nil, prefix, 'f', [3]byte{8, byte(i / 256), byte(i)}, []byte("tenant"), nil)))
		admit(t, us, many[i], 1)
	}
	_, err = x.send(ctx, false)
	testenv.Must(t, err)
	if n, err := us.rdb.HLen(ctx, statekey.OutboxKey(prefix, 'f')).Result(); err != nil || n != 250 {
		t.Errorf("a hash table outbox after one claim: %d fields (%v), want 250 left of 300", n, err)
	}
	for range 5 {
		_, err = x.send(ctx, false)
		testenv.Must(t, err)
	}
	for _, key := range many {
		converged(t, []*exchangeRegion{regions["eu"], regions["ap"]}, key, 1, 10*time.Second)
	}
	for i, key := range keys {
		converged(t, []*exchangeRegion{regions["eu"], regions["ap"]}, key, int64(1+i%4), 10*time.Second)
	}
}

// TestAGiveBackOfPassedSlotsFreesNothingElsewhere: a hold on a
// global_shared GCRA rule settled at 0 after its slots passed frees
// nothing in its region, and so nothing in the others: a region whose
// own callers used the burst since does not get it back.
func TestAGiveBackOfPassedSlotsFreesNothingElsewhere(t *testing.T) {
	_, regions := startExchange(t, 0, nil)
	ctx := context.Background()
	us, eu := regions["us"], regions["eu"]
	tag := byte('g')
	key := string(statekey.AppendKey(nil, prefix, tag, [3]byte{7, 7, 7}, []byte("tenant"), nil))
	marker := string(statekey.AppendKey(nil, prefix, tag, [3]byte{7, 7, 8}, []byte("tenant"), nil))
	gcra := limiter.Params{Algorithm: limiter.GCRA, Limit: 10, PeriodUS: 5 * limiter.SecondUS, Burst: 10, Exchange: true}
	check := func(r *exchangeRegion, b limiter.Batch) limiter.Outcome {
		t.Helper()
		b.Requests = []limiter.Request{{Key: key, Params: gcra}}
		o, err := r.store.Check(ctx, b)
		testenv.Must(t, err)
		return o
	}
	hkey := prefix + "{" + string(tag) + "}hold:late"
	if o := check(us, limiter.Batch{Cost: 10, Hold: &limiter.Hold{ID: "late", Key: hkey, TTLUS: 60 * limiter.SecondUS}}); !o.Admitted {
		t.Fatal("the hold was denied")
	}
	testenv.WaitFor(t, 10*time.Second, "eu counting the hold", func() bool {
		return eu.rdb.Exists(ctx, key).Val() == 1
	})
	// The hold's slots pass (the state expires with them) in both.
	testenv.WaitFor(t, 10*time.Second, "the hold's slots passing", func() bool {
		return us.rdb.Exists(ctx, key).Val() == 0 && eu.rdb.Exists(ctx, key).Val() == 0
	})
	used := time.Now()
	for i := range 10 {
		if o := check(eu, limiter.Batch{Cost: 1}); !o.Admitted {
			t.Fatalf("eu's own check %d of its burst denied", i+1)
		}
	}
	_, err := us.store.Settle(ctx, limiter.Settle{Key: hkey, Cost: 0})
	testenv.Must(t, err)
	admit(t, us, marker, 1) // after the settlement's give-back, in the same tag
	converged(t, []*exchangeRegion{eu}, marker, 1, 10*time.Second)
	// What eu has left is what refilled since its burst (one a 500 ms),
	// not the hold's 10 again.
	left := check(eu, limiter.Batch{Cost: 1, DryRun: true}).Results[0].Remaining
	refilled := int64(time.Since(used)/(500*time.Millisecond)) + 1
	if refilled >= 10 {
		t.Skipf("the exchange took %v: too slow to tell a give-back from the refill", time.Since(used))
	}
	if left > refilled {
		t.Errorf("eu after the late give-back: %d left, want at most the %d refilled since, not the hold's 10 again", left, refilled)
	}
}

// TestAFailedScriptLoadIsRetried: an exchanger that takes the lease
// while its Redis refuses to load the scripts (a failover's moment;
// here an ACL without SCRIPT LOAD) keeps trying, logs the outage, and
// exchanges once Redis takes them, rather than stopping for good.
func TestAFailedScriptLoadIsRetried(t *testing.T) {
	_, regions := startExchange(t, 0, nil)
	ctx := context.Background()
	us := regions["us"]
	us.stop()
	testenv.Must(t, us.rdb.Do(ctx, "ACL", "SETUSER", "exchanger", "on", ">secret", "~*", "&*", "+@all", "-script|load").Err())
	refused := redis.NewClient(&redis.Options{Addr: us.rdb.Options().Addr, Username: "exchanger", Password: "secret"})
	t.Cleanup(func() { refused.Close() })
	rdb := us.rdb
	us.rdb = refused
	us.start(t)
	us.rdb = rdb
	testenv.WaitFor(t, 20*time.Second, "Redis refusing the exchanger's script loads", func() bool {
		entries, err := us.rdb.Do(ctx, "ACL", "LOG").Slice()
		testenv.Must(t, err)
		return len(entries) > 0
	})
	time.Sleep(200 * time.Millisecond) // fault injection: the refusal lasts a few attempts
	testenv.Must(t, us.rdb.Do(ctx, "ACL", "SETUSER", "exchanger", "+script|load").Err())
	key := string(statekey.AppendKey(nil, prefix, 'l', [3]byte{1, 1, 1}, []byte("tenant"), nil))
	admit(t, us, key, 4)
	converged(t, []*exchangeRegion{regions["eu"], regions["ap"]}, key, 4, 30*time.Second)
	if !strings.Contains(us.logOut.String(), "loading the exchange's scripts) unavailable") {
		t.Errorf("the refused loads were not logged as an outage")
	}
}

// TestMessagesCarryTheirClaim: a message of admissions carries when its
// claim was made (claim.lua's '@', the sender's Redis's clock): no
// later than it was published, and no sooner than the admissions.
func TestMessagesCarryTheirClaim(t *testing.T) {
	_, regions := startExchange(t, 0, nil)
	ctx := context.Background()
	us := regions["us"]
	js := jetStreamOf(t, us.cfg)
	stream, err := js.Stream(ctx, Stream("us"))
	testenv.Must(t, err)
	info, err := stream.Info(ctx)
	testenv.Must(t, err)
	from := info.State.LastSeq + 1
	key := string(statekey.AppendKey(nil, prefix, 'm', [3]byte{2, 2, 2}, []byte("tenant"), nil))
	admitted := time.Now().UnixMicro()
	admit(t, us, key, 2)
	converged(t, []*exchangeRegion{regions["eu"]}, key, 2, 20*time.Second)
	info, err = stream.Info(ctx)
	testenv.Must(t, err)
	var found bool
	for seq := from; seq <= info.State.LastSeq; seq++ {
		raw, err := stream.GetMsg(ctx, seq)
		testenv.Must(t, err)
		var m message
		testenv.Must(t, json.Unmarshal(raw.Data, &m))
		if len(m.Tags) == 0 {
			continue
		}
		found = true
		if m.ClaimedUS < admitted || m.ClaimedUS > m.AtUS {
			t.Errorf("seq %d: claimed at %d, want between the admissions (%d) and the publication (%d)", m.Seq, m.ClaimedUS, admitted, m.AtUS)
		}
	}
	if !found {
		t.Errorf("no message of admissions among us's stream's %d to %d", from, info.State.LastSeq)
	}
}

// TestANewConsumerStartsAtTheStreamsEnd: a region reading another's
// stream for the first time (no consumer of it, nothing noted) starts at
// the stream's end, not replaying what the stream holds; a region whose
// consumer a restart deleted and did not make again (noted where it was)
// reads on from there, losing nothing.
func TestANewConsumerStartsAtTheStreamsEnd(t *testing.T) {
	_, regions := startExchange(t, 0, nil)
	ctx := context.Background()
	us, eu, ap := regions["us"], regions["eu"], regions["ap"]
	key := string(statekey.AppendKey(nil, prefix, 'n', [3]byte{3, 3, 3}, []byte("tenant"), nil))
	admit(t, us, key, 2)
	converged(t, []*exchangeRegion{eu, ap}, key, 2, 20*time.Second)
	eu.stop()
	ap.stop()
	js := jetStreamOf(t, us.cfg)
	// eu is new to us's stream; ap's consumer was deleted by a restart
	// that noted where it was.
	testenv.Must(t, js.DeleteConsumer(ctx, Stream("us"), "tollgate-eu"))
	testenv.Must(t, eu.rdb.HDel(ctx, prefix+"regions:read", "us").Err())
	cons, err := js.PushConsumer(ctx, Stream("us"), "tollgate-ap")
	testenv.Must(t, err)
	testenv.Must(t, ap.rdb.HSet(ctx, prefix+"regions:read", "us", cons.CachedInfo().AckFloor.Stream).Err())
	testenv.Must(t, js.DeleteConsumer(ctx, Stream("us"), "tollgate-ap"))
	admit(t, us, key, 5) // while eu and ap are away
	testenv.Eventually(t, time.Now(), 10*time.Second, "us publishing its admissions", func() (bool, string) {
		n, err := us.rdb.Exists(ctx, statekey.OutboxKey(prefix, 'n'), statekey.ClaimedKey(prefix, 'n')).Result()
		testenv.Must(t, err)
		return n == 0, fmt.Sprintf("%d outboxes left", n)
	})
	eu.start(t)
	ap.start(t)
	admit(t, us, key, 1)
	converged(t, []*exchangeRegion{ap}, key, 8, 20*time.Second)
	converged(t, []*exchangeRegion{eu}, key, 3, 20*time.Second)
}

// refusing returns a client of r's Redis as ACL user user, who may run
// every command but only on the exchanger's keys (the states and the
// records beside them, the lease, the sequence) and on the keys of
// more (ACL key patterns: "~key" to read and write, "%R~key" to read
// only): the region's read notes are refused unless more names them.
// grant(pattern) lets the user use one more pattern.
func refusing(t *testing.T, r *exchangeRegion, user string, more ...string) (client *redis.Client, grant func(pattern string)) {
	t.Helper()
	ctx := context.Background()
	args := []any{"ACL", "SETUSER", user, "on", ">secret", "&*", "+@all", "resetkeys",
		"~" + prefix + "{*", "~" + prefix + "regions:exchanger", "~" + prefix + "regions:seq"}
	for _, p := range more {
		args = append(args, p)
	}
	testenv.Must(t, r.rdb.Do(ctx, args...).Err())
	client = redis.NewClient(&redis.Options{Addr: r.rdb.Options().Addr, Username: user, Password: "secret"})
	t.Cleanup(func() { client.Close() })
	return client, func(pattern string) { testenv.Must(t, r.rdb.Do(ctx, "ACL", "SETUSER", user, pattern).Err()) }
}

// refusals returns how many of user's commands r's Redis refused.
func refusals(t *testing.T, r *exchangeRegion, user string) int64 {
	t.Helper()
	entries, err := r.rdb.ACLLog(context.Background(), 0).Result()
	testenv.Must(t, err)
	var n int64
	for _, e := range entries {
		if e.Username == user {
			n += e.Count
		}
	}
	return n
}

// startAs starts r's exchanger on client instead of r's own.
func (r *exchangeRegion) startAs(t *testing.T, client *redis.Client) {
	t.Helper()
	rdb := r.rdb
	r.rdb = client
	r.start(t)
	r.rdb = rdb
}

// TestAFailedRestartOfAReaderIsTriedAgain: a region that finds no
// consumer of a stream but a note of where it read it from makes the
// consumer again from there; when that fails halfway (here its Redis
// refuses to write the note), the worker keeps trying, without a reader
// that has no consumer (which used to bring the whole worker down at the
// next pass), and reads the stream on once it succeeds, the note then
// cleared.
func TestAFailedRestartOfAReaderIsTriedAgain(t *testing.T) {
	_, regions := startExchange(t, 0, nil)
	ctx := context.Background()
	us, eu := regions["us"], regions["eu"]
	eu.stop()
	js := jetStreamOf(t, us.cfg)
	cons, err := js.PushConsumer(ctx, Stream("us"), "tollgate-eu")
	testenv.Must(t, err)
	read := prefix + "regions:read"
	testenv.Must(t, eu.rdb.HSet(ctx, read, "us", cons.CachedInfo().AckFloor.Stream).Err())
	testenv.Must(t, js.DeleteConsumer(ctx, Stream("us"), "tollgate-eu"))

	client, grant := refusing(t, eu, "restarter", "%R~"+read)
	eu.startAs(t, client)
	testenv.Eventually(t, time.Now(), 20*time.Second, "eu's exchanger trying three times to note where it reads us's stream", func() (bool, string) {
		n := refusals(t, eu, "restarter")
		return n >= 3, fmt.Sprintf("%d refused", n)
	})
	grant("~" + read)
	key := string(statekey.AppendKey(nil, prefix, 'o', [3]byte{4, 4, 4}, []byte("tenant"), nil))
	admit(t, us, key, 3)
	converged(t, []*exchangeRegion{eu, regions["ap"]}, key, 3, 20*time.Second)
	if noted, err := eu.rdb.HExists(ctx, read, "us").Result(); err != nil || noted {
		t.Errorf("eu's note of us's stream once its consumer is made again: %v (%v), want it cleared", noted, err)
	}
}

// TestAStreamMadeAnewIsReadFromItsStart: a region whose stream was made
// anew (its NATS storage lost: sequences start again at 1) is read from
// its first message by a region that had noted a position in the old one
// (its consumer deleted to be made again, then gone with the stream),
// not from the old position, which the new stream would take its first
// 50,000 messages to reach.
func TestAStreamMadeAnewIsReadFromItsStart(t *testing.T) {
	_, regions := startExchange(t, 0, nil)
	ctx := context.Background()
	us, eu := regions["us"], regions["eu"]
	key := string(statekey.AppendKey(nil, prefix, 'p', [3]byte{5, 5, 5}, []byte("tenant"), nil))
	admit(t, us, key, 2)
	converged(t, []*exchangeRegion{eu}, key, 2, 20*time.Second)
	eu.stop()
	us.stop()
	read := prefix + "regions:read"
	testenv.Must(t, eu.rdb.HSet(ctx, read, "us", 50_000).Err())
	js := jetStreamOf(t, us.cfg)
	testenv.Must(t, js.DeleteStream(ctx, Stream("us"))) // fault injection: the stream's storage lost
	us.start(t)                                         // makes it anew
	admit(t, us, key, 5)
	testenv.Eventually(t, time.Now(), 10*time.Second, "us publishing its admissions on its new stream", func() (bool, string) {
		n, err := us.rdb.Exists(ctx, statekey.OutboxKey(prefix, 'p'), statekey.ClaimedKey(prefix, 'p')).Result()
		testenv.Must(t, err)
		return n == 0, fmt.Sprintf("%d outboxes left", n)
	})
	eu.start(t)
	converged(t, []*exchangeRegion{eu}, key, 7, 20*time.Second)
	if noted, err := eu.rdb.HExists(ctx, read, "us").Result(); err != nil || noted {
		t.Errorf("eu's note of us's stream once its consumer is made again: %v (%v), want it cleared", noted, err)
	}
	if !strings.Contains(eu.logOut.String(), "made anew") {
		t.Errorf("eu did not log that us's stream was made anew")
	}
}

// TestAStreamMadeAnewUnderARunningReader: a region's stream made anew
// while another region reads it (the reader's consumer gone with the old
// stream, which says so to nobody) is found out and read from its first
// message, by the reader that kept running; the new stream already holds
// more messages than the old one had when it went, so only its creation
// tells it apart.
func TestAStreamMadeAnewUnderARunningReader(t *testing.T) {
	_, regions := startExchange(t, 0, nil)
	ctx := context.Background()
	us, eu := regions["us"], regions["eu"]
	first := string(statekey.AppendKey(nil, prefix, 'p', [3]byte{6, 6, 6}, []byte("tenant"), nil))
	admit(t, us, first, 2)
	converged(t, []*exchangeRegion{eu}, first, 2, 20*time.Second)
	us.stop()
	js := jetStreamOf(t, us.cfg)
	testenv.Must(t, js.DeleteStream(ctx, Stream("us"))) // fault injection: the stream's storage lost
	us.start(t)                                         // makes it anew
	keys := make([]string, 6)
	for i := range keys {
		keys[i] = string(statekey.AppendKey(nil, prefix, 'p', [3]byte{7, 7, byte(i)}, []byte("tenant"), nil))
		admit(t, us, keys[i], i+1)
		testenv.Eventually(t, time.Now(), 10*time.Second, "us publishing its admissions on its new stream", func() (bool, string) {
			n, err := us.rdb.Exists(ctx, statekey.OutboxKey(prefix, 'p'), statekey.ClaimedKey(prefix, 'p')).Result()
			testenv.Must(t, err)
			return n == 0, fmt.Sprintf("%d outboxes left", n)
		})
	}
	for i, key := range keys {
		converged(t, []*exchangeRegion{eu}, key, int64(i+1), 20*time.Second)
	}
	if !strings.Contains(eu.logOut.String(), "consumer of a region's stream is gone") {
		t.Errorf("eu did not log that its consumer of us's stream was gone")
	}
}

// TestAStreamMadeAnewPastWhereItWasRead: a reader made again (restart)
// on a stream made anew since it read the old one starts from the new
// stream's first message, even once the new stream holds more messages
// than the old one had been read to: its creation tells it apart.
func TestAStreamMadeAnewPastWhereItWasRead(t *testing.T) {
	_, regions := startExchange(t, 0, nil)
	ctx := context.Background()
	us, eu := regions["us"], regions["eu"]
	key := string(statekey.AppendKey(nil, prefix, 'p', [3]byte{8, 8, 8}, []byte("tenant"), nil))
	admit(t, us, key, 2)
	converged(t, []*exchangeRegion{eu}, key, 2, 20*time.Second)
	eu.stop()
	nc, err := Dial(eu.cfg, 5*time.Second)
	testenv.Must(t, err)
	defer nc.Close()
	x, err := New(eu.rdb, nc, Config{Region: eu.cfg, Prefix: prefix, Log: slog.New(slog.NewTextHandler(eu.logOut, nil))})
	testenv.Must(t, err)
	rd, err := x.reader(ctx, "us")
	testenv.Must(t, err)
	if rd.applied == 0 {
		t.Fatalf("eu's reader of us's stream starts at 0, want past what it applied")
	}

	us.stop()
	js := jetStreamOf(t, us.cfg)
	testenv.Must(t, js.DeleteStream(ctx, Stream("us"))) // fault injection: the stream's storage lost
	us.start(t)                                         // makes it anew
	testenv.Eventually(t, time.Now(), 20*time.Second, "us's new stream passing where eu read the old one", func() (bool, string) {
		admit(t, us, key, 1)
		s, err := js.Stream(ctx, Stream("us"))
		if err != nil { // not made yet, or its servers still electing its leader
			return false, err.Error()
		}
		last := s.CachedInfo().State.LastSeq
		return last > rd.applied, fmt.Sprintf("last %d, read up to %d", last, rd.applied)
	})
	testenv.Must(t, x.restart(ctx, rd))
	if rd.applied != 0 {
		t.Errorf("reading us's new stream after %d, want from its first message", rd.applied)
	}
}

// TestReportsAreOrderedBySequence: a region's rebalance reports are
// taken in the order of their messages' sequences, whatever the clock
// of the worker that sent each: after a failover to a worker whose
// clock is behind, its reports replace the last one (they used to be
// dropped as older until its clock caught up); a report of an older
// sequence arriving after a newer one is still dropped.
func TestReportsAreOrderedBySequence(t *testing.T) {
	_, regions := startExchange(t, 0, nil)
	ctx := context.Background()
	us, eu := regions["us"], regions["eu"]
	js := jetStreamOf(t, us.cfg)
	next := func() int64 {
		seq, err := seqScript.Run(ctx, us.rdb, []string{prefix + "regions:seq"}).Int64()
		testenv.Must(t, err)
		return seq
	}
	publish := func(seq int64, r demandReport) {
		t.Helper()
		body, err := json.Marshal(message{Region: "us", Seq: seq, AtUS: time.Now().UnixMicro(), Demand: &r})
		testenv.Must(t, err)
		_, err = js.Publish(ctx, Subject("us"), body)
		testenv.Must(t, err)
	}
	line := func(name string) keyDemand {
		return keyDemand{Key: []byte(prefix + "{r}" + name), Demand: 1, Allotment: 2}
	}
	holds := func(want ...string) func() (bool, string) {
		return func() (bool, string) {
			eu.x.mu.Lock()
			defer eu.x.mu.Unlock()
			r := eu.x.reports["us"]
			if r == nil {
				return false, "no report"
			}
			var got []string
			for _, kd := range r.Keys {
				got = append(got, strings.TrimPrefix(string(kd.Key), prefix+"{r}"))
			}
			return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprint(got)
		}
	}
	// A worker whose clock is an hour ahead, then, after a failover, one
	// whose clock is right, its report in two parts.
	first := next()
	publish(first, demandReport{ID: time.Now().Add(time.Hour).UnixMicro(), Keys: []keyDemand{line("ahead")}})
	testenv.Eventually(t, time.Now(), 10*time.Second, "eu holding the first worker's report", holds("ahead"))
	behind, now := next(), time.Now().UnixMicro()
	publish(behind, demandReport{ID: now, Part: 0, Parts: 2, Keys: []keyDemand{line("behind-0")}})
	publish(behind, demandReport{ID: now, Part: 1, Parts: 2, Keys: []keyDemand{line("behind-1")}})
	testenv.Eventually(t, time.Now(), 10*time.Second, "eu holding the report of the worker whose clock is behind", holds("behind-0", "behind-1"))
	// The first worker's report again (a redelivery, a paused worker):
	// older by its sequence, dropped.
	publish(first, demandReport{ID: time.Now().Add(2 * time.Hour).UnixMicro(), Keys: []keyDemand{line("stale")}})
	marker := string(statekey.AppendKey(nil, prefix, 'r', [3]byte{6, 6, 7}, []byte("tenant"), nil))
	admit(t, us, marker, 1) // applied after the stale report
	converged(t, []*exchangeRegion{eu}, marker, 1, 10*time.Second)
	if ok, got := holds("behind-0", "behind-1")(); !ok {
		t.Errorf("eu's report of us after an older sequence's report: %s, want the newer kept", got)
	}
}

// jetStreamOf connects to cfg's NATS for a test's own JetStream calls,
// until the test ends.
func jetStreamOf(t *testing.T, cfg region.Config) jetstream.JetStream {
	t.Helper()
	nc, err := Dial(cfg, 5*time.Second)
	testenv.Must(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	testenv.Must(t, err)
	return js
}
