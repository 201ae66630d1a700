package enforce

import (
	"context"
	"log/slog"
	"sync"
	"time"

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
// failed write is retried with the next one. It is a Recorder and safe for
// concurrent use.
type LastUsed struct {
	store KeyToucher
	log   *slog.Logger

	mu   sync.Mutex
	seen map[string]int64 // key ID → µs since the epoch of its latest use
}

// NewLastUsed returns a LastUsed writing to store.
func NewLastUsed(store KeyToucher, log *slog.Logger) *LastUsed {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &LastUsed{store: store, log: log, seen: map[string]int64{}}
}

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
	l.mu.Lock()
	batch := l.seen
	l.seen = make(map[string]int64, len(batch))
	l.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	usedAt := make(map[string]time.Time, len(batch))
	for id, us := range batch {
		usedAt[id] = time.UnixMicro(us).UTC()
	}
	err := l.store.TouchKeys(ctx, usedAt)
	if err != nil {
		l.mu.Lock()
		for id, us := range batch {
			if us > l.seen[id] {
				l.seen[id] = us
			}
		}
		l.mu.Unlock()
	}
	return err
}

// Run flushes every interval until ctx ends, then flushes once more (for
// at most five seconds) so that a graceful shutdown loses nothing.
func (l *LastUsed) Run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := l.Flush(final); err != nil {
				l.log.Warn("last-used times not written at shutdown", "keys", l.Pending(), "err", err)
			}
			return
		case <-tick.C:
			if err := l.Flush(ctx); err != nil && ctx.Err() == nil {
				l.log.Warn("writing last-used times failed; retrying at the next flush", "err", err)
			}
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
