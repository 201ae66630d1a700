// Package redisstore keeps limiter state in Redis, a single server or a
// Cluster: check.lua, the Lua twin of the limiter package's algorithms,
// decides checks with time from Redis's TIME. A Store from New runs each
// check in its own script call; one from NewBatching coalesces concurrent
// checks into one call (one per hash slot on a Cluster), still deciding
// each check atomically and all-or-nothing, in arrival order.
package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/backoff"
	"github.com/tollgate/tollgate/internal/limiter"
)

//go:embed check.lua
var checkLua string

// checkScript is check.lua with rate.lua and calendar.lua where it says
// so. It is loaded
// once per Redis server; calls fall back from EVALSHA to EVAL on NOSCRIPT
// (after SCRIPT FLUSH or a restart).
var checkScript = redis.NewScript(splice(splice(checkLua, "--[[rate.lua]]", rateLua), "--[[calendar.lua]]", calendarLua))

// Store keeps limiter state in Redis (single server or Cluster). It is
// safe for concurrent use.
type Store struct {
	client redis.Scripter
	// cluster is set when client is a Cluster client: a call may then
	// only hold keys of one hash slot.
	cluster *redis.ClusterClient
	// background is the store's work in the background (listLater),
	// which Close stops.
	background *background
	// Log receives what the store does in the background, where no
	// caller hears of it: a hold it could not list for expiry
	// (listLater). nil: the logger SetLogger was given, if any.
	Log *slog.Logger
	// ExtraTTL is added to every key's time to live. Tests that inject a
	// clock running slower than Redis's set it so that keys do not expire
	// in real time before they would in the test's time; production
	// leaves it 0.
	ExtraTTL time.Duration
	// HoldIndex is the sorted set listing open holds by expiry, for
	// ExpireDue (default "tg:holds"; one key, so on a Cluster one slot).
	HoldIndex string
	// NoLean sends every call to check.lua, also those lean.lua would
	// decide (the same way, for less Redis CPU); for comparisons.
	NoLean bool
	// WaitReplicas, when > 0, makes every call that carries money — a
	// check with a hold, or drawing on a prepaid balance, or counting a
	// rule that is money (limiter.Batch.Money); a settlement or expiry
	// of a hold — answer only once that many replicas have acknowledged
	// its writes: Redis's WAIT, sent in the same pipeline right after the
	// script call, so at no extra round trip (replicas.go). A call whose
	// writes fewer replicas acknowledge within WaitTimeout fails with an
	// error wrapping limiter.ErrNotReplicated, its writes standing on
	// the primary. Calls without money never wait. 0 (the default)
	// waits for none.
	WaitReplicas int
	// WaitTimeout bounds the wait for replicas (whole milliseconds, at
	// least one; 0 means 50ms). It must be shorter than the client's
	// read timeout, which bounds the whole call.
	WaitTimeout time.Duration

	batcher *batcher
}

// New returns a store on client (a *redis.Client, *redis.ClusterClient or
// anything else that runs scripts) that runs every check in a script call
// of its own.
func New(client redis.Scripter) *Store {
	s := &Store{client: client, background: newBackground()}
	s.cluster, _ = client.(*redis.ClusterClient)
	return s
}

// Close stops the store's work in the background and waits for it: the
// holds it was still listing for expiry (listLater) are logged as not
// listed. It does not close the client, which the caller owns; a check
// after Close is decided as before, but a hold it could not list at once
// is not tried again. Close may be called more than once.
func (s *Store) Close() {
	for _, l := range s.background.close() {
		s.notListed(l.hold, l.expireUS, "the store closed", l.err)
	}
}

// BatchConfig configures a batching store.
type BatchConfig struct {
	// MaxChecks bounds the checks and the operations that follow them
	// (ops.go) taken together (default 128), and so how long one call
	// keeps Redis busy.
	MaxChecks int
	// MaxInFlight is how many calls may be under way at once (default 1).
	// With 1, checks reach Redis strictly in arrival order; more overlap
	// round trips but may reorder checks of different calls.
	MaxInFlight int
	// Timeout, when > 0, bounds how long a check waits from its arrival,
	// queueing included (the context's deadline when earlier): the store
	// is then a limiter.SelfTimed.
	Timeout time.Duration
	// Operations queues the operations that follow checks (settlements
	// of holds, renewals and releases of leases: ops.go) with the checks,
	// to go out together in one ops.lua call after the checks' call,
	// instead of a call of their own each. It saves Redis most of the
	// operations' calls (docs/benchmarks.md, "Settlements and releases in
	// the batch"), at a cost: the checks of a run that holds operations
	// are answered after both calls, and one failed or timed-out
	// operations call fails every operation in it (those Redis applied
	// already are then answered as repeated when retried).
	Operations bool
	// Linger, when > 0, is the longest a check that would go out alone
	// waits for others to share its call. It waits only while checks
	// arrive at least twice per Linger on average, and at most until
	// as many have queued as that rate promises; at lower rates a lone
	// check goes out at once.
	Linger time.Duration
}

