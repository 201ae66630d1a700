package exchange

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/backoff"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/statekey"
)

var (
	//go:embed claim.lua
	claimLua string
	//go:embed apply.lua
	applyLua string
	//go:embed demand.lua
	demandLua string
	//go:embed donate.lua
	donateLua string
	//go:embed clear.lua
	clearLua string
	//go:embed seq.lua
	seqLua string

	claimScript  = redis.NewScript(claimLua)
	applyScript  = redis.NewScript(applyLua)
	demandScript = redis.NewScript(demandLua)
	donateScript = redis.NewScript(donateLua)
	clearScript  = redis.NewScript(clearLua)
	seqScript    = redis.NewScript(seqLua)

	// scripts are the scripts the exchanger loads, and loads again when
	// Redis lost them.
	scripts = []*redis.Script{claimScript, applyScript, demandScript, donateScript, clearScript, seqScript}
)

// Heartbeat is how often a region with nothing to send says that it is
// there: another region marks it down (tollgate_region_exchange_up 0)
// after three heartbeats without a message.
const Heartbeat = time.Second

// Retention is how long a region's stream keeps its messages: a region
// cut off for longer misses what the others admitted before (its states
// then only lag; they never count anything twice).
const Retention = 24 * time.Hour

// Stream returns the name of region name's stream of admissions, and
// Subject its subject.
func Stream(name string) string  { return "tollgate-region-" + name }
func Subject(name string) string { return "tollgate.region." + name + ".admissions" }

// message is what a region publishes every exchange interval: what its
// checks admitted on global_shared rules since the last one, by hash
// tag. Seq increases with every message of the region, across restarts
// and across the loss of its Redis's data (seq.lua); a message published
// again after a lost acknowledgement keeps its Seq, and the receivers
// skip it.
type message struct {
	Region string `json:"region"`
	Seq    int64  `json:"seq"`
	// AtUS is when the sender claimed the outboxes (µs since the epoch,
	// its clock): the receivers' lag is measured from it.
	AtUS int64 `json:"at_us"`
	// ClaimedUS is when the latest of its tags' claims was made (µs,
	// the sender's Redis's clock; 0: unknown): none of its admissions is
	// later, and apply.lua applies a rate's debits as admitted then.
	ClaimedUS int64      `json:"claimed_us,omitempty"`
	Tags      []tagBatch `json:"tags,omitempty"`
	// Demand is a part of the sender's last rebalance report, when this
	// message carries one.
	Demand *demandReport `json:"demand,omitempty"`
}

// tagBatch is one hash tag's claimed outbox.
type tagBatch struct {
	Tag    byte    `json:"tag"`
	Debits []debit `json:"debits"`
	// Releases are units of global_split allotments the sender gave up,
	// each for one region (donate.lua).
	Releases []release `json:"releases,omitempty"`
	// claimedUS is when the claim was made (claim.lua's '@').
	claimedUS int64
}

// release is one outbox field "r <to> <key>": units of the allotment of
// state key Key that the sender took from its own for region To.
type release struct {
	To    string `json:"to"`
	Key   []byte `json:"k"`
	Units int64  `json:"u"`
}

// applyHead is the number of apply.lua's arguments before its debits:
// the source region, the message's sequence and its claim time
// (message.ClaimedUS). apply.lua declares it with this name;
// TestApplyWire keeps the two equal.
const applyHead = 3

// debit is one outbox field: the rule's def, the window and the state
// key as check.lua writes them ("alg flags a b c window end key"), and
// the units admitted.
type debit struct {
	Field []byte `json:"f"`
	Units int64  `json:"u"`
}

// Config configures an Exchanger.
type Config struct {
	Region region.Config
	// Prefix starts the limiter state keys (TOLLGATE_KEY_PREFIX), and so
	// the outboxes beside them.
	Prefix string
	Log    *slog.Logger
	// SplitRules returns the global_split windows by state ID (the
	// rebalancer reads it every rebalance interval); nil: allotments stay
	// equal.
	SplitRules func(ctx context.Context) (map[[3]byte]SplitRule, error)
}

// Exchanger is a region's side of the exchange: every exchange interval
// it claims the region's outboxes and publishes them on the region's
// stream, and it applies the other regions' messages to the region's
// states as debits, exactly once. Every worker of a region runs one
// (`admin worker`); the one holding the region's lease exchanges, the
// others stand by to take over (lease.go).
type Exchanger struct {
	cfg     Config
	rdb     redis.UniversalClient
	nc      *nats.Conn
	js      jetstream.JetStream
	metrics *Metrics
	log     *slog.Logger

	publish *backoff.Monitor
	// exchanging is true while this worker holds the lease (Active).
	exchanging atomic.Bool
	mu         sync.Mutex
	// lastSeen is when a message of each other region last arrived.
	lastSeen map[string]time.Time
	// lags are the lag metric's windows, by source.
	lags map[string]*lagWindow
	// claims is the interval metric's window, and lastClaim when send
	// last claimed (sendLoop's alone).
	claims    lagWindow
	lastClaim time.Time
	sources   map[string]*backoff.Monitor
	// reading holds the sources whose reader exists (receive) since this
	// worker took the lease: the rebalancer reports only once it holds
	// them all (rebalance).
	reading map[string]bool
	// The rebalancer's (rebalance.go): its report waiting for the next
	// message, the other regions' last reports, and its recent gifts.
	report  *demandReport
	reports map[string]*demandReport
	partial map[string]*partialReport
	gifts   []gift
}

