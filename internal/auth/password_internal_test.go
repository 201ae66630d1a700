package auth

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// fillHashSlots takes every slot of hashSlots and returns a function that
// gives them back.
func fillHashSlots(t *testing.T) (release func()) {
	t.Helper()
	for range cap(hashSlots) {
		select {
		case hashSlots <- struct{}{}:
		default:
			t.Fatal("a hash slot is taken by something else")
		}
	}
	return func() {
		for range cap(hashSlots) {
			<-hashSlots
		}
	}
}

// TestHashingWaitsForASlot: with every slot taken, hashing and checking
// wait, and give up when their context ends, without hashing.
func TestHashingWaitsForASlot(t *testing.T) {
	if got, want := cap(hashSlots), runtime.NumCPU(); got != want {
		t.Errorf("%d hash slots, want one per CPU (%d)", got, want)
	}
	encoded, err := hashPassword("a long enough password")
	if err != nil {
		t.Fatal(err)
	}
	release := fillHashSlots(t)
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if h, err := HashPassword(ctx, "a long enough password"); !errors.Is(err, context.Canceled) || h != "" {
		t.Errorf("HashPassword with every slot taken and an ended context = %q, %v; want context.Canceled", h, err)
	}
	if ok, err := CheckPassword(ctx, encoded, "a long enough password"); !errors.Is(err, context.Canceled) || ok {
		t.Errorf("CheckPassword with every slot taken and an ended context = %v, %v; want context.Canceled", ok, err)
	}
}

// TestHashingNeverExceedsTheSlots: many checks at once run at most
// cap(hashSlots) at a time.
func TestHashingNeverExceedsTheSlots(t *testing.T) {
	encoded, err := hashPassword("a long enough password")
	if err != nil {
		t.Fatal(err)
	}
	var running, most atomic.Int64
	var wg sync.WaitGroup
	for range 3 * cap(hashSlots) {
		wg.Go(func() {
			err := withHashSlot(context.Background(), func() {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				_, _ = checkPassword(encoded, "a long enough password")
				running.Add(-1)
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := most.Load(); got > int64(cap(hashSlots)) {
		t.Errorf("%d checks ran at once, want at most %d", got, cap(hashSlots))
	}
}