// NewBatching returns a store on client that coalesces concurrent checks:
// a check that arrives while no call is under way goes out at once, alone;
// checks that arrive while one is under way wait for it and go out
// together in the next call (up to MaxChecks), in arrival order. On a
// Cluster the call is one script call per hash slot, sent in one pipeline.
// Each check is still decided atomically and all-or-nothing. With
// Operations, settlements of holds and renewals and releases of leases
// queue with the checks and go out with them, in an ops.lua call of
// their own after the checks' (per hash slot on a Cluster): a hold or a
// lease costs Redis a share of two calls, not a call of its own.
func NewBatching(client redis.Scripter, cfg BatchConfig) *Store {
	s := New(client)
	if cfg.MaxChecks <= 0 {
		cfg.MaxChecks = 128
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 1
	}
	s.batcher = &batcher{store: s, max: cfg.MaxChecks, lanes: cfg.MaxInFlight, timeout: cfg.Timeout, linger: cfg.Linger,
		ops: cfg.Operations}
	if cfg.Linger > 0 {
		s.batcher.clock = time.Now
		s.batcher.start = time.Now()
		s.batcher.meanGap = 2 * cfg.Linger // quiet until shown otherwise
		s.batcher.wake = make(chan struct{}, 1)
		s.batcher.timer = time.NewTimer(time.Hour)
		s.batcher.timer.Stop()
	}
	return s
}

// CheckTimeout returns BatchConfig.Timeout of a batching store that has
// one; ok is false for other stores, which rely on the context.
func (s *Store) CheckTimeout() (d time.Duration, ok bool) {
	if s.batcher == nil || s.batcher.timeout <= 0 {
		return 0, false
	}
	return s.batcher.timeout, true
}

// Check decides the batch: in a script call of its own, or, on a batching
// store, in the next call that goes out. ctx's deadline bounds the wait.
// It returns ErrEmptyBatch or ErrNegativeCost for such batches.
func (s *Store) Check(ctx context.Context, b limiter.Batch) (limiter.Outcome, error) {
	if err := b.Validate(); err != nil {
		return limiter.Outcome{}, err
	}
	for _, r := range b.Requests {
		if !r.Params.Algorithm.Valid() {
			return limiter.Outcome{}, fmt.Errorf("redisstore: check: unknown algorithm %q", r.Params.Algorithm)
		}
	}
	var out limiter.Outcome
	var err error
	if s.batcher != nil {
		out, err = s.batcher.check(ctx, b)
	} else {
		p := pending{batch: b}
		one := [1]*pending{&p}
		s.run(ctx, one[:])
		out, err = p.out, p.err
	}
	// A hold admitted but not yet confirmed on a replica stands on the
	// server all the same: it is listed for expiry too.
	if (err == nil || errors.Is(err, limiter.ErrNotReplicated)) && b.Hold != nil && out.Admitted && s.cluster != nil {
		expireUS := out.NowUS + b.Hold.TTLUS
		if ierr := s.indexHold(ctx, b.Hold, expireUS); ierr != nil {
			// The hold stands, charged, on its record's node: the
			// decision is answered (its ID lets the caller settle it)
			// and the listing is tried again until it takes.
			s.listLater(*b.Hold, expireUS, ierr)
			if err == nil {
				err = fmt.Errorf("%w: %w", limiter.ErrHoldNotListed, ierr)
			}
		}
	}
	return out, err
}

// Listing a hold in the background (listLater): at most maxListing at
// once, each tried for listLaterFor, waits doubling from firstListWait up
// to maxListWait, each attempt bounded by listAttemptTimeout.
const (
	maxListing         = 4096
	listLaterFor       = 10 * time.Minute
	firstListWait      = 50 * time.Millisecond
	maxListWait        = 5 * time.Second
	listAttemptTimeout = 2 * time.Second
)

