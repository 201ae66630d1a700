package testenv

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Start runs a program's run function (through ctx and ready, as
// programs' run functions take them) and returns the address it sends on
// ready once listening, and a stop function that cancels it and returns
// its error (the same error on every call). The test fails if the program
// stops or does not listen within 30 s.
func Start(t testing.TB, name string, run func(ctx context.Context, ready chan<- string) error) (addr string, stop func() error) {
	t.Helper()
	addrs, stop := StartN(t, name, 1, run)
	return addrs[0], stop
}

// StartN is Start for a program that sends n addresses on ready (e.g. an
// HTTP and a gRPC listener).
func StartN(t testing.TB, name string, n int, run func(ctx context.Context, ready chan<- string) error) (addrs []string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, n)
	done := make(chan error, 1)
	go func() { done <- run(ctx, ready) }()
	for len(addrs) < n {
		select {
		case addr := <-ready:
			addrs = append(addrs, addr)
		case err := <-done:
			cancel()
			t.Fatalf("%s stopped before listening: %v", name, err)
		case <-time.After(30 * time.Second):
			cancel()
			t.Fatalf("%s not listening within 30s", name)
		}
	}
	var once sync.Once
	var err error
	return addrs, func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
}
