package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
)

// batcher coalesces concurrent checks, and the operations that follow
// them (ops.go), into script calls (a check below is either). There is
// no timer
// and no window of time: a check that finds a lane free goes out at once
// (alone, if nothing else is waiting); checks that arrive while every lane
// is busy queue, and when a call returns, the checks queued meanwhile go
// out together in the next one. The check at the head of the queue leads
// that call in its own goroutine, so no goroutine is started per call and
// the one that led the last call is free to answer its own request.
//
// With a linger, a check that would go out alone waits up to that long
// for company, but only while checks arrive often enough that company is
// expected: the mean gap between arrivals is at most half the linger.
// Below that rate a lone check still goes out at once, so the linger
// costs no latency where it would buy nothing; above it, a few checks
// share each call and Redis pays its per-call cost once for them.
type batcher struct {
	store   *Store
	max     int           // checks per call
	lanes   int           // calls under way at most
	timeout time.Duration // a check's wait at most; 0: its context's deadline
	linger  time.Duration // a lone check's wait for company at most; 0: none
	ops     bool          // operations queue with the checks (BatchConfig.Operations)

	mu    sync.Mutex
	queue []*pending
	busy  int // calls under way

	// With a linger: the last arrival (monotonic, since start) and
	// the mean gap between arrivals, a moving average.
	start      time.Time
	lastArrive time.Duration
	meanGap    time.Duration
	// lingering is set while a check waits for company (until it has
	// taken its call); want is the queue length that ends the wait
	// early, signalled once on wake (woken).
	lingering bool
	woken     bool
	want      int
	wake      chan struct{}
	timer     *time.Timer
	clock     func() time.Time // arrival times; tests inject one

	calls atomic.Int64 // calls led, for tests
}

// lingerFor reports how many checks a lone check arriving now should wait
// for (0: go out at once), and notes the arrival; b.mu is held.
func (b *batcher) lingerFor(now time.Time) int {
	at := now.Sub(b.start)
	gap := at - b.lastArrive
	b.lastArrive = at
	// A moving average over about eight arrivals; a long pause counts
	// as at most twice the linger, so that the rate is relearnt quickly.
	gap = min(gap, 2*b.linger)
	b.meanGap += (gap - b.meanGap) / 8
	if b.busy >= b.lanes || len(b.queue) != 1 || b.lingering || 2*b.meanGap > b.linger {
		return 0
	}
	return min(b.max, 1+int(b.linger/b.meanGap))
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

var runPool = sync.Pool{New: func() any { return new([]*pending) }}

// check decides batch in the next call that goes out.
func (b *batcher) check(ctx context.Context, batch limiter.Batch) (limiter.Outcome, error) {
	p := pendingPool.Get().(*pending)
	p.batch = batch
	b.wait(ctx, p)
	out, err := p.out, p.err
	*p = pending{done: p.done}
	pendingPool.Put(p)
	return out, err
}

// op runs an operation that follows checks (ops.go) in the next call
// that goes out (the operations' own call, after the checks').
func (b *batcher) op(ctx context.Context, op int, key string, cost, nowUS int64, credits *limiter.Credits) ([]any, error) {
	p := pendingPool.Get().(*pending)
	p.op, p.opKey, p.opCost, p.opNowUS, p.opCredits = op, key, cost, nowUS, credits
	b.wait(ctx, p)
	reply, err := p.reply, p.err
	*p = pending{done: p.done}
	pendingPool.Put(p)
	return reply, err
}

// wait queues p and returns once it is decided, leading calls meanwhile
// when its turn comes.
func (b *batcher) wait(ctx context.Context, p *pending) {
	p.deadline, _ = ctx.Deadline()
	if b.timeout > 0 {
		if own := time.Now().Add(b.timeout); p.deadline.IsZero() || own.Before(p.deadline) {
			p.deadline = own
		}
	}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	var run []*pending
	want := 0
	if b.linger > 0 {
		want = b.lingerFor(b.clock())
		if b.lingering && !b.woken && len(b.queue) >= b.want {
			b.woken = true
			b.wake <- struct{}{}
		}
	}
	if b.busy < b.lanes {
		b.busy++
		if want > 0 {
			b.lingering, b.want = true, want
		} else {
			run = b.takeLocked()
		}
	}
	b.mu.Unlock()
	if want > 0 {
		run = b.waitForCompany()
	}
	for {
		if run != nil {
			b.lead(run)
		}
		<-p.done
		if run, p.lead = p.lead, nil; run == nil {
			break
		}
	}
}

// waitForCompany is the lingering check's wait: until enough checks have
// queued or the linger is over; it returns the call to lead.
func (b *batcher) waitForCompany() []*pending {
	b.timer.Reset(b.linger)
	select {
	case <-b.wake:
		b.timer.Stop()
	case <-b.timer.C:
	}
	b.mu.Lock()
	if b.woken { // a wake sent after the timer ended the wait: drop it
		select {
		case <-b.wake:
		default:
		}
	}
	b.lingering, b.woken = false, false
	run := b.takeLocked()
	if run == nil {
		// With more than one lane, another call took this check along:
		// the lane this one held is free again.
		b.busy--
	}
	b.mu.Unlock()
	return run
}

// takeLocked removes up to max checks from the head of the queue; b.mu is
// held.
func (b *batcher) takeLocked() []*pending {
	n := min(len(b.queue), b.max)
	if n == 0 {
		return nil
	}
	if b.lingering && !b.woken {
		// Another lane takes the lingering check along: it need not
		// wait any longer.
		b.woken = true
		b.wake <- struct{}{}
	}
	run := append((*runPool.Get().(*[]*pending))[:0], b.queue[:n]...)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return run
}

// lead runs one call, hands the next one (if checks queued meanwhile) to
// the first of them, then wakes the checks it decided.
func (b *batcher) lead(run []*pending) {
	b.calls.Add(1)
	b.store.execute(run)
	b.mu.Lock()
	next := b.takeLocked()
	if next == nil {
		b.busy--
	}
	b.mu.Unlock()
	if next != nil {
		next[0].lead = next
		next[0].done <- struct{}{}
	}
	for _, p := range run {
		p.done <- struct{}{}
	}
	clear(run)
	runPool.Put(&run)
}
