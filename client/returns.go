package client

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// pendingReturns runs the retries of the middleware's settlements and
// releases (what a request gives back) whose first attempt failed, after
// the responses they follow have ended, at most cap(slots) at once; past
// that, or once the Client is shut down, the request's own goroutine runs
// them before its response ends.
type pendingReturns struct {
	slots chan struct{}

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup // one per return under way in the background
}

func newPendingReturns(max int) *pendingReturns {
	return &pendingReturns{slots: make(chan struct{}, max)}
}

// run runs give in the background when it can, else at once.
func (p *pendingReturns) run(give func()) {
	if p == nil { // a Client not made by New
		give()
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		give()
		return
	}
	select {
	case p.slots <- struct{}{}:
	default:
		p.mu.Unlock()
		give()
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer func() {
			<-p.slots
			p.wg.Done()
		}()
		give()
	}()
}

// Shutdown waits until the retries of settlements and releases that the
// middleware runs after the responses they follow have ended (see
// Middleware) are done, or until ctx ends (then it returns ctx.Err(), and
// those still under way go on). Call it when the server that uses the
// middleware has shut down, before the process exits: otherwise a hold
// whose settlement is still being retried keeps its estimate until its
// TTL, and a lease its slot. The Client stays usable: afterwards the
// middleware retries before a response ends. Each attempt is bounded
// (Options.SettleTimeout, a few attempts), so Shutdown ends within a few
// of those.
func (c *Client) Shutdown(ctx context.Context) error {
	p := c.returns
	if p == nil {
		return nil
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		p.wg.Wait() // no Add follows: closed is set
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Attempts of a settlement or release that the check API could not be
// asked (see retrying).
const (
	returnAttempts = 4                      // the first included
	returnBackoff  = 100 * time.Millisecond // before the second attempt; doubled after each
)

// retrying calls give again after its attempt failed with err, until it
// succeeds, fails with an answer that a repeat would not change, or has
// been tried returnAttempts times in all, waiting a backoff with jitter
// before each attempt. It retries what the check API could not answer: a
// transport error or timeout, a 5xx (503: the limiter store did not
// answer), a 408 or a 429 (see unasked). A settlement repeated at the
// same cost, or a release repeated, changes nothing, so a retry after a
// lost answer is harmless. It returns the last error.
func retrying(ctx context.Context, err error, give func(context.Context) error) error {
	backoff := returnBackoff
	for attempt := 1; err != nil && attempt < returnAttempts && unasked(err); attempt++ {
		// Jitter: returns that failed together (a store failover) are
		// not retried together.
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff *= 2
		err = give(ctx)
	}
	return err
}

// giveBack settles hold d.HoldID at cost, which releases its lease too,
// or, without a hold, releases lease d.LeaseID, whatever becomes of ctx,
// whose values it keeps. The first attempt is made at once, before
// giveBack returns — in the middleware, before the response ends — so
// that a caller who waits for its response and sends its next request
// finds its slot free and its refund made; the retries of an attempt the
// check API could not answer are made in the background (see
// pendingReturns and retrying), without holding the response up.
func (c *Client) giveBack(ctx context.Context, d *Decision, cost int64) {
	ctx = context.WithoutCancel(ctx)
	holdID, leaseID := d.HoldID, d.LeaseID
	give := func(ctx context.Context) (err error) {
		if holdID != "" {
			_, err = c.Settle(ctx, holdID, cost)
		} else {
			_, err = c.Release(ctx, leaseID)
		}
		return err
	}
	err := give(ctx)
	if err == nil || !unasked(err) {
		return
	}
	c.returns.run(func() { _ = retrying(ctx, err, give) })
}