// New returns the exchanger of cfg.Region on rdb (the region's Redis)
// and nc (its NATS server).
func New(rdb redis.UniversalClient, nc *nats.Conn, cfg Config) (*Exchanger, error) {
	if !cfg.Region.Enabled() {
		return nil, errors.New("exchange: TOLLGATE_REGION is not set")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("exchange: %w", err)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	x := &Exchanger{cfg: cfg, rdb: rdb, nc: nc, js: js, metrics: NewMetrics(), log: cfg.Log,
		lastSeen: map[string]time.Time{}, lags: map[string]*lagWindow{}, sources: map[string]*backoff.Monitor{}, reading: map[string]bool{}, reports: map[string]*demandReport{}, partial: map[string]*partialReport{}}
	x.publish = backoff.NewMonitor(backoff.MonitorConfig{Component: "region_exchange", Dependency: "NATS (publishing region " + cfg.Region.Name + "'s admissions)", Log: cfg.Log})
	for _, name := range cfg.Region.Names {
		if name != cfg.Region.Name {
			x.sources[name] = backoff.NewMonitor(backoff.MonitorConfig{Component: "region_exchange",
				Dependency: "region " + name + "'s admissions", Log: cfg.Log})
		}
	}
	return x, nil
}

// Metrics returns the exchanger's metrics, to register.
func (x *Exchanger) Metrics() *Metrics { return x.metrics }

// Run exchanges until ctx ends, while this worker holds the region's
// exchange lease, and stands by while another worker does (trying to
// take it every TTL/3). Nothing but ctx ends it: what fails meanwhile
// (Redis, NATS) is retried and logged as an outage. The lease is given
// up when it returns, for a standing-by worker to take at once.
func (x *Exchanger) Run(ctx context.Context) {
	l := newLease(x.rdb, x.cfg.Prefix, x.cfg.Region.LeaseTTL)
	defer l.release()
	mon := backoff.NewMonitor(backoff.MonitorConfig{Component: "region_exchange", Dependency: "Redis (the region's exchange lease)", Log: x.log})
	tick := time.NewTicker(l.ttl / 3)
	defer tick.Stop()
	standingBy := "" // the holder last logged
	for {
		ok, holder, err := l.acquire(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			mon.Failure(err)
		case ok:
			mon.Success()
			standingBy = ""
			x.log.Info("region exchange: this worker exchanges (it holds the region's lease)", "region", x.cfg.Region.Name)
			l.hold(ctx, x.active, func(lost error) {
				x.log.Warn("region exchange: lease lost; this worker stops exchanging and stands by", "err", lost)
			})
			x.standBy()
			if ctx.Err() != nil {
				return
			}
		default:
			mon.Success()
			if holder != standingBy {
				x.log.Info("region exchange: standing by (another worker of the region holds the lease)", "region", x.cfg.Region.Name, "holder", holder)
				standingBy = holder
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Active reports whether this worker exchanges: it holds the region's
// lease.
func (x *Exchanger) Active() bool { return x.exchanging.Load() }

// standBy clears what the exchanging worker alone reports: its gauges
// by source (a standing-by worker's would say nothing true) and its
// lease gauge.
func (x *Exchanger) standBy() {
	x.exchanging.Store(false)
	x.metrics.active.Set(0)
	x.metrics.interval.Set(0)
	x.lastClaim = time.Time{}
	x.metrics.up.Reset()
	x.metrics.lag.Reset()
}

// active exchanges until ctx ends: it makes the region's stream and
// loads the scripts (retrying until NATS and Redis take them), then
// sends every exchange interval and receives from every other region.
func (x *Exchanger) active(ctx context.Context) {
	x.exchanging.Store(true)
	x.metrics.active.Set(1)
	x.mu.Lock()
	clear(x.reading)
	x.mu.Unlock()
	for name := range x.sources {
		x.metrics.up.WithLabelValues(name).Set(0)
	}
	if x.setup(ctx) != nil {
		return // ctx ended
	}
	var wg sync.WaitGroup
	for name := range x.sources {
		wg.Go(func() { x.receive(ctx, name) })
	}
	wg.Go(func() { x.watch(ctx) })
	if x.cfg.SplitRules != nil {
		wg.Go(func() { x.rebalanceLoop(ctx) })
	}
	x.sendLoop(ctx)
	wg.Wait()
}

// setup makes the region's stream, placed on the region's NATS servers
// (server_tags "region:<name>"), and loads the scripts, each retried with
// backoff until it succeeds (a Redis failover, a NATS server placing the
// stream): it returns an error only when ctx ends.
func (x *Exchanger) setup(ctx context.Context) error {
	name := x.cfg.Region.Name
	if err := x.retry(ctx, "NATS JetStream (making stream "+Stream(name)+")", x.makeStream); err != nil {
		return err
	}
	if err := x.retry(ctx, "Redis (loading the exchange's scripts)", x.loadScripts); err != nil {
		return err
	}
	x.log.Info("region exchange running", "region", name, "regions", strings.Join(x.cfg.Region.Names, ","),
		"interval", x.cfg.Region.ExchangeInterval)
	return nil
}

// retry calls do until it succeeds, with backoff, logging the outage of
// dependency (once, every 10 s while it lasts, and when it ends); it
// returns ctx's error when ctx ends first.
func (x *Exchanger) retry(ctx context.Context, dependency string, do func(context.Context) error) error {
	b := backoff.New(backoff.Policy{})
	mon := backoff.NewMonitor(backoff.MonitorConfig{Component: "region_exchange", Dependency: dependency, Log: x.log})
	for {
		err := do(ctx)
		if err == nil {
			mon.Success()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		mon.Failure(err)
		if err := b.Wait(ctx); err != nil {
			return err
		}
	}
}

// loadScripts loads the exchanger's scripts into the region's Redis.
func (x *Exchanger) loadScripts(ctx context.Context) error {
	for _, s := range scripts {
		if err := s.Load(ctx, x.rdb).Err(); err != nil {
			return fmt.Errorf("exchange: load script: %w", err)
		}
	}
	return nil
}

func (x *Exchanger) makeStream(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	name := x.cfg.Region.Name
	_, err := x.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: Stream(name), Subjects: []string{Subject(name)},
		Storage: jetstream.FileStorage, MaxAge: Retention, Duplicates: 2 * time.Minute,
		Placement: &jetstream.Placement{Tags: []string{"region:" + name}},
		// Readers fill a gap by sequence from the stream's own servers,
		// without the cluster's meta layer (slow to come back after the
		// routes were reset): reader.fill.
		AllowDirect: true})
	return err
}

// sendLoop sends every exchange interval until ctx ends.
func (x *Exchanger) sendLoop(ctx context.Context) {
	tick := time.NewTicker(x.cfg.Region.ExchangeInterval)
	defer tick.Stop()
	var lastSent time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sent, err := x.send(ctx, time.Since(lastSent) >= Heartbeat)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			x.publish.Failure(err)
			continue
		}
		x.publish.Success()
		if sent {
			lastSent = time.Now()
		}
	}
}

// send claims every outbox and publishes what it claimed, older claims
// (a failed publish's) first, each under its sequence, then the
// rebalance report waiting, if any, in parts of at most messageBudget
// (demandReport.parts); with nothing to send it publishes an empty
// message when heartbeat is set. It reports whether it published.
func (x *Exchanger) send(ctx context.Context, heartbeat bool) (sent bool, err error) {
	prefix := x.cfg.Prefix
	// The time between two claims is the E of the bounds as it runs: the
	// interval, and what the machine adds to it (a late tick, a slow
	// publication before).
	claiming := time.Now()
	if !x.lastClaim.IsZero() {
		x.metrics.interval.Set(x.claims.add(claiming, claiming.Sub(x.lastClaim).Seconds()))
	}
	x.lastClaim = claiming
	seq, err := seqScript.Run(ctx, x.rdb, []string{prefix + "regions:seq"}).Int64()
	if err != nil {
		return false, fmt.Errorf("exchange: sequence: %w", err)
	}
	tags := statekey.Tags()
	pipe := x.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(tags))
	for i, tag := range tags {
		cmds[i] = claimScript.EvalSha(ctx, pipe, []string{statekey.OutboxKey(prefix, tag), statekey.ClaimedKey(prefix, tag),
			statekey.AppliedKey(prefix, tag)}, seq, claimFields)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		x.reload(ctx, err)
		return false, fmt.Errorf("exchange: claim: %w", err)
	}
	bySeq := map[int64][]tagBatch{}
	for i, cmd := range cmds {
		vals, _ := cmd.Slice()
		if len(vals) == 0 {
			continue
		}
		var tb tagBatch
		tb.Tag = tags[i]
		var at int64
		for j := 0; j+1 < len(vals); j += 2 {
			f, _ := vals[j].(string)
			v, _ := vals[j+1].(string)
			n, _ := strconv.ParseInt(v, 10, 64)
			switch f {
			case "#":
				at = n
				continue
			case "@":
				tb.claimedUS = n
				continue
			}
			if rest, ok := strings.CutPrefix(f, "r "); ok {
				to, key, _ := strings.Cut(rest, " ")
				tb.Releases = append(tb.Releases, release{To: to, Key: []byte(key), Units: n})
				continue
			}
			tb.Debits = append(tb.Debits, debit{Field: []byte(f), Units: n})
		}
		bySeq[at] = append(bySeq[at], tb)
	}
	seqs := make([]int64, 0, len(bySeq))
	for s := range bySeq {
		seqs = append(seqs, s)
	}
	slices.Sort(seqs)
	x.mu.Lock()
	report := x.report
	x.report = nil
	x.mu.Unlock()
	defer func() {
		if err != nil && report != nil { // the next message carries it, unless a newer one waits
			x.mu.Lock()
			if x.report == nil {
				x.report = report
			}
			x.mu.Unlock()
		}
	}()
	if len(seqs) == 0 && report == nil {
		if !heartbeat {
			return false, nil
		}
		return true, x.publishOne(ctx, message{Region: x.cfg.Region.Name, Seq: seq, AtUS: time.Now().UnixMicro()})
	}
	for _, s := range seqs {
		for _, batches := range split(bySeq[s], messageBudget) {
			m := message{Region: x.cfg.Region.Name, Seq: s, AtUS: time.Now().UnixMicro(), Tags: batches}
			for _, tb := range batches {
				m.ClaimedUS = max(m.ClaimedUS, tb.claimedUS)
			}
			if err := x.publishOne(ctx, m); err != nil {
				return false, err
			}
			// One call per key: on a Cluster the claimed outboxes live
			// in different slots. clear.lua leaves a claim of another
			// sequence (a worker that lost the lease while publishing
			// must not clear what the one holding it now claimed).
			pipe := x.rdb.Pipeline()
			for _, tb := range batches {
				clearScript.EvalSha(ctx, pipe, []string{statekey.ClaimedKey(prefix, tb.Tag)}, s)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				x.reload(ctx, err)
				return false, fmt.Errorf("exchange: clear claimed outboxes: %w", err)
			}
		}
	}
	// The report goes in messages of its own, without tags (apply.lua
	// has nothing to do with them), its parts sized as the debits are: a
	// report of every state with demand or moved units may be larger
	// than a message can be.
	if report != nil {
		// The report is named by this message's sequence, which every
		// worker of the region takes from its Redis (seq.lua), not by a
		// worker's clock: the receivers keep the report of the greatest
		// (assemble), whichever worker sent it.
		report.ID = seq
		for _, part := range report.parts(messageBudget) {
			if err := x.publishOne(ctx, message{Region: x.cfg.Region.Name, Seq: seq, AtUS: time.Now().UnixMicro(), Demand: part}); err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

// The size of what a message carries. A stream takes messages of up to
// NATS's max_payload (1 MiB unless the servers say otherwise), and a
// message too large would be refused on every attempt, holding up the
// region's exchange for good: a claim of a hash tag takes at most
// claimFields of its outbox's fields (about 450 KiB of JSON with long
// state keys; claim.lua leaves the rest to the next claims), and a
// sequence's claims go out in as many messages, each of whole tags, as
// keep each under messageBudget, or of one tag when a tag alone is
// larger. Variables for the tests.
var (
	claimFields   = 1000
	messageBudget = 256 << 10
)

// split parts batches into runs whose JSON is about budget bytes at most
// (one batch alone may pass it). Each run is a message of its own: its
// ID names its tags, and the receivers apply each tag's sequence once,
// whichever message brings it.
func split(batches []tagBatch, budget int) [][]tagBatch {
	var parts [][]tagBatch
	from, size := 0, 0
	for i, tb := range batches {
		n := 32
		for _, d := range tb.Debits {
			n += base64.StdEncoding.EncodedLen(len(d.Field)) + 32
		}
		for _, r := range tb.Releases {
			n += len(r.To) + base64.StdEncoding.EncodedLen(len(r.Key)) + 40
		}
		if i > from && size+n > budget {
			parts = append(parts, batches[from:i])
			from, size = i, 0
		}
		size += n
	}
	return append(parts, batches[from:])
}

// reload loads the scripts again when err says Redis lost them.
func (x *Exchanger) reload(ctx context.Context, err error) {
	if strings.HasPrefix(err.Error(), "NOSCRIPT") {
		for _, s := range scripts {
			_ = s.Load(ctx, x.rdb).Err()
		}
	}
}

// publishOne publishes m on the region's stream and waits for its
// acknowledgement. Its message ID (msgID) makes a publication of the
// same claim again one message.
func (x *Exchanger) publishOne(ctx context.Context, m message) error {
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = x.js.Publish(ctx, Subject(m.Region), body, jetstream.WithMsgID(msgID(m)))
	if err != nil {
		return fmt.Errorf("exchange: publish %s seq %d: %w", m.Region, m.Seq, err)
	}
	return nil
}

// msgID is m's message ID: its region, its sequence and its hash tags,
// or the part of the rebalance report it carries. A claim published
// again is the same message, which the stream keeps once; a message of
// the same sequence with other tags is not: two workers that both
// believed they held the lease, each reading the claims at its moment,
// may each publish a sequence with some of its tags, and the receivers
// need every tag (apply.lua applies a tag's sequence once, whichever
// message brings it). Nor is each part of a report.
func msgID(m message) string {
	id := make([]byte, 0, len(m.Region)+24+2*len(m.Tags))
	id = append(id, m.Region...)
	id = append(id, '-')
	id = strconv.AppendInt(id, m.Seq, 10)
	if len(m.Tags) > 0 {
		id = append(id, '-')
		for _, tb := range m.Tags {
			id = hex.AppendEncode(id, []byte{tb.Tag})
		}
	}
	if m.Demand != nil {
		id = append(id, "-d"...)
		id = strconv.AppendInt(id, int64(m.Demand.Part), 10)
	}
	return string(id)
}

// receive applies region source's messages, in their order, until ctx
// ends, through a durable push consumer of source's stream named after
// this region (it resumes after a restart or a partition where it
// stopped).
//
// The source's servers push each message to this region's subscription
// as it is stored (consume): nothing waits on a request of ours. A
// partition that drops what passes holds the pushes, and they arrive
// when it heals, to the same subscription; one that closes the routes
// pauses the pushes until NATS has them and their interest back. (Pull
// requests did not survive the first kind: a request held by the
// partition reached the source after its client had given up, and took
// the waiting messages to nobody.)
func (x *Exchanger) receive(ctx context.Context, source string) {
	e := x.cfg.Region.ExchangeInterval
	b := backoff.New(backoff.Policy{Initial: e / 2, Max: e})
	var rd *reader
	again := false // make the consumer again from the first not applied
	for ctx.Err() == nil {
		var err error
		switch {
		case rd == nil:
			if rd, err = x.reader(ctx, source); err == nil {
				x.mu.Lock()
				x.reading[source] = true
				x.mu.Unlock()
			}
		case again || rd.cons == nil:
			err = x.restart(ctx, rd)
		}
		if err != nil {
			x.sources[source].Failure(err)
			_ = b.Wait(ctx)
			continue
		}
		again = false
		err = x.consume(ctx, rd)
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, errGap):
			// Lost on the way and not read back (a long gap, or the
			// stream out of reach): read again from the first not
			// applied.
			x.log.Info("region exchange: a message came past one not applied; reading again from there",
				"source", source, "err", err)
			again = true
		case err != nil:
			// The region's Redis, or the consumer: after a wait, read
			// again from the first not applied (the messages handed to
			// the subscription just stopped would otherwise come again
			// only after the acknowledgement wait).
			x.log.Warn("region exchange: cannot apply messages; they will come again", "source", source, "err", err)
			x.sources[source].Failure(err)
			_ = b.Wait(ctx)
			again = true
		default:
			b.Reset()
		}
	}
}

// consume applies the messages rd's consumer pushes until ctx ends, a
// batch fails or the source's servers say the consumer is gone.
//
// A push consumer that is deleted (with its stream, when the stream is
// made anew, or by hand) sends nothing more, and says so to nobody: the
// subscription would wait for good. So every lostCheck the consumer is
// looked up; one the source's servers do not know ends consume with
// errGap, and receive makes it again (restart). A lookup that fails
// otherwise (a partition, the source down) changes nothing: the pushes
// resume, to the same subscription, when the source is back.
func (x *Exchanger) consume(ctx context.Context, rd *reader) error {
	// MaxAckPending bounds what the server sends before acknowledgements:
	// the channel never blocks the client's dispatch.
	msgs := make(chan jetstream.Msg, maxUnacked+applyBatch)
	cc, err := rd.cons.Consume(func(m jetstream.Msg) { msgs <- m })
	if err != nil {
		return fmt.Errorf("consume %s's stream: %w", rd.source, errors.Join(errGap, err)) // make it again
	}
	defer cc.Stop()
	ctx, stop := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		x.watchConsumer(ctx, rd.source, rd.cons, stop)
	}()
	// The watcher reads nothing of rd but what it was given, and is gone
	// before restart changes rd's consumer.
	defer func() { stop(nil); <-watched }()
	err = x.applyFetched(ctx, rd, msgs)
	if lost := context.Cause(ctx); errors.Is(lost, errGap) {
		x.log.Warn("region exchange: this region's consumer of a region's stream is gone (the stream made anew, or the consumer deleted); making it again",
			"source", rd.source, "read_up_to", rd.applied)
		return lost // whatever a batch cut short by it answered
	}
	return err
}

// lostCheck is how often consume looks its consumer up: every ten
// exchange intervals, at least every second.
func (x *Exchanger) lostCheck() time.Duration {
	return max(10*x.cfg.Region.ExchangeInterval, time.Second)
}

// watchConsumer looks source's consumer cons up every lostCheck until ctx
// ends, and stops ctx with errGap once the source's servers do not know
// it.
func (x *Exchanger) watchConsumer(ctx context.Context, source string, cons jetstream.PushConsumer, stop context.CancelCauseFunc) {
	t := time.NewTicker(x.lostCheck())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lookup, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cons.Info(lookup)
		cancel()
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			stop(fmt.Errorf("consume %s's stream: %w", source, errors.Join(errGap, err)))
			return
		}
	}
}

