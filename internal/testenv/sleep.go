package testenv

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/backoff"
)

// VirtualSleep stands in for backoff.Sleep in a loop that backs off, so
// that a test sees what the loop does in a span of time without waiting
// for it: each Sleep returns at once, adding its wait to the time slept,
// until the waits add up to the span; that Sleep closes Reached and blocks
// until Release (or its context ends), then waits its own d for real —
// the worst case for what waits on the loop: its longest wait begins as
// the test releases it. After Release every Sleep waits for real.
type VirtualSleep struct {
	span time.Duration

	mu       sync.Mutex
	slept    time.Duration
	blocked  time.Duration
	reached  chan struct{}
	released chan struct{}
	reach    sync.Once
	release  sync.Once
}

// NewVirtualSleep returns a VirtualSleep over span.
func NewVirtualSleep(span time.Duration) *VirtualSleep {
	return &VirtualSleep{span: span, reached: make(chan struct{}), released: make(chan struct{})}
}

// Sleep has backoff.Sleep's signature: it waits d virtually until the
// span is reached, then blocks until Release, then waits for real.
func (v *VirtualSleep) Sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-v.released:
		return backoff.Sleep(ctx, d)
	default:
	}
	v.mu.Lock()
	v.slept += d
	over := v.slept >= v.span
	v.mu.Unlock()
	if !over {
		return ctx.Err()
	}
	v.reach.Do(func() {
		v.mu.Lock()
		v.blocked = d
		v.mu.Unlock()
		close(v.reached)
	})
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-v.released:
		return backoff.Sleep(ctx, d)
	}
}

// Reached is closed when the waits have added up to the span: the loop is
// then blocked in Sleep.
func (v *VirtualSleep) Reached() <-chan struct{} { return v.reached }

// Blocked is the length of the wait that reached the span: the one the
// loop is blocked in until Release, then serves for real.
func (v *VirtualSleep) Blocked() time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.blocked
}

// Release lets the blocked Sleep go on to wait for real, and later ones.
func (v *VirtualSleep) Release() { v.release.Do(func() { close(v.released) }) }

// WaitReached fails t unless the span is reached within limit (of real
// time: the loop must get there, however fast).
func (v *VirtualSleep) WaitReached(t testing.TB, limit time.Duration) {
	t.Helper()
	select {
	case <-v.reached:
	case <-time.After(limit):
		t.Fatalf("the loop did not wait %v in all within %v", v.span, limit)
	}
}
