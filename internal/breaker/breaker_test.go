package breaker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/testenv"
)

// countingStore counts the calls that reach the store, probes apart.
type countingStore struct {
	limiter.Store
	calls, probes atomic.Int64
}

func (s *countingStore) Check(ctx context.Context, b limiter.Batch) (limiter.Outcome, error) {
	if len(b.Requests) == 1 && strings.HasSuffix(b.Requests[0].Key, "probe") {
		s.probes.Add(1)
	} else {
		s.calls.Add(1)
	}
	return s.Store.Check(ctx, b)
}

// redisStore returns a limiter store on r through a client set up as
// cmd/api sets up its own: no retries, short timeouts.
func redisStore(t *testing.T, r *testenv.RedisServer) *countingStore {
	t.Helper()
	c := config.Redis{Addr: r.Addr(), Timeout: 250 * time.Millisecond, NoRetries: true}.Client()
	t.Cleanup(func() { c.Close() })
	return &countingStore{Store: redisstore.New(c)}
}

func probeBatch() limiter.Batch {
	return limiter.Batch{DryRun: true, Requests: []limiter.Request{{Key: "t:{x}:probe",
		Params: limiter.Params{Algorithm: limiter.GCRA, Limit: 1, PeriodUS: limiter.SecondUS}}}}
}

func oneCheck() limiter.Batch {
	return limiter.Batch{Cost: 1, Requests: []limiter.Request{{Key: "t:{x}:k",
		Params: limiter.Params{Algorithm: limiter.GCRA, Limit: 1000, PeriodUS: limiter.SecondUS}}}}
}

// TestBreakerOpensWhileRedisIsDownAndClosesWhenItAnswers kills a real
// Redis: after Failures failed calls in a row no call reaches it, and the
// background probe closes the circuit once it is back.
func TestBreakerOpensWhileRedisIsDownAndClosesWhenItAnswers(t *testing.T) {
	ctx := context.Background()
	r := testenv.StartRedisServer(t)
	store := redisStore(t, r)
	var logs bytes.Buffer
	b := New(store, Config{Failures: 3, Probe: probeBatch(), Log: slog.New(slog.NewTextHandler(&logs, nil))})
	t.Cleanup(b.Close)

	if _, err := b.Check(ctx, oneCheck()); err != nil {
		t.Fatal(err)
	}
	r.Kill()
	for i := range 3 {
		_, err := b.Check(ctx, oneCheck())
		if err == nil || errors.Is(err, ErrOpen) {
			t.Fatalf("call %d with Redis down: %v, want the store's error", i+1, err)
		}
		if open := b.Open(); open != (i == 2) {
			t.Fatalf("after %d failures open = %v", i+1, open)
		}
	}
	reached := store.calls.Load()
	for range 1000 {
		if _, err := b.Check(ctx, oneCheck()); !errors.Is(err, ErrOpen) {
			t.Fatalf("circuit open: %v, want ErrOpen", err)
		}
	}
	if n := store.calls.Load() - reached; n != 0 {
		t.Errorf("%d calls reached the store while the circuit was open, want 0", n)
	}
	testenv.WaitFor(t, 10*time.Second, "a failed probe", func() bool { return b.Stats().FailedProbes > 0 })

	r.Start()
	testenv.WaitFor(t, 10*time.Second, "circuit closed after Redis is back", func() bool { return !b.Open() })
	if _, err := b.Check(ctx, oneCheck()); err != nil {
		t.Errorf("after the circuit closed: %v", err)
	}
	s := b.Stats()
	if s.Opened != 1 || s.Rejected != 1000 || s.Open {
		t.Errorf("stats %+v, want opened once, 1000 rejected, closed", s)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "redis unavailable") || !strings.Contains(lines[1], "redis back") ||
		!strings.Contains(lines[1], "checks_decided_by_failure_modes=1000") {
		t.Errorf("log, want one line when it opened and one when it closed:\n%s", logs.String())
	}
}

// TestBreakerNeedsFailuresInARow: a success between failures starts the
// count again.
func TestBreakerNeedsFailuresInARow(t *testing.T) {
	ctx := context.Background()
	r := testenv.StartRedisServer(t)
	b := New(redisStore(t, r), Config{Failures: 3, Probe: probeBatch()})
	t.Cleanup(b.Close)
	for round := range 3 {
		r.Kill()
		for range 2 {
			if _, err := b.Check(ctx, oneCheck()); err == nil {
				t.Fatal("Redis is down and the call succeeded")
			}
		}
		r.Start()
		if _, err := b.Check(ctx, oneCheck()); err != nil {
			t.Fatalf("round %d: Redis is back, and %v", round, err)
		}
	}
	if s := b.Stats(); s.Opened != 0 {
		t.Errorf("opened %d times on two failures in a row at most", s.Opened)
	}
}

// stuckStore answers batches whose key ends in "slow" only when their
// context ends, fails the others while failing is set, and succeeds
// otherwise: it stands for a Redis that hangs some calls.
type stuckStore struct{ failing atomic.Bool }