// reader is what receive keeps of one source: its durable consumer and
// the stream sequence up to which every message is applied.
//
// Messages are applied in the stream's order, whatever the deliveries: a
// push lost with a route that closed comes again only after the
// consumer's acknowledgement wait, while the next pushes already bring
// the ones after it, and applying a later sequence first would make
// apply.lua skip the earlier one for good. So a message past a gap comes
// after the gap's messages, read from the stream (fill), or, past a long
// gap, is not applied (errGap): receive makes the consumer again from
// the first sequence not applied (restart). A message at or below the
// applied sequence is only acknowledged.
type reader struct {
	source  string
	cons    jetstream.PushConsumer
	applied uint64
	// stream reads a gap's messages by sequence (fill); nil, every gap
	// is errGap.
	stream jetstream.Stream
	// created is when the stream read was made (zero: not known): a
	// stream made anew since is read from its first message (restart).
	created time.Time
}

// maxFill is the most messages of a gap read from the stream by
// sequence; a longer gap makes the consumer again (restart).
const maxFill = 256

// fill reads the messages of rd's stream from from to to, at once (one
// round trip to the source's servers): their data in order, nil for one
// the stream no longer holds.
func (rd *reader) fill(ctx context.Context, from, to uint64) ([][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out := make([][]byte, to-from+1)
	errs := make([]error, len(out))
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			m, err := rd.stream.GetMsg(ctx, from+uint64(i))
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
			case err != nil:
				errs[i] = err
			default:
				out[i] = m.Data
			}
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// errGap is a delivery that skipped messages of the stream.
var errGap = errors.New("a message past one not applied yet")

// consumerName is this region's durable consumer of every other region's
// stream.
func (x *Exchanger) consumerName() string { return "tollgate-" + x.cfg.Region.Name }

// reader makes source's reader on the durable push consumer of its
// stream named after this region, from the consumer's acknowledgement
// floor. A pull consumer of that name (an exchanger before push
// consumers) is replaced by a push consumer from its acknowledgement
// floor; so is a consumer restart deleted and did not make again (its
// worker stopped between the two, or a call of it failed), from where
// restart noted. An error returns no reader: what failed is tried again
// with the next.
//
// A region's first consumer of a stream starts at the stream's end: what
// the source admitted before is not replayed (up to Retention of it,
// which would hold up the exchange while it is read; apply.lua would
// count a window's units, but a rate's old debits change nothing). So a
// region new to the exchange counts the other regions' admissions from
// its first reading on (docs/regions.md, "A region joining").
func (x *Exchanger) reader(ctx context.Context, source string) (*reader, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rd := &reader{source: source}
	cons, err := x.js.PushConsumer(ctx, Stream(source), x.consumerName())
	switch {
	case errors.Is(err, jetstream.ErrNotPushConsumer):
		old, err := x.js.Consumer(ctx, Stream(source), x.consumerName())
		if err != nil {
			return nil, err
		}
		rd.applied = old.CachedInfo().AckFloor.Stream
		if err := x.restart(ctx, rd); err != nil {
			return nil, err // the next reader starts again from what restart left
		}
		return rd, nil
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		from, noted := x.rdb.HGet(ctx, x.readKey(), source).Uint64()
		switch {
		case noted == nil:
			rd.applied = from
			if err := x.restart(ctx, rd); err != nil {
				return nil, err // the note stays for the next reader
			}
			return rd, nil
		case !errors.Is(noted, redis.Nil):
			return nil, noted
		}
		var stream jetstream.Stream
		if stream, err = x.js.Stream(ctx, Stream(source)); err != nil {
			return nil, err
		}
		rd.applied = stream.CachedInfo().State.LastSeq
		x.log.Info("region exchange: first reading of a region's stream; from its end", "source", source, "after", rd.applied)
		cons, err = x.js.CreateOrUpdatePushConsumer(ctx, Stream(source),
			x.consumerConfig(source, jetstream.DeliverByStartSequencePolicy, rd.applied+1))
	}
	if err != nil {
		return nil, err
	}
	rd.cons, rd.applied = cons, max(rd.applied, cons.CachedInfo().AckFloor.Stream)
	stream, err := x.js.Stream(ctx, Stream(source))
	if err != nil {
		return nil, err
	}
	rd.stream, rd.created = stream, stream.CachedInfo().Created
	if first := stream.CachedInfo().State.FirstSeq; first > 0 && rd.applied < first-1 {
		rd.applied = first - 1 // the rest is gone, past the stream's retention
	}
	return rd, nil
}

// readKey is the region's hash of where each source's stream was last
// read from anew (restart), for a reader that finds no consumer.
func (x *Exchanger) readKey() string { return x.cfg.Prefix + "regions:read" }

// consumerConfig is the config of this region's push consumer of
// source's stream: every message delivered to a subject of this region's
// own, acknowledged one by one.
func (x *Exchanger) consumerConfig(source string, deliver jetstream.DeliverPolicy, start uint64) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{Durable: x.consumerName(), AckPolicy: jetstream.AckExplicitPolicy,
		DeliverSubject: "_tollgate.deliver." + x.cfg.Region.Name + "." + source,
		DeliverPolicy:  deliver, OptStartSeq: start, AckWait: 30 * time.Second, MaxAckPending: maxUnacked}
}

