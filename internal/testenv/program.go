package testenv

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Start runs a program's run() (name says which, in failures) in the background, as end-to-end tests do,
// and waits until run sends the address it listens on to ready. It returns
// that address and stop, which cancels run's context, waits for run to
// return and returns its error (the same on every call). Start fails t if
// run returns first or does not listen within 30 seconds; the caller
// stops the program, usually in t.Cleanup.
func Start(t testing.TB, name string, run func(ctx context.Context, ready chan<- string) error) (addr string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, ready) }()
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("%s stopped before listening: %v", name, err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("%s not listening within 30s", name)
	}
	var once sync.Once
	var err error
	return addr, func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
}
