package metering

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/limiter"

	"github.com/prometheus/client_golang/prometheus"
)

// Producer publishes batches to the workers. Publishing the same batch
// more than once must be harmless (the consumer side applies a batch ID
// once), so a Publish that failed or timed out may simply be retried.
type Producer interface {
	Publish(ctx context.Context, b Batch) error
}

// AggregatorConfig configures an Aggregator. Zero values take the defaults
// noted.
type AggregatorConfig struct {
	Producer Producer
	// ProducerID starts every batch ID; it must be unique among all
	// processes that ever publish to the same stream (default: 16 random
	// hex digits, new for every process).
	ProducerID string
	// FlushInterval is how often a batch is cut and published (default 1s).
	FlushInterval time.Duration
	// PublishTimeout bounds one publish (default 5s).
	PublishTimeout time.Duration
	// MaxRows bounds the distinct rows held in memory (default 50,000).
	// Past it, new rows lose their resource (OtherResource); past
	// MaxRows × 5/4 they are counted per tenant and hour only (billing
	// stays exact); past MaxRows × 3/2, decisions are dropped and counted.
	MaxRows int
	// MaxIPs bounds the distinct anonymous IP addresses held in memory
	// (default 10,000); more go to OtherIP.
	MaxIPs int
	// TopIPs is how many addresses per minute a batch names (default 100);
	// the rest are summed as OtherIP.
	TopIPs int
	// MaxSettlements bounds the holds' settlements held in memory apart
	// from the rows, one per hold (default 10,000; a batch is cut early at
	// half). Past it, a settlement is summed into the rows as a check is:
	// still counted, but no longer once per hold should it be handed on
	// again elsewhere.
	MaxSettlements int
	// Registerer receives the aggregator's metrics when not nil.
	Registerer prometheus.Registerer
	Log        *slog.Logger
	// Now is the clock for batch creation times (default time.Now).
	Now func() time.Time
}

// Aggregator counts decisions in memory and publishes them in batches. It
// implements enforce.Recorder: Record takes one short mutex and never
// waits for I/O. Safe for concurrent use.
//
// While publishing fails, the batch that failed is kept and retried with
// the same ID, and new decisions keep summing into memory (bounded by
// MaxRows), so an outage costs memory proportional to distinct rows, not
// to decisions.
type Aggregator struct {
	cfg AggregatorConfig
	log *slog.Logger

	mu      sync.Mutex
	rows    map[rowKey]*Counts
	ips     map[int64]map[string]*Counts // minute → ip → counts
	ipCount int
	// spilled are rows and address rows that a decision would have taken
	// past a row's bound (maxRowCount): they go out as they are with the
	// next batch, and their key's row starts again. They count towards
	// MaxRows and MaxIPs.
	spilled    []Row
	spilledIPs []IPRow
	// crossings are the quota thresholds crossed since the last cut; kept
	// even when decisions are dropped (they are few and each is an event).
	crossings []Crossing
	// settlements are the holds settled since the last cut, one per hold
	// (settledHolds: their hashes).
	settlements  []Settlement
	settledHolds map[string]struct{}
	held         int64 // decisions in rows
	stats        Stats

	flushMu sync.Mutex // serialises cut+publish
	seq     uint64
	unsent  *Batch // cut but not yet published; retried as is
	// unsentDecisions mirrors unsent.Decisions() for lock-free reads.
	unsentDecisions atomic.Int64

	wake    chan struct{}
	stopRun context.CancelFunc
	runDone chan struct{}
}

type rowKey struct {
	minute                                            int64
	tenantID, keyID, tier, resource, reason, deniedBy string
}

// row returns the row of k with counts c.
func (k rowKey) row(c Counts) Row {
	return Row{Minute: k.minute, TenantID: k.tenantID, KeyID: k.keyID, Tier: k.tier, Resource: k.resource,
		Reason: k.reason, DeniedBy: k.deniedBy, Counts: c}
}

// Stats are an aggregator's counters since it started.
type Stats struct {
	// Recorded decisions; Dropped ones were lost (memory bound reached,
	// undelivered at Close, or a cost no row can hold); Folded ones lost
	// their resource detail (or, past MaxIPs rows of addresses that
	// passed a row's bound, their address detail);
	// Journaled ones (of Recorded) the store had journaled already, so
	// that only their detail was counted here.
	Recorded, Dropped, Folded, Journaled int64
	// Published batches and decisions; PublishErrors failed attempts.
	Published, PublishedDecisions, PublishErrors int64
}