// restart makes rd's consumer anew from the first sequence it has not
// applied: what was lost on the way is delivered again at once. What
// the stream no longer holds (past its retention) is passed over. A
// sequence applied past the stream's last means the stream was made
// anew (its NATS storage lost: its sequences start again at 1): it is
// read from its first message. On an error rd's consumer may be gone
// (deleted, not made again): the caller restarts again, or drops rd
// and makes a reader, which starts from the note restart left.
func (x *Exchanger) restart(ctx context.Context, rd *reader) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stream, err := x.js.Stream(ctx, Stream(rd.source))
	if err != nil {
		return err
	}
	info := stream.CachedInfo()
	state := info.State
	if rd.applied > state.LastSeq || !rd.created.IsZero() && !info.Created.Equal(rd.created) {
		x.log.Warn("region exchange: a region's stream was made anew (made since it was read, or ending before where this region read it); reading it from its first message",
			"source", rd.source, "read_up_to", rd.applied, "last", state.LastSeq, "first", state.FirstSeq)
		rd.applied = max(state.FirstSeq, 1) - 1
	}
	rd.stream, rd.created = stream, info.Created
	if first := state.FirstSeq; first > 0 && rd.applied < first-1 {
		x.log.Warn("region exchange: messages gone from the stream before they were applied; their admissions are not counted here",
			"source", rd.source, "first_missing", rd.applied+1, "last_missing", first-1)
		rd.applied = first - 1
	}
	// Should this worker stop before the consumer is made again, the next
	// reader starts from here, not from the stream's end (reader).
	if err := x.rdb.HSet(ctx, x.readKey(), rd.source, rd.applied).Err(); err != nil {
		return err
	}
	if err := x.js.DeleteConsumer(ctx, Stream(rd.source), x.consumerName()); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return err
	}
	cons, err := x.js.CreateOrUpdatePushConsumer(ctx, Stream(rd.source),
		x.consumerConfig(rd.source, jetstream.DeliverByStartSequencePolicy, rd.applied+1))
	if err != nil {
		return err
	}
	rd.cons = cons
	// The consumer holds the position now. A note left behind would be
	// taken, should the consumer go, over the stream's end, however old.
	if err := x.rdb.HDel(ctx, x.readKey(), rd.source).Err(); err != nil {
		x.log.Warn("region exchange: cannot clear where a region's stream was read from; the note stays", "source", rd.source, "err", err)
	}
	return nil
}

