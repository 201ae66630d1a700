package exchange

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/backoff"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/testenv"
)

// fakeMsg is a fetched message: its data, its stream sequence, and
// whether it was acknowledged or negatively acknowledged.
type fakeMsg struct {
	jetstream.Msg
	data     []byte
	stream   uint64
	ack, nak bool
}

func (m *fakeMsg) Data() []byte { return m.data }
func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.stream}}, nil
}
func (m *fakeMsg) Ack() error { m.ack = true; return nil }
func (m *fakeMsg) Nak() error { m.nak = true; return nil }

// TestApplyFetched: the messages of a fetch, applied many a pipeline, are
// applied in their order and each once (a sequence applied before is
// skipped), and acknowledged; a message that cannot be decoded is
// negatively acknowledged and the others applied; a message past a gap
// of the stream (its predecessor delivered to nobody) is not applied
// until the gap's message is; when Redis fails, no message is
// acknowledged (each is negatively acknowledged, to be delivered again)
// and the error is returned.
func TestApplyFetched(t *testing.T) {
	rdb, p := testenv.Redis(t)
	ctx := context.Background()
	testenv.Must(t, applyScript.Load(ctx, rdb).Err())
	newExchanger := func(rdb redis.UniversalClient) *Exchanger {
		return &Exchanger{cfg: Config{Region: region.Config{Name: "eu", Names: []string{"us", "eu"}}, Prefix: p}, rdb: rdb,
			metrics: NewMetrics(), log: slog.New(slog.DiscardHandler), lastSeen: map[string]time.Time{}, lags: map[string]*lagWindow{}, reports: map[string]*demandReport{},
			sources: map[string]*backoff.Monitor{"us": backoff.NewMonitor(backoff.MonitorConfig{})}}
	}
	tag := byte('q')
	key := string(statekey.AppendKey(nil, p, tag, [3]byte{7, 7, 7}, []byte("tenant"), nil))
	// A fixed window of an hour, the units in the current one.
	now := time.Now().UnixMicro()
	start := now - now%3_600_000_000
	field := fmt.Sprintf("4 128 1000 3600000000 0 %d %d %s", start, start+3_600_000_000, key)
	// msg is the message of sequence seq, stream sequence stream.
	msg := func(stream uint64, seq int64, units int64) *fakeMsg {
		body, err := json.Marshal(message{Region: "us", Seq: seq, AtUS: now,
			Tags: []tagBatch{{Tag: tag, Debits: []debit{{Field: []byte(field), Units: units}}}}})
		testenv.Must(t, err)
		return &fakeMsg{data: body, stream: stream}
	}
	rd := &reader{source: "us"}
	fetch := func(x *Exchanger, msgs ...*fakeMsg) error {
		ch := make(chan jetstream.Msg, len(msgs))
		for _, m := range msgs {
			ch <- m
		}
		close(ch)
		return x.applyFetched(ctx, rd, ch)
	}
	counted := func() int64 {
		n, err := rdb.HGet(ctx, key, "count").Int64()
		if err == redis.Nil {
			return 0
		}
		testenv.Must(t, err)
		return n
	}

	x := newExchanger(rdb)
	first := []*fakeMsg{msg(1, 1, 1), msg(2, 2, 10), {data: []byte("not json"), stream: 3}, msg(4, 3, 100)}
	testenv.Must(t, fetch(x, first...))
	if got := counted(); got != 111 {
		t.Errorf("after seq 1 to 3: %d counted, want 111", got)
	}
	for i, m := range first {
		if want := i != 2; m.ack != want || m.nak == want {
			t.Errorf("message %d: ack %v nak %v, want ack %v", i, m.ack, m.nak, want)
		}
	}
	// Delivered again (an acknowledgement lost), with a new one.
	again := []*fakeMsg{msg(2, 2, 10), msg(4, 3, 100), msg(5, 4, 1000)}
	testenv.Must(t, fetch(x, again...))
	if got := counted(); got != 1111 {
		t.Errorf("after seq 2 to 4 again: %d counted, want 1111 (2 and 3 once)", got)
	}
	for i, m := range again {
		if !m.ack || m.nak {
			t.Errorf("message %d again: ack %v nak %v, want acknowledged", i, m.ack, m.nak)
		}
	}

	// Stream sequence 6 went to nobody; 7 comes first: not applied (its
	// tags would then skip 6 for good) until 6 is.
	late := msg(7, 6, 20000)
	if err := fetch(x, late); !errors.Is(err, errGap) {
		t.Fatalf("a message past a gap: %v, want errGap", err)
	}
	if got := counted(); got != 1111 || late.ack || !late.nak {
		t.Errorf("past a gap: %d counted, ack %v nak %v; want 1111, only nak", got, late.ack, late.nak)
	}
	testenv.Must(t, fetch(x, msg(6, 5, 10000), msg(7, 6, 20000)))
	if got := counted(); got != 31111 {
		t.Errorf("after the gap's message: %d counted, want 31111", got)
	}

	down := redis.NewClient(&redis.Options{Addr: testenv.FreeAddr(t), MaxRetries: -1})
	t.Cleanup(func() { down.Close() })
	lost := []*fakeMsg{msg(8, 7, 1), msg(9, 8, 1)}
	if err := fetch(newExchanger(down), lost...); err == nil {
		t.Errorf("Redis down: no error")
	}
	for i, m := range lost {
		if m.ack || !m.nak {
			t.Errorf("Redis down, message %d: ack %v nak %v, want only nak", i, m.ack, m.nak)
		}
	}
}

