package credits

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/postgres"
)

// The event types of credits (docs/events.md).
const (
	EventLow       = "credits.low"
	EventExhausted = "credits.exhausted"
	EventExpiring  = "credits.expiring"
)

// DrainerConfig configures a Drainer.
type DrainerConfig struct {
	// Prefix starts the state keys, as the check path's (default "tg:").
	Prefix string
	// Batch bounds the log entries applied in one transaction (default
	// 1,000).
	Batch int
	// ExpiringWithin is how long before a grant's expiry credits.expiring
	// is emitted (default 7 days).
	ExpiringWithin time.Duration
	// Now is the clock (default time.Now).
	Now     func() time.Time
	Log     *slog.Logger
	Metrics *Metrics
}

// Drainer writes the consumption logs of every balance into the ledger,
// expires grants, emits the credits events and keeps the hot-path
// counters equal to the ledger. Several may run (in several admin
// processes): the account's row lock makes each balance's drain one at a
// time, and the ledger records each log entry once.
type Drainer struct {
	db   *pgxpool.Pool
	logs limiter.CreditLogs
	cfg  DrainerConfig
}

// NewDrainer returns a drainer of the balances kept in logs (the limiter
// store) into the ledger in db.
func NewDrainer(db *pgxpool.Pool, logs limiter.CreditLogs, cfg DrainerConfig) *Drainer {
	if cfg.Prefix == "" {
		cfg.Prefix = "tg:"
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1000
	}
	if cfg.ExpiringWithin <= 0 {
		cfg.ExpiringWithin = 7 * 24 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Drainer{db: db, logs: logs, cfg: cfg}
}

// Run drains every interval until ctx ends.
func (d *Drainer) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := d.Drain(ctx); err != nil && ctx.Err() == nil {
			d.cfg.Log.WarnContext(ctx, "credits: drain failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Report is what one Drain did.
type Report struct {
	// Entries is the log entries recorded in the ledger.
	Entries int
	// Drift is the sum over balances of |counter − ledger| found (and
	// repaired) once every entry was recorded.
	Drift int64
	// Rebuilt counts the counters rebuilt from the ledger (lost by Redis).
	Rebuilt int
	// Expired counts the grants expired.
	Expired int
}

// Drain records every balance's log up to now, expires due grants and
// repairs drift. It returns what it did; the drift metric is set from it.
func (d *Drainer) Drain(ctx context.Context) (Report, error) {
	ids, err := NewStore(d.db).Tenants(ctx)
	if err != nil {
		return Report{}, err
	}
	var total Report
	for _, id := range ids {
		for {
			r, more, err := d.drainTenant(ctx, id)
			if err != nil {
				d.cfg.Metrics.drained(total)
				return total, fmt.Errorf("credits: drain %s: %w", id, err)
			}
			total.Entries += r.Entries
			total.Drift += r.Drift
			total.Rebuilt += r.Rebuilt
			total.Expired += r.Expired
			if !more {
				break
			}
		}
	}
	d.cfg.Metrics.drained(total)
	return total, nil
}

// drainTenant records one batch of tenantID's log in one transaction;
// more is true when the log held more.
func (d *Drainer) drainTenant(ctx context.Context, tenantID string) (r Report, more bool, err error) {
	counter, logKey := Keys(d.cfg.Prefix, tenantID)
	var through string
	err = postgres.Tx(ctx, d.db, func(tx pgx.Tx) error {
		r, through, more = Report{}, "", false
		s := NewStore(tx)
		b, err := s.openBook(ctx, tenantID)
		if err != nil {
			return err
		}
		before := b.acct
		consumed, present, entries, err := d.logs.ReadCredits(ctx, counter, logKey, b.acct.Position, d.cfg.Batch)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := d.record(ctx, s, b, e, &r); err != nil {
				return err
			}
		}
		if len(entries) > 0 {
			through = entries[len(entries)-1].ID
		}
		r.Entries = len(entries)
		more = len(entries) == d.cfg.Batch
		now := d.cfg.Now()
		if !more {
			expired, err := b.expireDue(ctx, now)
			if err != nil {
				return err
			}
			r.Expired += len(expired)
			// Every entry up to the read is recorded: the counter read
			// with them must equal the ledger's consumption.
			switch {
			case !present:
				r.Rebuilt++
				err = d.logs.AdjustCredits(ctx, counter, 0, b.acct.Consumed)
			case consumed != b.acct.Consumed:
				drift := consumed - b.acct.Consumed
				r.Drift = max(drift, -drift)
				d.cfg.Log.WarnContext(ctx, "credits: counter drifted from the ledger; repaired", "tenant_id", tenantID,
					"counter", consumed, "ledger", b.acct.Consumed)
				err = d.logs.AdjustCredits(ctx, counter, -drift, b.acct.Consumed)
			}
			if err != nil {
				return err
			}
		}
		if err := d.notify(ctx, tx, s, b, now); err != nil {
			return err
		}
		if b.acct == before && r.Entries == 0 {
			return nil
		}
		return b.save(ctx)
	})
	if err == nil && through != "" {
		// Recorded: the entries may leave the log. A failure here only
		// leaves them to be skipped next time (by position).
		if terr := d.logs.TrimCredits(ctx, logKey, through); terr != nil {
			d.cfg.Log.WarnContext(ctx, "credits: trim log", "tenant_id", tenantID, "err", terr)
		}
	}
	return r, more, err
}

// record writes one log entry into the ledger: grants expired by its
// time first, then its units drawn on the grants (or given back), and its
// overage on the month's bill.
func (d *Drainer) record(ctx context.Context, s *Store, b *book, e limiter.CreditEntry, r *Report) error {
	at := time.UnixMicro(e.AtUS).UTC()
	expired, err := b.expireDue(ctx, at)
	if err != nil {
		return err
	}
	r.Expired += len(expired)
	cause := "check"
	if e.HoldID != "" {
		cause = "hold " + e.HoldID
	}
	id := e.ID
	switch {
	case e.Units > 0:
		err = b.take(ctx, KindConsumption, e.Units, false, cause, &id, at)
	case e.Units < 0:
		err = b.giveBack(ctx, KindRefund, -e.Units, false, "settled "+cause, &id, at)
	}
	if err == nil && e.Overage != 0 {
		err = s.addOverage(ctx, b.acct.TenantID, at, e.Overage)
	}
	b.acct.Position = e.ID
	return err
}

// notify emits credits.low and credits.exhausted when the balance first
// falls to the plan's low threshold or to its floor (−overdraft), again
// once it has risen above, and credits.expiring once per grant that
// expires within ExpiringWithin with units left.
func (d *Drainer) notify(ctx context.Context, tx pgx.Tx, s *Store, b *book, now time.Time) error {
	ps, err := s.TenantSettings(ctx, b.acct.TenantID)
	if tollgate.ErrorCode(err) == tollgate.ENOTFOUND {
		return nil
	}
	if err != nil {
		return err
	}
	balance := b.acct.Balance()
	emit := func(typ string, data map[string]any) error {
		data["balance"] = balance
		_, err := events.Emit(ctx, tx, events.Event{Type: typ, TenantID: b.acct.TenantID, CreatedAt: now, Data: data})
		return err
	}
	low := ps.LowThreshold > 0 && balance <= ps.LowThreshold
	if low && !b.acct.lowNotified {
		if err := emit(EventLow, map[string]any{"threshold": ps.LowThreshold}); err != nil {
			return err
		}
	}
	b.acct.lowNotified = low
	exhausted := balance <= -ps.Overdraft
	if exhausted && !b.acct.exhaustedNotified {
		if err := emit(EventExhausted, map[string]any{"overdraft": ps.Overdraft, "mode": ps.Mode}); err != nil {
			return err
		}
	}
	b.acct.exhaustedNotified = exhausted
	rows, err := tx.Query(ctx, `UPDATE credit_grants SET warned_at = $3 WHERE tenant_id = $1::uuid AND expired_at IS NULL
		AND warned_at IS NULL AND remaining > 0 AND expires_at <= $2 RETURNING id::text, expires_at, remaining`,
		b.acct.TenantID, now.Add(d.cfg.ExpiringWithin), now)
	type warning struct {
		id        string
		at        time.Time
		remaining int64
	}
	warnings, err := postgres.Collect(rows, err, func(r pgx.Row) (warning, error) {
		var w warning
		return w, r.Scan(&w.id, &w.at, &w.remaining)
	}, "credits: expiring grants")
	if err != nil {
		return err
	}
	for _, w := range warnings {
		if err := emit(EventExpiring, map[string]any{"grant_id": w.id, "expires_at": w.at.UTC(), "remaining": w.remaining}); err != nil {
			return err
		}
	}
	return nil
}
