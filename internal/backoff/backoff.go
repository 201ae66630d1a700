// Package backoff paces the retries of anything that reconnects to a store
// — exponentially, with jitter, up to a cap — and reports an outage as
// state changes (down, still down, back up) rather than one log line per
// failed attempt.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy says how retries are spaced. The zero value is usable: 100ms
// doubling to 5s, each wait shortened by up to half at random.
type Policy struct {
	// Initial is the wait before the first retry (default 100ms).
	Initial time.Duration
	// Max caps the wait (default 5s; never below Initial).
	Max time.Duration
	// Jitter is the fraction of each wait, from 0 to 1, that is taken off
	// at random (default 0.5), so that many processes that lost a store at
	// the same instant do not come back in step. Negative means none.
	Jitter float64
}

func (p Policy) withDefaults() Policy {
	if p.Initial <= 0 {
		p.Initial = 100 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 5 * time.Second
	}
	p.Max = max(p.Max, p.Initial)
	switch {
	case p.Jitter == 0:
		p.Jitter = 0.5
	case p.Jitter < 0:
		p.Jitter = 0
	case p.Jitter > 1:
		p.Jitter = 1
	}
	return p
}

// Backoff hands out the waits between the retries of one retrying loop.
// It is not safe for concurrent use.
type Backoff struct {
	policy Policy
	// ceiling is the wait before jitter of the next retry.
	ceiling time.Duration
	// random returns a number in [0, 1).
	random func() float64
}

// New returns a Backoff following p.
func New(p Policy) *Backoff {
	p = p.withDefaults()
	return &Backoff{policy: p, ceiling: p.Initial, random: rand.Float64}
}

// NewWithRandom is New with the source of jitter given: random returns
// numbers in [0, 1). Tests use it to know the waits in advance.
func NewWithRandom(p Policy, random func() float64) *Backoff {
	b := New(p)
	b.random = random
	return b
}

// Next returns the wait before the next retry and doubles the one after,
// up to the policy's Max. Every wait lies in [(1-Jitter)·w, w] for the
// unjittered w.
func (b *Backoff) Next() time.Duration {
	w := b.ceiling
	b.ceiling = min(2*b.ceiling, b.policy.Max)
	return w - time.Duration(b.policy.Jitter*b.random()*float64(w))
}

// Reset starts the waits again from Initial: call it after a success.
func (b *Backoff) Reset() { b.ceiling = b.policy.Initial }

// Wait sleeps Next() or until ctx ends, and returns ctx.Err() in that case.
func (b *Backoff) Wait(ctx context.Context) error {
	return Sleep(ctx, b.Next())
}

// Sleep waits d, or until ctx ends, and then returns ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