// NewAggregator returns an aggregator publishing through cfg.Producer.
// Call Start to flush periodically, and Close to flush at shutdown.
func NewAggregator(cfg AggregatorConfig) *Aggregator {
	if cfg.ProducerID == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		cfg.ProducerID = hex.EncodeToString(b)
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = time.Second
	}
	if cfg.PublishTimeout <= 0 {
		cfg.PublishTimeout = 5 * time.Second
	}
	if cfg.MaxRows <= 0 {
		cfg.MaxRows = 50_000
	}
	if cfg.MaxIPs <= 0 {
		cfg.MaxIPs = 10_000
	}
	if cfg.TopIPs <= 0 {
		cfg.TopIPs = 100
	}
	if cfg.MaxSettlements <= 0 {
		cfg.MaxSettlements = 10_000
	}
	cfg.MaxSettlements = min(cfg.MaxSettlements, MaxBatchSettlements)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &Aggregator{cfg: cfg, log: cfg.Log, rows: map[rowKey]*Counts{}, ips: map[int64]map[string]*Counts{},
		settledHolds: map[string]struct{}{}, wake: make(chan struct{}, 1)}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer != nil {
		registerAggregatorMetrics(cfg.Registerer, a)
	}
	return a
}

// ProducerID returns the prefix of this aggregator's batch IDs.
func (a *Aggregator) ProducerID() string { return a.cfg.ProducerID }