// TestLagWindow: the lag metric is the largest of the current second and
// the one before, so a slow message followed by fast ones is still seen,
// and forgotten after two seconds.
func TestLagWindow(t *testing.T) {
	var w lagWindow
	at := time.Unix(100, 0)
	for _, step := range []struct {
		after time.Duration
		lag   float64
		want  float64
	}{
		{0, 0.05, 0.05},
		{100 * time.Millisecond, 0.30, 0.30},  // a slow one
		{200 * time.Millisecond, 0.05, 0.30},  // still seen
		{1100 * time.Millisecond, 0.05, 0.30}, // the second before
		{2200 * time.Millisecond, 0.06, 0.06}, // forgotten
		{4500 * time.Millisecond, 0.04, 0.04}, // after a silence
	} {
		if got := w.add(at.Add(step.after), step.lag); got != step.want {
			t.Errorf("at +%v with %v: %v, want %v", step.after, step.lag, got, step.want)
		}
	}
}

// TestNegativeDebits: a debit of negative units (a hold settled below its
// estimate in its region) takes units back: a window's count never
// below 0, a bucket never above its burst, and a window the state never
// saw is not made by it.
func TestNegativeDebits(t *testing.T) {
	rdb, p := testenv.Redis(t)
	ctx := context.Background()
	now := time.Now().UnixMicro()
	start := now - now%3_600_000_000
	window := fmt.Sprintf("4 128 1000 3600000000 0 %d %d", start, start+3_600_000_000)
	bucket := "2 128 1000000 10 0 0 0" // a token bucket of 10 that never refills
	seq := int64(0)
	apply := func(key, def string, units int64) {
		t.Helper()
		seq++
		applied := statekey.AppliedKey(p, 'n')
		testenv.Must(t, applyScript.Run(ctx, rdb, []string{applied, key}, "us", seq, 0, def, units).Err())
	}
	state := func(key, field string) string {
		t.Helper()
		v, err := rdb.HGet(ctx, key, field).Result()
		if errors.Is(err, redis.Nil) {
			return "none"
		}
		testenv.Must(t, err)
		return v
	}
	counted := string(statekey.AppendKey(nil, p, 'n', [3]byte{1, 0, 0}, []byte("tenant"), nil))
	apply(counted, window, 5)
	apply(counted, window, -3)
	if got := state(counted, "count"); got != "2" {
		t.Errorf("5 then -3: count %s, want 2", got)
	}
	apply(counted, window, -10)
	if got := state(counted, "count"); got != "0" {
		t.Errorf("then -10: count %s, want 0", got)
	}
	unseen := string(statekey.AppendKey(nil, p, 'n', [3]byte{2, 0, 0}, []byte("tenant"), nil))
	apply(unseen, window, -4)
	if n := rdb.Exists(ctx, unseen).Val(); n != 0 {
		t.Errorf("-4 on a window never counted: the state was made")
	}
	tokens := string(statekey.AppendKey(nil, p, 'n', [3]byte{3, 0, 0}, []byte("tenant"), nil))
	apply(tokens, bucket, 6)
	apply(tokens, bucket, -2)
	if got := rdb.Get(ctx, tokens).Val(); got != "6" {
		t.Errorf("6 then -2 of a bucket of 10: %s tokens, want 6", got)
	}
	apply(tokens, bucket, -100)
	if got := rdb.Get(ctx, tokens).Val(); got != "10" {
		t.Errorf("then -100: %s tokens, want the burst, 10", got)
	}
}