// maxUnacked is the most messages the consumer sends before they are
// acknowledged: about two hundred seconds of a region's messages at the
// default interval.
const maxUnacked = 2000

// applyBatch is the most messages applied in one pipeline.
const applyBatch = 256

// applyFetched applies the messages of msgs as they arrive, until msgs
// is closed, ctx ends or a batch fails (its error returned): each time,
// every message already there (at most applyBatch) in pipelines to the
// region's Redis, one per run of messages with distinct hash tags
// (applyMsgs).
func (x *Exchanger) applyFetched(ctx context.Context, rd *reader, msgs <-chan jetstream.Msg) error {
	pending := make([]jetstream.Msg, 0, applyBatch)
	for {
		select {
		case <-ctx.Done():
			return nil
		case msg, ok := <-msgs:
			if !ok {
				return nil
			}
			pending = append(pending[:0], msg)
		}
	more:
		for len(pending) < applyBatch {
			select {
			case m, ok := <-msgs:
				if !ok {
					break more
				}
				pending = append(pending, m)
			default:
				break more
			}
		}
		if err := x.applyMsgs(ctx, rd, pending); err != nil {
			return err
		}
	}
}

// applyMsgs applies msgs of rd's source, in the stream's order, in
// pipelines of apply.lua calls (one call per message and hash tag), and
// acknowledges them; one already applied is only acknowledged. A message
// that cannot be decoded, or names no state, is negatively acknowledged
// and passed over (logged: it never will be). A message past a gap of
// at most maxFill messages comes after them, read from the stream by
// sequence (fill); past a longer one, or when that read fails, it is not
// applied, nor any after it: they are negatively acknowledged and, once
// what came before is applied, errGap is returned.
//
// A pipeline holds at most one call of each hash tag (the next message
// that names a tag already in it starts the next pipeline), and runs
// only once the one before succeeded: a tag's later sequence is never
// applied while an earlier one failed, which apply.lua would then skip
// as applied. When a pipeline fails, its messages and every later one
// are negatively acknowledged, the earlier pipelines' count as applied,
// and the error is returned.
func (x *Exchanger) applyMsgs(ctx context.Context, rd *reader, msgs []jetstream.Msg) error {
	type applied struct {
		msg  jetstream.Msg // nil for one read to fill a gap
		seq  uint64        // its stream sequence
		m    message
		cmds []*redis.Cmd
	}
	type round struct {
		pipe redis.Pipeliner
		tags map[byte]bool
		from int // its first message's index in batch
	}
	source := rd.source
	batch := make([]applied, 0, len(msgs))
	var rounds []*round
	upTo := rd.applied
	var gap error
	queue := func(seq uint64, msg jetstream.Msg, data []byte) {
		var m message
		err := json.Unmarshal(data, &m)
		if err == nil && m.Region != source {
			err = fmt.Errorf("a message of region %q on region %q's stream", m.Region, source)
		}
		var cmds []*redis.Cmd
		if err == nil {
			if len(rounds) == 0 || slices.ContainsFunc(m.Tags, func(tb tagBatch) bool { return rounds[len(rounds)-1].tags[tb.Tag] }) {
				rounds = append(rounds, &round{pipe: x.rdb.Pipeline(), tags: map[byte]bool{}, from: len(batch)})
			}
			r := rounds[len(rounds)-1]
			for _, tb := range m.Tags {
				r.tags[tb.Tag] = true
			}
			cmds, err = x.queueApply(ctx, r.pipe, source, m)
		}
		if err != nil {
			x.log.Warn("region exchange: cannot apply a message; passed over", "source", source, "seq", seq, "err", err)
			if msg != nil {
				_ = msg.Nak()
			}
			return
		}
		batch = append(batch, applied{msg, seq, m, cmds})
	}
	for i, msg := range msgs {
		md, err := msg.Metadata()
		if err != nil {
			x.log.Warn("region exchange: a message without its stream sequence; it will be redelivered", "source", source, "err", err)
			_ = msg.Nak()
			continue
		}
		seq := md.Sequence.Stream
		if seq <= upTo {
			_ = msg.Ack() // applied already
			continue
		}
		if seq > upTo+1 {
			// Messages lost on the way: read them from the stream, or
			// make the consumer again from the first.
			var filled [][]byte
			if rd.stream != nil && seq-upTo-1 <= maxFill {
				filled, err = rd.fill(ctx, upTo+1, seq-1)
			}
			if filled == nil || err != nil {
				for _, m := range msgs[i:] {
					_ = m.Nak()
				}
				gap = fmt.Errorf("%s's stream at %d after %d: %w", source, seq, upTo, errors.Join(errGap, err))
				break
			}
			for j, data := range filled {
				if data != nil {
					queue(upTo+1+uint64(j), nil, data)
				}
			}
		}
		upTo = seq
		queue(seq, msg, msg.Data())
	}
	done := len(batch)
	var failed error
	for _, r := range rounds {
		if r.pipe.Len() == 0 {
			continue
		}
		if _, err := r.pipe.Exec(ctx); err != nil {
			if strings.HasPrefix(err.Error(), "NOSCRIPT") {
				_ = applyScript.Load(ctx, x.rdb).Err()
			}
			done = r.from
			failed = fmt.Errorf("apply seq %d to %d: %w", batch[r.from].m.Seq, batch[len(batch)-1].m.Seq, err)
			break
		}
	}
	if failed != nil {
		for _, a := range batch[done:] {
			if a.msg != nil {
				_ = a.msg.Nak()
			}
		}
		if done > 0 {
			rd.applied = batch[done-1].seq
		}
	} else {
		rd.applied = upTo
	}
	var units int64
	for _, a := range batch[:done] {
		for _, c := range a.cmds {
			if n, _ := c.Int64(); n > 0 {
				units += n
			}
		}
		if a.msg != nil {
			_ = a.msg.Ack()
		}
		x.received(source, a.m)
	}
	if units > 0 {
		x.metrics.debits.WithLabelValues(source).Add(float64(units))
	}
	if failed != nil {
		return failed
	}
	return gap
}