// Record counts one decision. It never blocks on I/O.
//
// A row's counts stay within what a batch may carry (2^40 each, some
// 1,100 checks of the check API's largest cost): a decision that would
// take a row past it sends the row out as it is with the next batch, an
// early one, and starts the row again, so that the batch never holds a
// row the worker must refuse. A decision whose cost alone passes the
// bound (no check API accepts one) is dropped and counted.
func (a *Aggregator) Record(ev tollgate.UsageEvent) {
	minute := limiter.FloorDiv(ev.AtUS, 60_000_000) * 60
	var c Counts
	switch {
	case ev.Hold == tollgate.HoldOpened:
		c.Allowed = 1 // its units count when it is settled
	case ev.Hold == tollgate.HoldSettled:
		c.AllowedUnits = ev.Cost
		if ev.Expired {
			c.ExpiredHolds = 1
		}
	case ev.Allowed:
		c.Allowed, c.AllowedUnits = 1, ev.Cost
	default:
		c.Denied, c.DeniedUnits = 1, ev.Cost
	}
	k := rowKey{minute: minute, tenantID: ev.TenantID, keyID: ev.KeyID, tier: ev.Tier,
		resource: ev.Resource, reason: ev.Reason, deniedBy: joinRules(ev.Denied)}
	if k.resource == "" {
		k.resource = "*"
	}
	if ev.Recorded {
		// The store journaled its units: only the detail the journal
		// lacks is left to count.
		a.recordDetail(ev, minute, c)
		return
	}
	if ev.Hold == tollgate.HoldSettled && ev.HoldHash != "" && a.recordSettlement(ev, minute, k.resource) {
		return
	}
	// A crossed threshold is flushed at once rather than at the next
	// tick: its event is due at the receivers within a second of the
	// check (docs/events.md). Crossings are rare (once per tenant,
	// threshold and month), so the early flushes are too.
	wake := len(ev.Crossed) > 0
	a.mu.Lock()
	for _, units := range ev.Crossed {
		a.crossings = append(a.crossings, Crossing{TenantID: ev.TenantID, Units: units, AtUS: ev.AtUS})
	}
	a.stats.Recorded++
	a.held++
	if cur, ok := a.rows[k]; ok && fits(*cur, c) {
		cur.Add(c)
	} else if added := a.add(k, c, a.cfg.MaxRows); added != notAdded {
		wake = wake || added == spilledRow || (added == madeRow && len(a.rows) == a.cfg.MaxRows/2)
	} else if !a.fold(k, c) {
		wake = true
		a.stats.Dropped++
		a.held--
		a.mu.Unlock()
		return
	} else {
		wake = true
	}
	if ev.Tier == tollgate.TierAnonymous && ev.IP != "" {
		a.addIP(minute, ev.IP, c)
	}
	a.mu.Unlock()
	if wake {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
}

// recordDetail counts what the store's journal lacks of ev, a decision
// whose units it journaled: the crossings, and the anonymous caller's
// address (its decisions c, by minute), which a check's journal entry
// does not keep. A hold's settlement is left whole to the journal: its
// entry keeps the address (statekey.HoldUsage), and the worker counts it
// there once per hold, as it counts the units; counted here too, the
// address would count the hold's units again with every answer.
func (a *Aggregator) recordDetail(ev tollgate.UsageEvent, minute int64, c Counts) {
	anonymous := ev.Tier == tollgate.TierAnonymous && ev.IP != "" && ev.Hold != tollgate.HoldSettled
	if len(ev.Crossed) == 0 && !anonymous {
		a.mu.Lock()
		a.stats.Recorded++
		a.stats.Journaled++
		a.mu.Unlock()
		return
	}
	a.mu.Lock()
	for _, units := range ev.Crossed {
		a.crossings = append(a.crossings, Crossing{TenantID: ev.TenantID, Units: units, AtUS: ev.AtUS})
	}
	a.stats.Recorded++
	a.stats.Journaled++
	if anonymous {
		a.addIP(minute, ev.IP, c)
	}
	a.mu.Unlock()
	if len(ev.Crossed) > 0 {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
}

// recordSettlement keeps the settlement ev (of the given minute and
// resource) apart from the rows, once per hold, and reports whether it
// did: false past MaxSettlements, when ev is to be counted in the rows.
func (a *Aggregator) recordSettlement(ev tollgate.UsageEvent, minute int64, resource string) bool {
	st := Settlement{HoldHash: ev.HoldHash, Minute: minute, TenantID: ev.TenantID, KeyID: ev.KeyID, Tier: ev.Tier,
		Resource: resource, Cost: ev.Cost, Expired: ev.Expired}
	if ev.Tier == tollgate.TierAnonymous {
		st.IP = ev.IP
	}
	a.mu.Lock()
	if _, seen := a.settledHolds[st.HoldHash]; seen {
		a.stats.Recorded++
		a.mu.Unlock()
		return true
	}
	if len(a.settlements) >= a.cfg.MaxSettlements {
		a.mu.Unlock()
		return false
	}
	a.stats.Recorded++
	a.settlements = append(a.settlements, st)
	a.settledHolds[st.HoldHash] = struct{}{}
	wake := len(a.settlements) == a.cfg.MaxSettlements/2
	a.mu.Unlock()
	if wake {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// added says what add did.
type added uint8

const (
	notAdded   added = iota
	addedToRow       // counted in k's row
	madeRow          // counted in a new row
	spilledRow       // k's row was full: spilled, and started again from c
)

// add counts c in k's row and says how. Making a row, or spilling a full
// one (its counts go out with the next batch as they are, and the row
// starts again from c), takes a place among the rows held, made only
// while fewer than bound are; c larger than a row is never added. a.mu is
// held.
func (a *Aggregator) add(k rowKey, c Counts, bound int) added {
	cur, ok := a.rows[k]
	switch {
	case ok && fits(*cur, c):
		cur.Add(c)
		return addedToRow
	case !fits(Counts{}, c) || len(a.rows)+len(a.spilled) >= bound:
		return notAdded
	case ok:
		a.spilled = append(a.spilled, k.row(*cur))
		*cur = c
		return spilledRow
	}
	a.rows[k] = &c
	return madeRow
}

// fold counts c in a coarser row once MaxRows rows are held (Redis down,
// or very diverse traffic): first without its resource; past 5/4 of the
// bound, per tenant and hour without key and resource — billing stays
// exact, only detail is lost; past 3/2 of the bound it reports false and
// the decision is dropped (and counted). a.mu is held.
func (a *Aggregator) fold(k rowKey, c Counts) bool {
	k.resource = OtherResource
	if a.add(k, c, a.cfg.MaxRows+a.cfg.MaxRows/4) == notAdded {
		k.minute = limiter.FloorDiv(k.minute, 3600) * 3600
		k.keyID = ""
		if a.add(k, c, a.cfg.MaxRows+a.cfg.MaxRows/2) == notAdded {
			return false
		}
	}
	a.stats.Folded++
	return true
}

// addIP counts c for ip; a.mu is held.
func (a *Aggregator) addIP(minute int64, ip string, c Counts) {
	m := a.ips[minute]
	if m == nil {
		m = map[string]*Counts{}
		a.ips[minute] = m
	}
	if cur, ok := m[ip]; ok {
		a.addToIP(minute, ip, cur, c)
		return
	}
	if a.ipCount >= a.cfg.MaxIPs {
		ip = OtherIP
		if cur, ok := m[ip]; ok {
			a.addToIP(minute, ip, cur, c)
			return
		}
	}
	m[ip] = &c
	a.ipCount++
}

// addToIP counts c in the address row cur of ip and minute; when c would
// take it past a row's bound, the row is spilled as add spills rows.
// Past MaxIPs spilled address rows (some 10^16 anonymous units held in
// memory), c's address detail is not kept; its rows count it. a.mu is
// held.
func (a *Aggregator) addToIP(minute int64, ip string, cur *Counts, c Counts) {
	switch {
	case fits(*cur, c):
		cur.Add(c)
	case len(a.spilledIPs) < a.cfg.MaxIPs && fits(Counts{}, c):
		a.spilledIPs = append(a.spilledIPs, IPRow{Minute: minute, IP: ip, Counts: *cur})
		*cur = c
	default:
		a.stats.Folded++
	}
}

// Start flushes every FlushInterval (and early when many rows are held,
// or a check crossed a quota threshold) until Close.
func (a *Aggregator) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	a.stopRun = cancel
	a.runDone = make(chan struct{})
	go func() {
		defer close(a.runDone)
		a.run(ctx)
	}()
}

func (a *Aggregator) run(ctx context.Context) {
	t := time.NewTicker(a.cfg.FlushInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.wake:
			if failing {
				continue // wait for the next tick rather than hammer a failing store
			}
		}
		fctx, cancel := context.WithTimeout(ctx, a.cfg.PublishTimeout)
		err := a.Flush(fctx)
		cancel()
		switch {
		case err != nil && !failing:
			a.log.Warn("usage: publish failed; keeping counts in memory and retrying", "err", err)
		case err == nil && failing:
			a.log.Info("usage: publishing again")
		}
		failing = err != nil
	}
}

// Flush publishes the batch that failed before, if any, then cuts and
// publishes everything recorded so far. On error the unpublished batch is
// kept for the next Flush; nothing is lost.
func (a *Aggregator) Flush(ctx context.Context) error {
	a.flushMu.Lock()
	defer a.flushMu.Unlock()
	for range 2 {
		if a.unsent == nil {
			a.unsent = a.cut()
			if a.unsent == nil {
				return nil
			}
		}
		if err := a.cfg.Producer.Publish(ctx, *a.unsent); err != nil {
			a.mu.Lock()
			a.stats.PublishErrors++
			a.mu.Unlock()
			return fmt.Errorf("usage: publish batch %s: %w", a.unsent.ID, err)
		}
		a.mu.Lock()
		a.stats.Published++
		a.stats.PublishedDecisions += a.unsent.Decisions()
		a.mu.Unlock()
		a.unsent = nil
		a.unsentDecisions.Store(0)
	}
	return nil
}

// Close stops the periodic flush and publishes what is left, retrying
// until ctx ends. Decisions still unpublished then are counted as dropped
// and reported in the error.
func (a *Aggregator) Close(ctx context.Context) error {
	if a.stopRun != nil {
		a.stopRun()
		<-a.runDone
	}
	var err error
	for {
		if err = a.Flush(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			lost := a.pendingDecisions()
			a.mu.Lock()
			a.stats.Dropped += lost
			a.mu.Unlock()
			return fmt.Errorf("usage: %d decisions not published at shutdown: %w", lost, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pendingDecisions counts decisions held in memory, not yet published.
func (a *Aggregator) pendingDecisions() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.held + a.unsentDecisions.Load()
}

// Stats returns the aggregator's counters.
func (a *Aggregator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// cut takes everything recorded so far as a new batch, or nil when there
// is nothing. flushMu is held.
func (a *Aggregator) cut() *Batch {
	a.mu.Lock()
	rows, ips, crossings, settlements := a.rows, a.ips, a.crossings, a.settlements
	spilled, spilledIPs := a.spilled, a.spilledIPs
	if len(rows) == 0 && len(ips) == 0 && len(crossings) == 0 && len(settlements) == 0 {
		a.mu.Unlock()
		return nil
	}
	a.crossings, a.settlements = nil, nil
	a.spilled, a.spilledIPs = nil, nil
	if len(settlements) > 0 {
		a.settledHolds = map[string]struct{}{}
	}
	a.rows = make(map[rowKey]*Counts, len(rows))
	a.ips = map[int64]map[string]*Counts{}
	a.ipCount = 0
	// The cut batch's decisions move to unsentDecisions before mu is
	// released, so pendingDecisions never misses them.
	a.unsentDecisions.Store(a.held)
	a.held = 0
	a.mu.Unlock()

	a.seq++
	b := &Batch{Version: 1, ID: a.cfg.ProducerID + ":" + strconv.FormatUint(a.seq, 10),
		CreatedUS: a.cfg.Now().UnixMicro(), Rows: make([]Row, 0, len(rows)+len(spilled)), Crossings: crossings, Settlements: settlements}
	// A spilled row and its key's row both go out in this batch: the
	// worker merges rows of the same dimensions before it writes them.
	b.Rows = append(b.Rows, spilled...)
	for k, c := range rows {
		b.Rows = append(b.Rows, k.row(*c))
	}
	minutes := make([]int64, 0, len(ips))
	for m := range ips {
		minutes = append(minutes, m)
	}
	sort.Slice(minutes, func(i, j int) bool { return minutes[i] < minutes[j] })
	for _, m := range minutes {
		b.IPs = append(b.IPs, topIPs(m, ips[m], a.cfg.TopIPs)...)
	}
	// A spilled address row names its address whatever its rank.
	b.IPs = append(b.IPs, spilledIPs...)
	return b
}

// topIPs returns the n addresses with the most decisions in one minute
// (ties by address) and an OtherIP row summing the rest: more than one
// when their sum passes a row's bound.
func topIPs(minute int64, m map[string]*Counts, n int) []IPRow {
	list := make([]IPRow, 0, len(m))
	var others []IPRow
	addOther := func(c Counts) {
		if last := len(others) - 1; last >= 0 && fits(others[last].Counts, c) {
			others[last].Add(c)
			return
		}
		others = append(others, IPRow{Minute: minute, IP: OtherIP, Counts: c})
	}
	for ip, c := range m {
		if ip == OtherIP {
			addOther(*c)
			continue
		}
		list = append(list, IPRow{Minute: minute, IP: ip, Counts: *c})
	}
	sort.Slice(list, func(i, j int) bool {
		if a, b := list[i].Decisions(), list[j].Decisions(); a != b {
			return a > b
		}
		return list[i].IP < list[j].IP
	})
	if len(list) > n {
		for _, r := range list[n:] {
			addOther(r.Counts)
		}
		list = list[:n]
	}
	return append(list, others...)
}

func registerAggregatorMetrics(reg prometheus.Registerer, a *Aggregator) {
	stat := func(f func(Stats) int64) func() float64 {
		return func() float64 { return float64(f(a.Stats())) }
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_usage_recorded_total", Help: "Decisions counted by the usage aggregator.",
		}, stat(func(s Stats) int64 { return s.Recorded })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_usage_journaled_total",
			Help: "Decisions whose units the limiter store journaled when it decided them (of tollgate_usage_recorded_total).",
		}, stat(func(s Stats) int64 { return s.Journaled })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_usage_dropped_total",
			Help: "Decisions lost by the usage aggregator: memory bound reached, or not published by shutdown.",
		}, stat(func(s Stats) int64 { return s.Dropped })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_usage_folded_total",
			Help: "Decisions counted without their resource, or without their anonymous address (a memory bound reached); totals stay exact.",
		}, stat(func(s Stats) int64 { return s.Folded })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_usage_batches_published_total", Help: "Usage batches published.",
		}, stat(func(s Stats) int64 { return s.Published })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tollgate_usage_publish_errors_total", Help: "Failed attempts to publish a usage batch (retried).",
		}, stat(func(s Stats) int64 { return s.PublishErrors })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_usage_unpublished_decisions", Help: "Decisions held in memory, not yet published.",
		}, func() float64 { return float64(a.pendingDecisions()) }),
	)
}