// background runs a store's goroutines (listLater) until close, which
// cancels them and waits for them. Its clock and wait are time.Now and
// backoff.Sleep; tests replace them.
type background struct {
	ctx    context.Context
	cancel context.CancelFunc
	now    func() time.Time
	sleep  func(ctx context.Context, d time.Duration) error
	// max bounds the holds listed at once (maxListing).
	max int

	mu      sync.Mutex
	closed  bool
	listing map[*listing]struct{} // the holds being listed
	wg      sync.WaitGroup
}

// listing is a hold listed in the background, and the last error its
// listing met.
type listing struct {
	hold     limiter.Hold
	expireUS int64
	err      error
}

func newBackground() *background {
	ctx, cancel := context.WithCancel(context.Background())
	return &background{ctx: ctx, cancel: cancel, now: time.Now, sleep: backoff.Sleep, max: maxListing,
		listing: map[*listing]struct{}{}}
}

// start runs f on l in a goroutine of its own, unless the store is closed
// or max holds are being listed already: ok false then.
func (b *background) start(l *listing, f func(*listing)) (ok bool, why string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return false, "the store closed"
	case len(b.listing) >= b.max:
		return false, fmt.Sprintf("%d holds are being listed already", b.max)
	}
	b.listing[l] = struct{}{}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f(l)
	}()
	return true, ""
}

// done forgets l: its listing took, or ended.
func (b *background) done(l *listing) {
	b.mu.Lock()
	delete(b.listing, l)
	b.mu.Unlock()
}

// close cancels the goroutines, waits for them, and returns the holds
// they had not listed (nil on a second call).
func (b *background) close() []*listing {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.cancel()
	b.mu.Unlock()
	b.wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	left := make([]*listing, 0, len(b.listing))
	for l := range b.listing {
		left = append(left, l)
	}
	clear(b.listing)
	return left
}

// listLater lists hold h for expiry at expireUS in the background, until
// the index takes it (adding it again is harmless), listLaterFor has
// passed or the store is closed. A hold never listed never expires: its
// estimate stays charged until it is settled. So a hold given up, or not
// tried at all because maxListing are being listed already, is logged at
// error level with what lists it by hand: every one, each a hold that
// stays charged (a line gated as outages are would lose the keys of the
// holds it held back).
func (s *Store) listLater(h limiter.Hold, expireUS int64, err error) {
	b := s.background
	l := &listing{hold: h, expireUS: expireUS, err: err}
	if ok, why := b.start(l, s.list); !ok {
		s.notListed(h, expireUS, why, err)
	}
}

// list is listLater's goroutine.
func (s *Store) list(l *listing) {
	b := s.background
	wait := firstListWait
	for deadline := b.now().Add(listLaterFor); b.now().Before(deadline); wait = min(2*wait, maxListWait) {
		if b.sleep(b.ctx, wait) != nil {
			return // closed: Close logs it
		}
		ctx, cancel := context.WithTimeout(b.ctx, listAttemptTimeout)
		err := s.indexHold(ctx, &l.hold, l.expireUS)
		cancel()
		if err == nil {
			b.done(l)
			return
		}
		if b.ctx.Err() != nil {
			return // closed: Close logs it
		}
		l.err = err
	}
	b.done(l)
	s.notListed(l.hold, l.expireUS, "gave up after "+listLaterFor.String(), l.err)
}

// notListed logs that hold h, expiring at expireUS, was not listed for
// expiry, why, and the last error listing it met.
func (s *Store) notListed(h limiter.Hold, expireUS int64, why string, err error, attrs ...any) {
	log := s.Log
	if log == nil {
		log = goRedisLog.Load()
	}
	if log == nil {
		return
	}
	log.Error("redisstore: hold not listed for expiry; it stays charged until settled",
		append([]any{"reason", why, "index", s.holdIndex(), "hold_key", h.Key, "expire_us", expireUS, "err", err}, attrs...)...)
}

// pending is one check, or one settlement, on its way through a call.
type pending struct {
	batch    limiter.Batch
	deadline time.Time // zero: none
	out      limiter.Outcome
	err      error

	// op is 0 for a check, else an operation that follows checks (ops.go)
	// on the record at opKey, with its cost and time, a settlement's
	// credit terms (nil: the hold's), and its reply.
	op        int
	opKey     string
	opCost    int64
	opNowUS   int64
	opCredits *limiter.Credits
	reply     []any

	// done is signalled once the check is decided, or when it is to
	// lead the call in lead.
	done chan struct{}
	lead []*pending
}

