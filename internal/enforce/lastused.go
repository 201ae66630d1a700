package enforce

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/internal/backoff"

	"github.com/tollgate/tollgate"
)

// KeyToucher stores when keys were last used; *tenants.Store is one.
type KeyToucher interface {
	TouchKeys(ctx context.Context, usedAt map[string]time.Time) error
}

// LastUsed remembers which keys checks presented and when, and writes that
// to the source of truth in the background (Run), so that the hot path
// never waits for Postgres: a check only sets a map entry under a mutex.
// At most one write per flush interval goes out, whatever the traffic; a
// failed write is retried later, backing off while Postgres is down. It is
// a Recorder and safe for concurrent use.
type LastUsed struct {
	store   KeyToucher
	log     *slog.Logger
	monitor *backoff.Monitor
	// sleep waits between writes (backoff.Sleep; tests replace it).
	sleep func(ctx context.Context, d time.Duration) error

	mu   sync.Mutex
	seen map[string]int64 // key ID → µs since the epoch of its latest use
}

// NewLastUsed returns a LastUsed writing to store.
func NewLastUsed(store KeyToucher, log *slog.Logger) *LastUsed {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &LastUsed{store: store, log: log, seen: map[string]int64{}, sleep: backoff.Sleep,
		monitor: backoff.NewMonitor(backoff.MonitorConfig{Component: "last_used_writer", Dependency: "postgres", Log: log})}
}

// Collectors returns the writer's metrics: whether its last write
// reached Postgres, failed writes and outages (see backoff.Collectors).
func (l *LastUsed) Collectors() []prometheus.Collector { return l.monitor.Collectors() }

// Record notes the key of a decision, if it named one — whether or not the
// check was allowed: a revoked key still in use is worth seeing.
func (l *LastUsed) Record(ev tollgate.UsageEvent) {
	if ev.KeyID == "" {
		return
	}
	l.mu.Lock()
	if ev.AtUS > l.seen[ev.KeyID] {
		l.seen[ev.KeyID] = ev.AtUS
	}
	l.mu.Unlock()
}

// Pending returns the number of keys noted since the last flush.
func (l *LastUsed) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

// Flush writes the keys noted since the last flush. On failure they are
// kept for the next one.
func (l *LastUsed) Flush(ctx context.Context) error {
	_, err := l.flush(ctx)
	return err
}

// flush is Flush that also says whether there was anything to write.
func (l *LastUsed) flush(ctx context.Context) (wrote bool, err error) {
	l.mu.Lock()
	batch := l.seen
	l.seen = make(map[string]int64, len(batch))
	l.mu.Unlock()
	if len(batch) == 0 {
		return false, nil
	}
	usedAt := make(map[string]time.Time, len(batch))
	for id, us := range batch {
		usedAt[id] = time.UnixMicro(us).UTC()
	}
	err = l.store.TouchKeys(ctx, usedAt)
	if err != nil {
		l.mu.Lock()
		for id, us := range batch {
			if us > l.seen[id] {
				l.seen[id] = us
			}
		}
		l.mu.Unlock()
	}
	return true, err
}

// lastUsedWriteTimeout bounds one write, so that a hung Postgres is
// retried like a refusing one.
const lastUsedWriteTimeout = 10 * time.Second

// Run flushes every interval until ctx ends, then flushes once more (for
// at most five seconds) so that a graceful shutdown loses nothing. While
// writes fail it waits longer between them — doubling from interval to
// 30s (or interval, if longer), with jitter — and logs the outage once
// when it starts, every 10s while it lasts and once when it ends.
func (l *LastUsed) Run(ctx context.Context, interval time.Duration) {
	retry := backoff.New(backoff.Policy{Initial: interval, Max: max(interval, 30*time.Second)})
	next := interval
	for {
		if l.sleep(ctx, next) != nil {
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := l.Flush(final); err != nil {
				l.log.Warn("last-used times not written at shutdown", "keys", l.Pending(), "err", err)
			}
			return
		}
		writeCtx, cancel := context.WithTimeout(ctx, lastUsedWriteTimeout)
		wrote, err := l.flush(writeCtx)
		cancel()
		next = interval
		switch {
		case err != nil && ctx.Err() == nil:
			l.monitor.Failure(err)
			next = retry.Next()
		case wrote:
			l.monitor.Success()
			retry.Reset()
		}
	}
}

// Recorders passes each event to every recorder in turn.
type Recorders []Recorder

// Record implements Recorder.
func (rs Recorders) Record(ev tollgate.UsageEvent) {
	for _, r := range rs {
		r.Record(ev)
	}
}