// queueApply queues on pipe the apply.lua calls of message m of source
// (one per hash tag with debits, or releases for this region), and
// returns them; it queues nothing for a message with a debit that names
// no state.
func (x *Exchanger) queueApply(ctx context.Context, pipe redis.Pipeliner, source string, m message) ([]*redis.Cmd, error) {
	for _, tb := range m.Tags {
		for _, d := range tb.Debits {
			if _, _, ok := splitField(d.Field); !ok {
				return nil, fmt.Errorf("a debit of seq %d names no state: %q", m.Seq, d.Field)
			}
		}
	}
	var cmds []*redis.Cmd
	if hasWork(m, x.cfg.Region.Name) {
		for _, tb := range m.Tags {
			var releases []release
			for _, r := range tb.Releases {
				if r.To == x.cfg.Region.Name {
					releases = append(releases, r)
				}
			}
			if len(tb.Debits) == 0 && len(releases) == 0 {
				continue
			}
			keys := make([]string, 1, 1+len(tb.Debits)+len(releases))
			keys[0] = statekey.AppliedKey(x.cfg.Prefix, tb.Tag)
			args := make([]any, applyHead, applyHead-2+2*cap(keys))
			args[0], args[1], args[2] = source, m.Seq, m.ClaimedUS
			for _, d := range tb.Debits {
				def, key, _ := splitField(d.Field)
				keys = append(keys, key)
				args = append(args, def, d.Units)
			}
			for _, r := range releases {
				keys = append(keys, statekey.AllotmentKey(x.cfg.Prefix, tb.Tag))
				args = append(args, "r "+string(r.Key), r.Units)
			}
			cmds = append(cmds, applyScript.EvalSha(ctx, pipe, keys, args...))
		}
	}
	return cmds, nil
}