// execute decides checks in as few script calls as the server allows,
// bounded by the earliest deadline among them; checks past their deadline
// are not sent. The operations among them that follow checks (ops.go)
// go in calls of their own, after the checks'.
func (s *Store) execute(checks []*pending) {
	now := time.Now()
	var deadline time.Time
	expired := false
	for _, p := range checks {
		switch {
		case p.deadline.IsZero():
		case !now.Before(p.deadline):
			expired = true
		case deadline.IsZero() || p.deadline.Before(deadline):
			deadline = p.deadline
		}
	}
	live := checks
	if expired {
		live = make([]*pending, 0, len(checks))
		for _, p := range checks {
			if !p.deadline.IsZero() && !now.Before(p.deadline) {
				p.err = fmt.Errorf("redisstore: %s: %w", p.what(), context.DeadlineExceeded)
				continue
			}
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return
	}
	ctx := context.Background()
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	live, ops := splitOps(live)
	switch {
	case len(live) == 0:
	case s.cluster == nil || len(live) == 1:
		s.run(ctx, live)
	default:
		s.runBySlot(ctx, live)
	}
	if len(ops) > 0 {
		s.runOps(ctx, ops)
	}
}

// run decides checks in one script call.
func (s *Store) run(ctx context.Context, checks []*pending) {
	c := getCall()
	defer putCall(c)
	script, args := s.prepare(c, checks)
	if s.waitsFor(checks) {
		// checks are not handed on: on the plain path, a check of a
		// store without batching stays on its caller's stack.
		reply, err, unconfirmed := s.runConfirmed(ctx, script, c.keys, args)
		c.decode(checks, reply, err)
		failMoney(checks, unconfirmed)
		return
	}
	reply, err := script.Run(ctx, s.client, c.keys, args...).Text()
	c.decode(checks, reply, err)
}

// scriptArgs returns check.lua's ARGV for c: the batch, the hold index
// (none on a Cluster, where it lives in another slot: Check lists holds
// after the call) and the IDs of the holds checks open.
func (s *Store) scriptArgs(c *call, checks []*pending) []any {
	index := s.holdIndex()
	if s.cluster != nil {
		index = ""
	}
	c.args = append(c.args[:0], c.arg, index)
	for _, p := range checks {
		b := &p.batch
		if b.Hold != nil {
			c.args = append(c.args, b.Hold.ID)
		}
		if journals(b) {
			c.args = append(c.args, b.Usage)
			if b.Hold != nil {
				c.args = append(c.args, b.Hold.Usage)
			}
		}
	}
	return c.args
}

// runBySlot decides checks on a Cluster: one script call per hash slot
// (every key of one check shares a hash tag), all sent in one pipeline;
// go-redis sends each node its calls at once.
func (s *Store) runBySlot(ctx context.Context, checks []*pending) {
	order, groups := bySlot(checks, func(p *pending) string { return firstKey(p.batch) })
	if len(order) == 1 {
		s.run(ctx, checks)
		return
	}
	if s.waitsFor(checks) {
		s.runBySlotConfirmed(ctx, order, groups)
		return
	}
	calls := make([]*call, len(order))
	cmds := make([]*redis.Cmd, len(order))
	scripts := make([]*redis.Script, len(order))
	_, _ = s.cluster.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, sl := range order {
			calls[i] = getCall()
			scripts[i], _ = s.prepare(calls[i], groups[sl]) // the arguments are calls[i].args
			cmds[i] = scripts[i].EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		return nil
	})
	for i, sl := range order {
		reply, err := cmds[i].Text()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			reply, err = scripts[i].Run(ctx, s.client, calls[i].keys, calls[i].args...).Text()
		}
		calls[i].decode(groups[sl], reply, err)
		putCall(calls[i])
	}
}

// runBySlotConfirmed is runBySlot for checks among which some carry
// money, on a store that waits for replicas: one pipeline per master
// node, each ending with WAIT (replicas.go).
func (s *Store) runBySlotConfirmed(ctx context.Context, order []int, groups map[int][]*pending) {
	calls := make([]*call, len(order))
	gs := make([]*slotGroup, len(order))
	for i, sl := range order {
		calls[i] = getCall()
		script, args := s.prepare(calls[i], groups[sl])
		gs[i] = &slotGroup{call: scriptCall{script: script, keys: calls[i].keys, args: args}, pending: groups[sl]}
	}
	s.runByNode(ctx, gs)
	for i, g := range gs {
		g.decodeChecks(calls[i])
		putCall(calls[i])
	}
}

