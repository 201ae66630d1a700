// Package breaker puts a circuit breaker around a limiter store: while the
// store is known to be down, calls fail at once with ErrOpen instead of
// waiting for a timeout, and a background probe closes the circuit as soon
// as the store answers again. The check path and the admin server's login
// limiter use it.
package breaker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/internal/backoff"
	"github.com/tollgate/tollgate/internal/limiter"
)

// ErrOpen is returned by a Breaker while its store is known to be down:
// the call was not made.
var ErrOpen = errors.New("breaker: limiter store unavailable (circuit open)")

// Config configures a Breaker. The zero value is usable but probes
// with an empty batch, which a store refuses: set Probe.
type Config struct {
	// Failures is how many calls in a row must fail to open the circuit
	// (default 3).
	Failures int
	// Probe is the batch sent, in the background, to find out whether the
	// store is back while the circuit is open. Make it a dry run: it must
	// change nothing.
	Probe limiter.Batch
	// Ping, when set, runs first at each probe, and Probe only once it
	// succeeds. Give one that connects afresh rather than through the
	// store's client: a go-redis client whose dials failed PoolSize times
	// in its life dials again only once a second, so probes through it
	// would delay noticing that Redis is back by up to a second.
	Ping func(ctx context.Context) error
	// ProbeTimeout bounds one probe (default 250ms).
	ProbeTimeout time.Duration
	// ProbeBackoff spaces the probes (default 25ms doubling to 250ms, with
	// jitter), so that the circuit closes well within a second of the
	// store answering again.
	ProbeBackoff backoff.Policy
	// Component names the breaker in logs and metrics (default
	// "limiter_store").
	Component string
	Log       *slog.Logger
	// Remind is how often a "still unavailable" line is logged while the
	// circuit is open (default 10s).
	Remind time.Duration
	// Now and Sleep are the clock and the wait between probes; tests
	// replace them (defaults time.Now and backoff.Sleep).
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// Breaker is a circuit breaker around a limiter store. While the store
// answers, calls pass through. After Failures failed calls in a row
// (errors or timeouts — not callers going away, nor
// limiter.ErrNotReplicated, an answer) the circuit opens: calls
// in flight are cancelled (a limiter.SelfTimed store's end by its own
// bound instead) and every call fails at once with ErrOpen, so the
// rules' failure modes decide without waiting for a timeout. Meanwhile
// one goroutine probes the store with Probe, backing off to
// ProbeBackoff's cap, and the first probe that succeeds closes the
// circuit. The outage is logged once when the circuit opens, every Remind
// while it stays open and once when it closes.
//
// On Redis Cluster one breaker covers all shards: it opens only when
// calls fail in a row, that is when most of the cluster is down.
//
// Breaker is a limiter.Store and safe for concurrent use. Close stops the
// probing.
type Breaker struct {
	store limiter.Store
	// selfTimed: the store bounds each call by itself (limiter.SelfTimed);
	// calls in flight when the circuit opens then end by that bound.
	selfTimed bool
	cfg       Config
	monitor   *backoff.Monitor

	circuit    atomic.Pointer[circuit]
	inARow     atomic.Int64
	rejected   atomic.Int64
	opened     atomic.Int64
	rejectedAt atomic.Int64 // rejected when the circuit last opened

	mu       sync.Mutex // serialises opening and closing
	life     context.Context
	stopLife context.CancelFunc
	probing  sync.WaitGroup
}

// circuit is one period of the breaker's state. While closed, calls run
// under ctx, which is cancelled when this period ends by opening.
type circuit struct {
	open   bool
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func closedCircuit() *circuit {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &circuit{ctx: ctx, cancel: cancel}
}

// New returns a closed breaker around store.
func New(store limiter.Store, cfg Config) *Breaker {
	if cfg.Failures <= 0 {
		cfg.Failures = 3
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = 250 * time.Millisecond
	}
	if cfg.ProbeBackoff == (backoff.Policy{}) {
		cfg.ProbeBackoff = backoff.Policy{Initial: 25 * time.Millisecond, Max: 250 * time.Millisecond}
	}
	if cfg.Component == "" {
		cfg.Component = "limiter_store"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = backoff.Sleep
	}
	b := &Breaker{store: store, cfg: cfg}
	if st, ok := store.(limiter.SelfTimed); ok {
		_, b.selfTimed = st.CheckTimeout()
	}
	b.monitor = backoff.NewMonitor(backoff.MonitorConfig{
		Component: cfg.Component, Dependency: "redis", Log: cfg.Log, Remind: cfg.Remind, Now: cfg.Now,
		Detail: func() []any {
			return []any{"checks_decided_by_failure_modes", b.rejected.Load() - b.rejectedAt.Load()}
		},
	})
	b.life, b.stopLife = context.WithCancel(context.Background())
	b.circuit.Store(closedCircuit())
	return b
}

// Check runs the batch on the store unless the circuit is open.
func (b *Breaker) Check(ctx context.Context, batch limiter.Batch) (limiter.Outcome, error) {
	c := b.circuit.Load()
	if c.open {
		b.rejected.Add(1)
		return limiter.Outcome{}, ErrOpen
	}
	var out limiter.Outcome
	var err error
	var cut bool
	if b.selfTimed {
		// The store bounds the call by itself and does not stop for a
		// cancelled context: nothing to cancel, and no context (with its
		// allocations) to make per call.
		out, err = b.store.Check(ctx, batch)
		cut = err != nil && b.circuit.Load() != c
	} else {
		callCtx, cancel := context.WithCancelCause(ctx)
		stop := context.AfterFunc(c.ctx, func() { cancel(ErrOpen) })
		out, err = b.store.Check(callCtx, batch)
		stop()
		cut = errors.Is(context.Cause(callCtx), ErrOpen)
		cancel(nil)
	}
	switch {
	case err == nil:
		if b.inARow.Load() != 0 {
			b.inARow.Store(0)
		}
		return out, nil
	case cut:
		// The circuit opened while this call was in flight.
		b.rejected.Add(1)
		return limiter.Outcome{}, ErrOpen
	case errors.Is(ctx.Err(), context.Canceled),
		errors.Is(err, limiter.ErrEmptyBatch), errors.Is(err, limiter.ErrNegativeCost),
		errors.Is(err, limiter.ErrNotReplicated), errors.Is(err, limiter.ErrHoldNotListed):
		// The caller went away, the batch was bad, or the store answered
		// but its replicas lag: nothing about the store's answering, and
		// checks that carry no money still get answers. (The caller's
		// deadline passing is: the store is slow.)
		return out, err
	}
	if b.inARow.Add(1) >= int64(b.cfg.Failures) {
		b.trip(c, err)
	}
	return out, err
}

// trip opens the circuit c, unless another call did first.
func (b *Breaker) trip(c *circuit, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.circuit.Load() != c || b.life.Err() != nil {
		return
	}
	b.rejectedAt.Store(b.rejected.Load())
	b.circuit.Store(&circuit{open: true})
	c.cancel(ErrOpen)
	b.opened.Add(1)
	b.monitor.Failure(err)
	b.probing.Add(1)
	go b.probe()
}

// probe tries the store until it answers, then closes the circuit.
func (b *Breaker) probe() {
	defer b.probing.Done()
	retry := backoff.New(b.cfg.ProbeBackoff)
	for {
		if b.cfg.Sleep(b.life, retry.Next()) != nil {
			return
		}
		ctx, cancel := context.WithTimeout(b.life, b.cfg.ProbeTimeout)
		var err error
		if b.cfg.Ping != nil {
			err = b.cfg.Ping(ctx)
		}
		if err == nil {
			_, err = b.store.Check(ctx, b.cfg.Probe)
		}
		cancel()
		if b.life.Err() != nil {
			return
		}
		if err == nil {
			b.mu.Lock()
			b.inARow.Store(0)
			b.circuit.Store(closedCircuit())
			b.monitor.Success()
			b.mu.Unlock()
			return
		}
		b.monitor.Failure(err)
	}
}

// Open reports whether the circuit is open: the store is known to be down.
func (b *Breaker) Open() bool { return b.circuit.Load().open }

// Stats are a breaker's counters since it was made.
type Stats struct {
	Open bool
	// Opened counts the times the circuit opened; Rejected the calls
	// answered with ErrOpen; FailedProbes the probes that failed.
	Opened, Rejected, FailedProbes int64
}

// Stats returns the breaker's counters.
func (b *Breaker) Stats() Stats {
	opened := b.opened.Load()
	return Stats{Open: b.Open(), Opened: opened, Rejected: b.rejected.Load(),
		// The monitor counts the failure that opened the circuit too.
		FailedProbes: b.monitor.Stats().Failures - opened}
}

// OutageStats returns the counts of the breaker's outage monitor, as
// backoff.Collectors exports them.
func (b *Breaker) OutageStats() backoff.MonitorStats { return b.monitor.Stats() }

// Collectors returns the breaker's outage metrics (backoff.Collectors,
// labelled with its component): for a breaker that no checker watches,
// such as the login limiter's.
func (b *Breaker) Collectors() []prometheus.Collector {
	return backoff.Collectors(b.cfg.Component, "redis", b.monitor.Stats)
}

// Close stops probing and waits for the probe in progress, if any. The
// breaker keeps its last state; Close does not close the store.
func (b *Breaker) Close() {
	b.mu.Lock()
	b.stopLife()
	b.mu.Unlock()
	b.probing.Wait()
}
