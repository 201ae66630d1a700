package snapshot

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/backoff"
)

// coalesceWindow is how long a reload waits, after the first notification
// of a burst, for more to arrive; never longer, however many keep coming.
const coalesceWindow = 50 * time.Millisecond

// listenBackoff spaces the LISTEN connection's reconnections: capped at
// 500ms (jitter takes at most a fifth off), so that once Postgres is back
// the listener connects, reloads and sees changes within a second, and an
// outage of a few seconds costs a handful of attempts, not thousands.
var listenBackoff = backoff.Policy{Initial: 100 * time.Millisecond, Max: 500 * time.Millisecond, Jitter: 0.2}

// listenAcquireTimeout bounds connecting for LISTEN, so that an
// unreachable (rather than refusing) Postgres is retried too.
const listenAcquireTimeout = 10 * time.Second

// Sync keeps the holder fresh until ctx ends: it LISTENs on
// tollgate_changes and on a notification reloads at once what changed
// (changes.go), and reloads everything every interval anyway in
// case a notification was lost.
//
// When the LISTEN connection fails (Postgres stopped, restarted or
// unreachable) Sync connects again after a wait that doubles from 100ms
// to 500ms (listenBackoff), logging the outage once when it starts, every
// 10s while it lasts and once when it ends; as soon as LISTEN is back it
// reloads, so that no change made meanwhile is missed, and changes arrive
// by notification again. Checks go on from the last snapshot throughout.
func (h *Holder) Sync(ctx context.Context, db *pgxpool.Pool, interval time.Duration) {
	retry := backoff.New(listenBackoff)
	for {
		err := h.listen(ctx, db, interval, retry.Reset)
		if ctx.Err() != nil {
			return
		}
		h.postgres.Failure(err)
		if h.sleep(ctx, retry.Next()) != nil {
			return
		}
	}
}

// listen holds one LISTEN connection until it fails or ctx ends, and
// returns why. It calls listening once LISTEN is set up and the snapshot
// reloaded.
func (h *Holder) listen(ctx context.Context, db *pgxpool.Pool, interval time.Duration, listening func()) error {
	acquireCtx, cancel := context.WithTimeout(ctx, listenAcquireTimeout)
	conn, err := db.Acquire(acquireCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("snapshot: connect for LISTEN: %w", err)
	}
	// The connection is this loop's alone and closed when it ends: a
	// connection that LISTENs must not go back to the pool.
	pg := conn.Hijack()
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		pg.Close(closeCtx) //nolint:errcheck // closing a connection that may be dead
	}()
	if _, err := pg.Exec(ctx, "LISTEN tollgate_changes"); err != nil {
		return fmt.Errorf("snapshot: LISTEN: %w", err)
	}
	// Changes made between the last load and LISTEN would be missed.
	if err := h.Reload(ctx); err != nil {
		return err
	}
	h.postgres.Success()
	listening()
	lastReload := h.now()
	for {
		// Wait for a notification, but no longer than until the next
		// periodic reload is due, or a new UTC month has begun (monthJitter
		// ago): what a tenant's spend cap admits depends on the month (the
		// included units are prorated over the part of it the plan is in
		// force).
		now := h.now()
		due := min(interval-now.Sub(lastReload), untilMonthReload(now, h.monthJitter))
		wait, cancel := context.WithTimeout(ctx, max(due, time.Millisecond))
		n, err := pg.WaitForNotification(wait)
		timedOut := wait.Err() != nil // read before cancel, which sets it
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && (!timedOut || pg.IsClosed()) {
			return fmt.Errorf("snapshot: wait for notification: %w", err) // the connection failed
		}
		var payloads []string // what changed; nil: reload everything
		if err == nil {
			payloads = append(payloads, n.Payload)
			// Coalesce a burst of notifications into one reload, within
			// a fixed window so a steady stream cannot postpone it.
			window, cancel := context.WithTimeout(ctx, coalesceWindow)
			for {
				n, err := pg.WaitForNotification(window)
				if err == nil {
					payloads = append(payloads, n.Payload)
					continue
				}
				closedEarly := window.Err() == nil || pg.IsClosed()
				cancel()
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if closedEarly {
					return fmt.Errorf("snapshot: wait for notification: %w", err)
				}
				break
			}
		}
		reload := h.Reload
		if payloads != nil {
			reload = func(ctx context.Context) error { return h.applyChanges(ctx, payloads) }
		}
		// A failed reload with LISTEN still up is retried at the next
		// notification or interval; the monitor keeps the log short.
		if err := reload(ctx); err != nil {
			h.postgres.Failure(err)
		} else {
			h.postgres.Success()
		}
		lastReload = h.now()
	}
}

// untilMonthReload returns the time from now to jitter after the start
// of the next UTC calendar month (or of this one, if that is still
// ahead).
func untilMonthReload(now time.Time, jitter time.Duration) time.Duration {
	y, m, _ := now.Add(-jitter).UTC().Date()
	return time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC).Add(jitter).Sub(now)
}