// bySlot groups ps by the hash slot of each one's key, the slots in order
// of first appearance.
func bySlot(ps []*pending, key func(*pending) string) (order []int, groups map[int][]*pending) {
	groups = map[int][]*pending{}
	for _, p := range ps {
		sl := slot(key(p))
		if _, ok := groups[sl]; !ok {
			order = append(order, sl)
		}
		groups[sl] = append(groups[sl], p)
	}
	return order, groups
}

// call is one script call's arguments and reply, reused through callPool.
type call struct {
	// credits counts the numbers the checks that draw on a prepaid balance
	// add to the batch; balances are those balances' counter keys, in
	// order of first use (a balance's keys and numbers go once per call).
	credits  int
	balances []string
	keys     []string
	arg      []byte
	defs     []limiter.Params
	refs     []int64
	ints     []int64
	args     []any
}

var callPool = sync.Pool{New: func() any { return new(call) }}

func getCall() *call { return callPool.Get().(*call) }

func putCall(c *call) {
	clear(c.keys) // let the keys go
	clear(c.args)
	clear(c.balances)
	c.keys, c.arg, c.defs, c.refs, c.ints, c.args = c.keys[:0], c.arg[:0], c.defs[:0], c.refs[:0], c.ints[:0], c.args[:0]
	c.credits, c.balances = 0, c.balances[:0]
	callPool.Put(c)
}

// def returns the number (from 1) of p among the call's rule parameters.
func (c *call) def(p limiter.Params) int64 {
	for i := range c.defs {
		if c.defs[i] == p {
			return int64(i + 1)
		}
	}
	c.defs = append(c.defs, p)
	return int64(len(c.defs))
}

// encode lays out checks as check.lua's KEYS and ARGV[1].
func (c *call) encode(checks []*pending, extraTTLMS int64) {
	report := int64(0)
	for _, p := range checks {
		if p.batch.ReportState {
			report = 1
		}
		leased := false
		for _, r := range p.batch.Requests {
			ref := c.def(r.Params) * refDef
			if r.Shadow {
				ref += refShadow
			}
			c.refs = append(c.refs, ref)
			c.keys = append(c.keys, r.Key)
			leased = leased || r.Params.Algorithm == limiter.Concurrency
		}
		if h := p.batch.Hold; h != nil {
			c.keys = append(c.keys, h.Key)
		}
		if leased {
			c.keys = append(c.keys, leaseKey(p.batch))
		}
		if cr := p.batch.Credits; cr != nil {
			c.credits++
			if _, first := c.balance(cr.Key); first {
				c.keys = append(c.keys, cr.Key, cr.Log)
				c.credits += 3 + 2*len(cr.Expiring)
			}
		}
	}
	c.appendJournal(checks)
	c.balances = c.balances[:0]
	n := 3 + 5*len(c.defs) + 5*len(checks) + len(c.refs) + c.credits
	b := appendArrayHeader(c.arg, n)
	b = appendInt(b, extraTTLMS)
	b = appendInt(b, report)
	b = appendInt(b, int64(len(c.defs)))
	for _, p := range c.defs {
		b = appendInt(b, algorithmCode(p.Algorithm))
		b = appendInt(b, flags(p))
		b = appendDef(b, p)
	}
	refs := c.refs
	for _, p := range checks {
		b = appendInt(b, p.batch.NowUS)
		b = appendInt(b, p.batch.Cost)
		b = appendInt(b, checkOpts(p.batch))
		b = appendInt(b, int64(len(p.batch.Requests)))
		b = appendInt(b, holdField(p.batch.Hold))
		for range p.batch.Requests {
			b = appendInt(b, refs[0])
			refs = refs[1:]
		}
		if cr := p.batch.Credits; cr != nil {
			ref, first := c.balance(cr.Key)
			b = appendInt(b, ref)
			if first {
				b = appendInt(appendInt(appendInt(b, cr.Line), cr.Overdraft), int64(len(cr.Expiring)))
				for _, e := range cr.Expiring {
					b = appendInt(appendInt(b, e.AtUS), e.Units)
				}
			}
		}
	}
	c.arg = b
}

// balance returns the number (from 1) in the call of the balance whose
// counter is key, and whether this is its first use.
func (c *call) balance(key string) (ref int64, first bool) {
	for i, k := range c.balances {
		if k == key {
			return int64(i + 1), false
		}
	}
	c.balances = append(c.balances, key)
	return int64(len(c.balances)), true
}