func (s *stuckStore) Check(ctx context.Context, b limiter.Batch) (limiter.Outcome, error) {
	if strings.HasSuffix(b.Requests[0].Key, "slow") {
		<-ctx.Done()
		return limiter.Outcome{}, ctx.Err()
	}
	if s.failing.Load() {
		return limiter.Outcome{}, errors.New("connection refused")
	}
	return limiter.Outcome{Admitted: true, Results: make([]limiter.Result, len(b.Requests))}, nil
}

// TestBreakerCutsCallsInFlightWhenItOpens: calls waiting on a hung store
// are answered as soon as the circuit opens, not at their timeout.
func TestBreakerCutsCallsInFlightWhenItOpens(t *testing.T) {
	store := &stuckStore{}
	store.failing.Store(true)
	b := New(store, Config{Failures: 3, Probe: probeBatch()})
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	slow := limiter.Batch{Requests: []limiter.Request{{Key: "t:{x}:slow"}}}
	errs := make(chan error, 5)
	var started sync.WaitGroup
	for range 5 {
		started.Add(1)
		go func() {
			started.Done()
			_, err := b.Check(ctx, slow)
			errs <- err
		}()
	}
	started.Wait()
	for range 3 {
		b.Check(ctx, oneCheck()) //nolint:errcheck
	}
	for range 5 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrOpen) {
				t.Errorf("call in flight ended with %v, want ErrOpen", err)
			}
		case <-time.After(10 * time.Second): // they would wait an hour
			t.Fatal("calls in flight still waiting after the circuit opened")
		}
	}
	store.failing.Store(false)
	testenv.WaitFor(t, 10*time.Second, "circuit closed", func() bool { return !b.Open() })
}

// TestBreakerProbesBackOffToTheCap injects the wait between probes: the
// waits double from 25ms to 250ms, with jitter, and the first probe after
// Redis answers again closes the circuit.
func TestBreakerProbesBackOffToTheCap(t *testing.T) {
	ctx := context.Background()
	r := testenv.StartRedisServer(t)
	var mu sync.Mutex
	var waits []time.Duration
	resume := make(chan struct{})
	b := New(redisStore(t, r), Config{Failures: 1, Probe: probeBatch(),
		Sleep: func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			waits = append(waits, d)
			n := len(waits)
			mu.Unlock()
			if n > 8 {
				select {
				case <-resume:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}})
	t.Cleanup(b.Close)
	r.Kill()
	b.Check(ctx, oneCheck()) //nolint:errcheck
	testenv.WaitFor(t, 10*time.Second, "eight failed probes", func() bool { return b.Stats().FailedProbes >= 8 })
	r.Start()
	close(resume)
	testenv.WaitFor(t, 10*time.Second, "circuit closed", func() bool { return !b.Open() })

	mu.Lock()
	defer mu.Unlock()
	ceiling := 25 * time.Millisecond
	for i, w := range waits {
		if w > ceiling || w < ceiling/2 {
			t.Errorf("wait %d = %v, want within [%v, %v]", i, w, ceiling/2, ceiling)
		}
		ceiling = min(2*ceiling, 250*time.Millisecond)
	}
	if s := b.Stats(); s.FailedProbes != 8 {
		t.Errorf("%d failed probes, want 8 (the ninth, after Redis was back, closed the circuit)", s.FailedProbes)
	}
}

// TestBreakerPingsAfreshBeforeProbingTheStore: with a Ping, failed probes
// never touch the store's client (whose pool would start dialling only
// once a second); once Redis answers PING, the store's probe closes the
// circuit.
func TestBreakerPingsAfreshBeforeProbingTheStore(t *testing.T) {
	ctx := context.Background()
	r := testenv.StartRedisServer(t)
	store := redisStore(t, r)
	b := New(store, Config{Failures: 1, Probe: probeBatch(), Ping: redisstore.Ping("127.0.0.1:1", r.Addr())})
	t.Cleanup(b.Close)
	r.Kill()
	b.Check(ctx, oneCheck()) //nolint:errcheck
	testenv.WaitFor(t, 10*time.Second, "three failed probes", func() bool { return b.Stats().FailedProbes >= 3 })
	if n := store.probes.Load(); n != 0 {
		t.Errorf("%d probes reached the store while Redis did not answer PING", n)
	}
	r.Start()
	testenv.WaitFor(t, 10*time.Second, "circuit closed", func() bool { return !b.Open() })
	if n := store.probes.Load(); n != 1 {
		t.Errorf("%d probes of the store, want the one that closed the circuit", n)
	}
	if err := redisstore.Ping("127.0.0.1:1")(ctx); err == nil {
		t.Error("PING of a closed port succeeded")
	}
}

// BenchmarkBreakerOverhead measures what the breaker adds to a store
// call, on the memory store (no network), one goroutine per CPU.
func BenchmarkBreakerOverhead(b *testing.B) {
	for name, wrap := range map[string]func(limiter.Store) limiter.Store{
		"bare":    func(s limiter.Store) limiter.Store { return s },
		"breaker": func(s limiter.Store) limiter.Store { return New(s, Config{Probe: probeBatch()}) },
	} {
		b.Run(name, func(b *testing.B) {
			store := wrap(limiter.NewMemoryStore(nil))
			batch := oneCheck()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					store.Check(ctx, batch) //nolint:errcheck
				}
			})
		})
	}
}