// TestRateDebitsCountFromTheirClaim: a rate's debits (a GCRA, a
// refilling token bucket) count as admitted when the sender claimed
// them, not when they arrive. A debit replayed from long ago (a region
// reading another's stream after a day away) frees and costs nothing
// now; a partition's backlog, half the rate over its minute, arriving
// at once when it heals, costs what the global rate says (nothing of
// the burst), where applying it as fresh debt denied half the burst;
// and a backlog above the rate still costs what it passed by.
func TestRateDebitsCountFromTheirClaim(t *testing.T) {
	rdb, p := testenv.Redis(t)
	ctx := context.Background()
	testenv.Must(t, applyScript.Load(ctx, rdb).Err())
	store := redisstore.New(rdb)
	x := &Exchanger{cfg: Config{Region: region.Config{Name: "eu", Names: []string{"us", "eu"}}, Prefix: p}, rdb: rdb,
		metrics: NewMetrics(), log: slog.New(slog.DiscardHandler), lastSeen: map[string]time.Time{}, lags: map[string]*lagWindow{}, reports: map[string]*demandReport{},
		sources: map[string]*backoff.Monitor{"us": backoff.NewMonitor(backoff.MonitorConfig{})}}
	rd := &reader{source: "us"}
	const tag = byte('r')
	// 60 a minute, a burst of 60: one unit a second.
	gcra := limiter.Params{Algorithm: limiter.GCRA, Limit: 60, PeriodUS: limiter.MinuteUS, Burst: 60, Exchange: true}
	bucket := limiter.Params{Algorithm: limiter.TokenBucket, Limit: 60, PeriodUS: limiter.MinuteUS, Burst: 60, Exchange: true}
	n := 0
	newKey := func() string {
		n++
		return string(statekey.AppendKey(nil, p, tag, [3]byte{5, 5, byte(n)}, []byte("tenant"), nil))
	}
	// head is the outbox field's head ("alg flags a b c 0 0") check.lua
	// writes for params: admitted once on a scratch state, read back.
	head := func(params limiter.Params) string {
		t.Helper()
		key := newKey()
		_, err := store.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: key, Params: params}}, Cost: 1})
		testenv.Must(t, err)
		outbox := statekey.OutboxKey(p, tag)
		fields, err := rdb.HKeys(ctx, outbox).Result()
		testenv.Must(t, err)
		testenv.Must(t, rdb.Del(ctx, outbox, key).Err())
		for _, f := range fields {
			if def, k, ok := splitField([]byte(f)); ok && k == key {
				return def
			}
		}
		t.Fatalf("no outbox field for %s", key)
		return ""
	}
	heads := map[limiter.Algorithm]string{limiter.GCRA: head(gcra), limiter.TokenBucket: head(bucket)}
	var stream uint64
	seq := int64(0)
	// receive applies, as messages of us, units of key claimed at each
	// of claimed.
	receive := func(params limiter.Params, key string, units int64, claimed ...time.Time) {
		t.Helper()
		ch := make(chan jetstream.Msg, len(claimed))
		for _, at := range claimed {
			stream++
			seq++
			body, err := json.Marshal(message{Region: "us", Seq: seq, AtUS: at.UnixMicro(), ClaimedUS: at.UnixMicro(),
				Tags: []tagBatch{{Tag: tag, Debits: []debit{{Field: []byte(heads[params.Algorithm] + " " + key), Units: units}}}}})
			testenv.Must(t, err)
			ch <- &fakeMsg{data: body, stream: stream}
		}
		close(ch)
		testenv.Must(t, x.applyFetched(ctx, rd, ch))
	}
	left := func(params limiter.Params, key string) int64 {
		t.Helper()
		o, err := store.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: key, Params: params}}, Cost: 1, DryRun: true})
		testenv.Must(t, err)
		return o.Results[0].Remaining
	}
	now := time.Now()
	for _, params := range []limiter.Params{gcra, bucket} {
		name := string(params.Algorithm)
		// A day old: the whole burst, admitted then.
		old := newKey()
		receive(params, old, 60, now.Add(-24*time.Hour))
		if got := left(params, old); got < 59 {
			t.Errorf("%s: a burst admitted a day ago, replayed: %d left, want the burst (60)", name, got)
		}
		// The partition: us admitted 30 over the last minute, one every 2 s.
		var backlog []time.Time
		for i := range 30 {
			backlog = append(backlog, now.Add(-60*time.Second+time.Duration(i)*2*time.Second))
		}
		healed := newKey()
		receive(params, healed, 1, backlog...)
		if got := left(params, healed); got < 58 {
			t.Errorf("%s: half the rate over the partition's minute: %d left, want about the burst (60): the global rate was never passed", name, got)
		}
		// Above the rate: 60 units in the last 10 s leave about 10.
		fast := newKey()
		var burst []time.Time
		for i := range 6 {
			burst = append(burst, now.Add(-10*time.Second+time.Duration(i)*time.Second))
		}
		receive(params, fast, 10, burst...)
		if got := left(params, fast); got < 8 || got > 12 {
			t.Errorf("%s: 60 units over the last 10 s: %d left, want about 10 (what refilled since)", name, got)
		}
	}
}

// TestApplyWire: apply.lua takes its debits after the arguments the Go
// side queues before them.
func TestApplyWire(t *testing.T) {
	m := regexp.MustCompile(`(?m)^local applyHead = (\d+)$`).FindStringSubmatch(applyLua)
	if m == nil {
		t.Fatal("apply.lua does not declare applyHead")
	}
	if got, _ := strconv.Atoi(m[1]); got != applyHead {
		t.Errorf("apply.lua: applyHead = %d, want %d", got, applyHead)
	}
}