// firstKey returns a key of b, which names its hash slot.
func firstKey(b limiter.Batch) string {
	if len(b.Requests) > 0 {
		return b.Requests[0].Key
	}
	return b.Credits.Key
}

// checkOpts returns check.lua's opts of a check: the sum of the opt*
// values that apply.
func checkOpts(b limiter.Batch) int64 {
	var o int64
	if b.DryRun {
		o += optDryRun
	}
	if b.Credits != nil {
		o += optCredits
		if b.Credits.Overage {
			o += optCreditOverage
		}
	}
	if journals(&b) {
		o += optUsage
	}
	return o
}

// leaseKey returns the key check.lua finds after a check's rule keys (and
// hold key) when it has a concurrency rule: its lease's, or for a check
// that takes no lease (a dry run, a cost of 0), its first rule's key,
// which the script then never writes as a lease but which keeps the
// call's keys in one hash slot.
func leaseKey(b limiter.Batch) string {
	if b.Lease != nil && b.Lease.Key != "" {
		return b.Lease.Key
	}
	return b.Requests[0].Key
}

// holdField returns check.lua's hold number of a check: 0 for none, else
// the hold's time to live (µs) × holdTTL, + holdCharge when it is
// charged on expiry.
func holdField(h *limiter.Hold) int64 {
	if h == nil {
		return 0
	}
	f := h.TTLUS * holdTTL
	if h.ChargeOnExpiry {
		f += holdCharge
	}
	return f
}

// appendDef appends the three numbers check.lua reads of p (defNumbers).
func appendDef(b []byte, p limiter.Params) []byte {
	x, y, z := defNumbers(p)
	return appendInt(appendInt(appendInt(b, x), y), z)
}

var errShortReply = errors.New("redisstore: check: reply too short")

// decode hands every check its outcome from reply (or err).
func (c *call) decode(checks []*pending, reply string, err error) {
	if err == nil {
		c.ints, err = decodeInts(c.ints[:0], reply)
	}
	if err != nil {
		for _, p := range checks {
			p.err = fmt.Errorf("redisstore: check: %w", err)
		}
		return
	}
	v := c.ints
	report := false
	for _, p := range checks {
		report = report || p.batch.ReportState
	}
	for _, p := range checks {
		n := len(p.batch.Requests)
		if len(v) < 2+5*n {
			p.err = errShortReply
			continue
		}
		// v[1] is 0, 1 or admittedUnjournaled (the journal was at its cap).
		out := limiter.Outcome{NowUS: v[0], Admitted: v[1] == 1 || v[1] == admittedUnjournaled, Results: make([]limiter.Result, n)}
		out.Recorded = v[1] == 1 && journals(&p.batch)
		v = v[2:]
		for i := range n {
			out.Results[i] = limiter.Result{Allowed: v[0] == 1, Remaining: v[1], ResetAfterUS: v[2], RetryAfterUS: v[3], DelayUS: v[4], Unknown: v[0] == 2}
			v = v[5:]
		}
		if p.batch.Credits != nil {
			if len(v) < 4 {
				p.err = errShortReply
				continue
			}
			out.Credits = limiter.CreditResult{Allowed: v[0]%2 == 1, Unknown: v[0] >= 2, Balance: v[1], Drawn: v[2], Overage: v[3]}
			v = v[4:]
		}
		if !out.Admitted && report {
			if len(v) < 3*n {
				p.err = errShortReply
				continue
			}
			if p.batch.ReportState {
				out.States = make([]limiter.RuleState, n)
				for i, r := range p.batch.Requests {
					out.States[i] = limiter.NewRuleState(r.Params.Algorithm, v[3*i], v[3*i+1], v[3*i+2])
				}
			}
			v = v[3*n:]
		}
		p.out = out
	}
}

// LoadScript loads the check script into every server the client knows, so
// that the first checks do not pay for EVAL.
func LoadScript(ctx context.Context, client redis.Scripter) error {
	for _, script := range []*redis.Script{checkScript, leanScript, lean1Script} {
		if err := script.Load(ctx, client).Err(); err != nil {
			return fmt.Errorf("redisstore: load script: %w", err)
		}
	}
	return nil
}

// ScriptHash is the SHA1 under which Redis caches check.lua.
func ScriptHash() string { return checkScript.Hash() }