// received notes that message m of source was applied: when the source
// was last heard from, its rebalance report, its lag and that it is up.
func (x *Exchanger) received(source string, m message) {
	x.mu.Lock()
	x.lastSeen[source] = time.Now()
	if m.Demand != nil {
		if r := x.assemble(source, m.Demand, m.Seq, m.AtUS); r != nil {
			x.reports[source] = r
		}
	}
	now := time.Now()
	w := x.lags[source]
	if w == nil {
		w = &lagWindow{}
		x.lags[source] = w
	}
	lag := w.add(now, max(0, now.Sub(time.UnixMicro(m.AtUS)).Seconds()))
	x.mu.Unlock()
	x.metrics.lag.WithLabelValues(source).Set(lag)
	x.metrics.up.WithLabelValues(source).Set(1)
	x.sources[source].Success()
}

// lagWindow keeps the largest lag of the messages of one source applied
// in the current second and in the one before: the lag metric is the
// worst of the last second or two, not only the newest message's (a
// slow message followed by a fast one would otherwise go unseen). The
// interval metric keeps the time between claims the same way.
type lagWindow struct {
	start     time.Time
	cur, prev float64
}

// add records lag (seconds) at now and returns the window's largest.
func (w *lagWindow) add(now time.Time, lag float64) float64 {
	if since := now.Sub(w.start); since >= time.Second {
		w.prev = w.cur
		if since >= 2*time.Second {
			w.prev = 0
		}
		w.cur, w.start = 0, now
	}
	w.cur = max(w.cur, lag)
	return max(w.cur, w.prev)
}

