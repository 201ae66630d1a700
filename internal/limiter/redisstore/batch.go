package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
)

// batcher coalesces concurrent checks into script calls. There is no timer
// and no window of time: a check that finds a lane free goes out at once
// (alone, if nothing else is waiting); checks that arrive while every lane
// is busy queue, and when a call returns, the checks queued meanwhile go
// out together in the next one. The check at the head of the queue leads
// that call in its own goroutine, so no goroutine is started per call and
// the one that led the last call is free to answer its own request.
type batcher struct {
	store   *Store
	max     int           // checks per call
	lanes   int           // calls under way at most
	timeout time.Duration // a check's wait at most; 0: its context's deadline

	mu    sync.Mutex
	queue []*pending
	busy  int // calls under way
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

var runPool = sync.Pool{New: func() any { return new([]*pending) }}

func (b *batcher) check(ctx context.Context, batch limiter.Batch) (limiter.Outcome, error) {
	p := pendingPool.Get().(*pending)
	p.batch = batch
	p.deadline, _ = ctx.Deadline()
	if b.timeout > 0 {
		if own := time.Now().Add(b.timeout); p.deadline.IsZero() || own.Before(p.deadline) {
			p.deadline = own
		}
	}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	var run []*pending
	if b.busy < b.lanes {
		b.busy++
		run = b.takeLocked()
	}
	b.mu.Unlock()
	for {
		if run != nil {
			b.lead(run)
		}
		<-p.done
		if run, p.lead = p.lead, nil; run == nil {
			break
		}
	}
	out, err := p.out, p.err
	*p = pending{done: p.done}
	pendingPool.Put(p)
	return out, err
}

// takeLocked removes up to max checks from the head of the queue; b.mu is
// held.
func (b *batcher) takeLocked() []*pending {
	n := min(len(b.queue), b.max)
	if n == 0 {
		return nil
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
