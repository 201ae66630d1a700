package events

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/tollgate/tollgate/internal/postgres"
)

// DefaultRetention is how long finished deliveries, and events without a
// delivery left, are kept by default (TOLLGATE_EVENT_RETENTION).
const DefaultRetention = 30 * 24 * time.Hour

// SweepInterval is how often RunSweep sweeps.
const SweepInterval = 15 * time.Minute

// sweepBatch is how many rows one statement of a sweep deletes at most:
// each is its own short transaction, so that no sweep holds many locks,
// or any for long.
const sweepBatch = 1000

// Swept is what one Sweep did.
type Swept struct {
	// Deliveries is how many finished deliveries it deleted, with their
	// attempts.
	Deliveries int64
	// Events is how many events it deleted.
	Events int64
	// Recovered is how many endpoints it found no longer failing.
	Recovered int64
}

// Sweep keeps the outbox to its retention, at now:
//
//   - a delivered or failed delivery is deleted, with its attempts, once
//     it has been finished for retention;
//   - an event is deleted once it is older than retention and has no
//     delivery left: a pending delivery (to a disabled endpoint, say)
//     keeps its event however old, and a finished one keeps it until it
//     is deleted itself;
//
// and ends the failing time of the enabled endpoints without a failed attempt for
// FailingGap. A retention of 0 or less keeps everything. It deletes in
// batches of its own transactions, and may run in any number of processes
// at once. It returns what it did, also when it fails part way.
func Sweep(ctx context.Context, db postgres.Conn, now time.Time, retention time.Duration) (Swept, error) {
	var s Swept
	tag, err := db.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = NULL
		WHERE failing_since IS NOT NULL AND disabled_at IS NULL AND coalesce(last_failed_at, failing_since) < $1`, now.Add(-FailingGap))
	if err != nil {
		return s, fmt.Errorf("events: sweep: failing endpoints: %w", err)
	}
	s.Recovered = tag.RowsAffected()
	if retention <= 0 {
		return s, nil
	}
	cutoff := now.Add(-retention)
	for {
		tag, err := db.Exec(ctx, `DELETE FROM webhook_deliveries WHERE id IN (
			SELECT id FROM webhook_deliveries WHERE state <> 'pending' AND finished_at < $1
			ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, cutoff, sweepBatch)
		if err != nil {
			return s, fmt.Errorf("events: sweep: deliveries: %w", err)
		}
		s.Deliveries += tag.RowsAffected()
		if tag.RowsAffected() < sweepBatch {
			break
		}
	}
	// The events are walked oldest first from a cursor, so that old events
	// kept by a pending delivery are read once a sweep, not once a batch.
	// An event a writer holds (a replay inserting its new delivery, whose
	// foreign key check locks the event) is passed over; a delivery
	// committed since the batch was judged makes the event's delete fail
	// (the key takes no delivery with it), and the batch is judged again.
	afterAt, afterID := time.Time{}, ""
	raced := 0
	for {
		var n, walked int64
		var lastAt *time.Time
		var lastID *string
		err := db.QueryRow(ctx, `WITH batch AS (
				SELECT ev.id, ev.created_at FROM events ev
				WHERE ev.created_at < $1 AND (ev.created_at, ev.id) > ($2, $3)
				ORDER BY ev.created_at, ev.id LIMIT $4),
			unused AS (
				SELECT ev.id FROM events ev JOIN batch b ON ev.id = b.id
				WHERE NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = ev.id)
				FOR UPDATE OF ev SKIP LOCKED),
			gone AS (
				DELETE FROM events ev USING unused u WHERE ev.id = u.id
				RETURNING ev.id)
			SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM batch),
				(SELECT max(created_at) FROM batch),
				(SELECT id FROM batch ORDER BY created_at DESC, id DESC LIMIT 1)`,
			cutoff, afterAt, afterID, sweepBatch).Scan(&n, &walked, &lastAt, &lastID)
		if postgres.Is(err, postgres.ForeignKeyViolation) && raced < 3 {
			raced++ // a replay's delivery of an event judged unused committed since: judge the batch again
			continue
		}
		if err != nil {
			return s, fmt.Errorf("events: sweep: events: %w", err)
		}
		s.Events += n
		if walked < sweepBatch || lastAt == nil {
			break
		}
		afterAt, afterID = *lastAt, *lastID
	}
	return s, nil
}

// RunSweep sweeps (Sweep) every interval until ctx ends, logging what it
// deleted and its errors.
func RunSweep(ctx context.Context, db postgres.Conn, interval, retention time.Duration, now func() time.Time, log *slog.Logger) {
	for {
		s, err := Sweep(ctx, db, now(), retention)
		if err != nil && ctx.Err() == nil {
			log.Warn("webhooks: outbox sweep failed; retrying later", "err", err)
		}
		if s.Deliveries > 0 || s.Events > 0 || s.Recovered > 0 {
			log.Info("webhooks: outbox swept", "deliveries", s.Deliveries, "events", s.Events, "endpoints_no_longer_failing", s.Recovered)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