// hasWork reports whether m has debits, or releases for region name.
func hasWork(m message, name string) bool {
	for _, tb := range m.Tags {
		if len(tb.Debits) > 0 || slices.ContainsFunc(tb.Releases, func(r release) bool { return r.To == name }) {
			return true
		}
	}
	return false
}

// splitField cuts an outbox field after its seven numbers: the def and
// window ("alg flags a b c window end") and the state key.
func splitField(f []byte) (def, key string, ok bool) {
	at := 0
	for range 7 {
		i := bytes.IndexByte(f[at:], ' ')
		if i < 0 {
			return "", "", false
		}
		at += i + 1
	}
	return string(f[:at-1]), string(f[at:]), at < len(f)
}

// watch marks a region down when three heartbeats pass without a
// message of it, and logs it (once, every 10 s while it lasts, and when
// it ends: the Monitor's lines).
func (x *Exchanger) watch(ctx context.Context) {
	tick := time.NewTicker(Heartbeat / 2)
	defer tick.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		x.mu.Lock()
		for source, mon := range x.sources {
			seen := x.lastSeen[source]
			if seen.IsZero() {
				seen = start
			}
			if silent := time.Since(seen); silent > 3*Heartbeat {
				x.metrics.up.WithLabelValues(source).Set(0)
				mon.Failure(fmt.Errorf("no message from region %s for %v: it keeps deciding on its own, within the bound of docs/regions.md", source, silent.Round(time.Millisecond)))
			}
		}
		x.mu.Unlock()
	}
}
