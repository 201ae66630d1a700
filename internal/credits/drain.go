package credits

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/backoff"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/usage"
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
	// Now, when set, is the clock grants expire by and events are dated
	// with, instead of the store's (the clock checks are decided at).
	Now func() time.Time
	// Region is the drainer's region in a deployment of several
	// (TOLLGATE_REGION; "" for one region), and Regions how many there
	// are: the drainer then records its region's logs and keeps the
	// region's escrow (regions.go).
	Region  string
	Regions int
	// Margin is how long before a grant's expiry no more escrow is
	// reserved from it (default 5 s: several drains, so that a region's
	// escrow lapses with its grant only when its drainer is cut off).
	Margin  time.Duration
	Log     *slog.Logger
	Metrics *Metrics
}

// Drainer writes the consumption logs of every balance into the ledger,
// expires grants, emits the credits events and keeps the hot-path
// counters equal to the ledger: it alone makes a counter (a new balance,
// or one Redis lost), from the ledger, once it has recorded every entry
// of the log. Several may run (in several admin processes): the
// account's row lock makes each balance's drain one at a time, and the
// ledger records each log entry once.
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
	if cfg.Margin <= 0 {
		cfg.Margin = refundMargin
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Drainer{db: db, logs: logs, cfg: cfg}
}

// Run drains every interval until ctx ends. Failures are logged as an
// outage (once when it starts, every 10 s while it lasts, once when it
// ends).
func (d *Drainer) Run(ctx context.Context, interval time.Duration) {
	mon := backoff.NewMonitor(backoff.MonitorConfig{Component: "credits_drainer", Dependency: "its stores (Postgres, Redis)",
		Log: d.cfg.Log})
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		_, err := d.Drain(ctx)
		switch {
		case err == nil:
			mon.Success()
		case ctx.Err() == nil:
			mon.Failure(err)
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
	// Rebuilt counts the counters made from the ledger (new, or lost by
	// Redis).
	Rebuilt int
	// Expired counts the grants expired.
	Expired int
	// Held is the units the drainer's region holds in escrow, summed
	// over balances (a deployment of several regions).
	Held int64
}

// Drain records every balance's log up to now, expires due grants and
// repairs drift. It returns what it did; the drift metric is set from it.
func (d *Drainer) Drain(ctx context.Context) (Report, error) {
	ids, err := NewStore(d.db).Tenants(ctx)
	if err != nil {
		return Report{}, err
	}
	drain := d.drainTenant
	if d.cfg.Region != "" {
		// One drainer of a region at a time: the escrow it reserves
		// reaches the counter after the ledger's commit, and another
		// drainer reading the counter between would see drift.
		unlock, ok, err := d.lockRegion(ctx)
		if err != nil || !ok {
			return Report{}, err
		}
		defer unlock()
		drain = d.drainRegion
	}
	var total Report
	var failed []error
	inARow := 0
	for _, id := range ids {
		if ctx.Err() != nil {
			failed = append(failed, ctx.Err())
			break
		}
		if inARow == maxInARow {
			// Every balance failing is an outage (Redis, Postgres), not
			// a balance's own trouble: the pass ends, and the next one
			// tries again, rather than wait out each balance's timeouts.
			failed = append(failed, fmt.Errorf("credits: %d balances in a row could not be drained; the pass ends", maxInARow))
			break
		}
		// A balance whose checks keep logging deferred draws while its
		// counter is missing is drained until the counter can be made;
		// past maxRounds, at the next Drain.
		for range maxRounds {
			r, more, err := drain(ctx, id)
			if err != nil {
				// One balance that cannot be drained (a lock timeout on
				// a busy account, a log Redis refuses) must not hold up
				// the others: their logs, events and escrow go on.
				failed = append(failed, fmt.Errorf("credits: drain %s: %w", id, err))
				inARow++
				break
			}
			inARow = 0
			total.Entries += r.Entries
			total.Drift += r.Drift
			total.Rebuilt += r.Rebuilt
			total.Expired += r.Expired
			total.Held += r.Held
			if !more {
				break
			}
		}
	}
	d.cfg.Metrics.drained(total)
	if len(failed) > maxReported {
		failed = append(failed[:maxReported], fmt.Errorf("credits: and %d more balances", len(failed)-maxReported))
	}
	return total, errors.Join(failed...)
}

// maxReported bounds the balances a Drain's error names; maxInARow is
// how many balances failing one after the other end a pass.
const (
	maxReported = 5
	maxInARow   = 3
)

// maxRounds bounds the transactions one Drain spends on one balance.
const maxRounds = 100

// originKeeper is what a store whose consumption logs outlive the
// process (redisstore.Store) offers to tell them from another store's:
// an identity kept beside each log, in its slot, read with it. A store
// without it (a single process's memory store, never one of several
// regions) keeps no origin.
type originKeeper interface {
	// ReadCreditsOrigin is ReadCredits that also returns the log's
	// origin, read in the same atomic call: first set to id when it is
	// missing and id is not empty ("" when it is missing and id is).
	ReadCreditsOrigin(ctx context.Context, key, log, after string, max int, id string) (limiter.CreditRead, string, error)
	// TrimCreditsOrigin is TrimCredits only while the log's origin is
	// origin, in one atomic call.
	TrimCreditsOrigin(ctx context.Context, log, through, origin string) error
	// LegacyCreditsOrigin is the identity an earlier release kept for
	// the whole Redis ("" when none).
	LegacyCreditsOrigin(ctx context.Context, prefix string) (string, error)
}

// drainTenant records one batch of tenantID's log in one transaction;
// more is true when the log held more (or its counter could not be made
// yet: entries came after the read).
//
// The account's position is an entry ID of the log of the Redis the
// account names (log_origin): the identity the drainer keeps beside the
// log, read with it, made anew when missing (a new Redis, or one that
// came back empty). A log with another identity is read from its
// beginning: its IDs come from its own Redis's clock, and read after a
// position of another log, the entries of a clock behind it would never
// be recorded while the drift repair gave their units back to the
// counter, drawn again and again. Its entries are recorded under its
// identity ("origin:ID", as a region's under its name), so that an ID it
// reuses is not taken for an entry of the Redis before it. The identity
// is the one read with the entries, never one read before them: Redis
// may come back empty at any time, part-way through a pass too. The log
// is trimmed only while it still carries that identity.
func (d *Drainer) drainTenant(ctx context.Context, tenantID string) (r Report, more bool, err error) {
	counter, logKey := Keys(d.cfg.Prefix, tenantID)
	keeper, _ := d.logs.(originKeeper)
	var through, origin string
	err = postgres.Tx(ctx, d.db, func(tx pgx.Tx) error {
		r, through, origin, more = Report{}, "", "", false
		s, b, settings, overdraft, err := openDrain(ctx, tx, tenantID)
		if err != nil {
			return err
		}
		before := b.acct
		var read limiter.CreditRead
		if keeper == nil {
			read, err = d.logs.ReadCredits(ctx, counter, logKey, b.acct.Position, d.cfg.Batch)
		} else {
			read, origin, err = d.readOrigin(ctx, keeper, counter, logKey, &b.acct)
		}
		if err != nil {
			return err
		}
		consumed, present, entries := read.Consumed, read.Present, read.Entries
		for _, e := range entries {
			if err := d.record(ctx, s, b, overdraft, nil, origin, e, &r); err != nil {
				return err
			}
		}
		if len(entries) > 0 {
			through = entries[len(entries)-1].ID
		}
		r.Entries = len(entries)
		more = len(entries) == d.cfg.Batch
		// Grants expire by the store's clock, the checks' (a draw not
		// read yet comes after it); Now overrides it in tests.
		now := time.UnixMicro(read.NowUS).UTC()
		if d.cfg.Now != nil {
			now = d.cfg.Now()
		}
		if !more {
			expired, err := b.expireDue(ctx, now)
			if err != nil {
				return err
			}
			r.Expired += len(expired)
			// Every entry up to the read is recorded: the counter read
			// with them must equal the ledger's consumption.
			// The counter missing (new, or lost by Redis) is made from
			// the ledger, unless entries came since the read: checks draw
			// nothing on it until then.
			switch {
			case !present:
				made, err := d.logs.RebuildCredits(ctx, counter, logKey, b.acct.Position, b.acct.Consumed)
				if err != nil {
					return err
				}
				if made {
					r.Rebuilt++
				} else {
					more = true
				}
			case consumed != b.acct.Consumed:
				drift := consumed - b.acct.Consumed
				r.Drift = max(drift, -drift)
				d.cfg.Log.WarnContext(ctx, "credits: counter drifted from the ledger; repaired", "tenant_id", tenantID,
					"counter", consumed, "ledger", b.acct.Consumed)
				if err := d.logs.AdjustCredits(ctx, counter, -drift); err != nil {
					return err
				}
			}
		}
		if err := d.notify(ctx, tx, settings, b, now); err != nil {
			return err
		}
		if !more {
			// The whole log up to the read is recorded: saved with any
			// change, and at the first drain of a month without one, so
			// that a close can tell whose ledger passed its month's end
			// (Behind) without a write per balance and drain.
			through := max(b.acct.drainedThroughUS, now.UnixMicro())
			if b.acct != before || r.Entries > 0 || !usage.MonthOf(time.UnixMicro(through)).Start().Equal(
				usage.MonthOf(time.UnixMicro(b.acct.drainedThroughUS)).Start()) {
				b.acct.drainedThroughUS = through
			}
		}
		if b.acct == before && r.Entries == 0 {
			return nil
		}
		return b.save(ctx)
	})
	if err == nil && through != "" {
		// Recorded: the entries may leave the log. A failure here only
		// leaves them to be skipped next time (by position).
		trim := func() error { return d.logs.TrimCredits(ctx, logKey, through) }
		if keeper != nil {
			trim = func() error { return keeper.TrimCreditsOrigin(ctx, logKey, through, origin) }
		}
		if terr := trim(); terr != nil {
			d.cfg.Log.WarnContext(ctx, "credits: trim log", "tenant_id", tenantID, "err", terr)
		}
	}
	return r, more, err
}

// readOrigin reads one batch of the account's log with the log's
// identity, making one when missing, and moves the account to that
// identity: the position is kept when the account has none (drained
// before identities were kept: the Redis is taken for the one its
// position is of), and the log is read from its beginning when the
// account names another (the position is of another Redis's log).
//
// A log with no identity yet whose Redis still holds the identity an
// earlier release kept for the whole Redis (LegacyCreditsOrigin), the one
// the account names, is that Redis's log: it takes that identity and
// keeps its position (read from the beginning, what a failed trim left in
// it would be recorded twice). Only a Redis emptied in the instant
// between that look and the read would be taken for the old one.
func (d *Drainer) readOrigin(ctx context.Context, keeper originKeeper, counter, logKey string, acct *account) (limiter.CreditRead, string, error) {
	read, origin, err := keeper.ReadCreditsOrigin(ctx, counter, logKey, acct.Position, d.cfg.Batch, "")
	if err == nil && origin == "" {
		id := rand.Text()
		if acct.logOrigin != "" {
			legacy, err := keeper.LegacyCreditsOrigin(ctx, d.cfg.Prefix)
			if err != nil {
				return read, "", err
			}
			if legacy == acct.logOrigin {
				id = legacy
			}
		}
		read, origin, err = keeper.ReadCreditsOrigin(ctx, counter, logKey, acct.Position, d.cfg.Batch, id)
	}
	if err != nil || origin == acct.logOrigin {
		return read, origin, err
	}
	if acct.logOrigin != "" && acct.Position != "" && acct.Position != "0-0" {
		// Another Redis's log: its position says nothing here.
		again, originAgain, err := keeper.ReadCreditsOrigin(ctx, counter, logKey, "0-0", d.cfg.Batch, rand.Text())
		if err != nil {
			return read, "", err
		}
		if originAgain != origin {
			return read, "", fmt.Errorf("credits: drain: the log's Redis changed while it was read; the next drain reads it again")
		}
		read = again
		acct.Position = "0-0"
	}
	acct.logOrigin = origin // saved with the position
	return read, origin, nil
}

// openDrain opens tenantID's book on tx (locking its account) and reads
// the credit settings of its plan and its overdraft: nil settings (and
// no overdraft) when its plan has none.
func openDrain(ctx context.Context, tx pgx.Tx, tenantID string) (*Store, *book, *PlanSettings, int64, error) {
	// A close (package billing) holds the lock exclusively: what a drain
	// records is either in the month's frozen statements or, dated in a
	// month closed before it began, listed as late (credit_late), never
	// half of each. Taken before the account, as every drain does, so
	// drains and closes wait for each other in one order.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1)`, usage.CloseLock); err != nil {
		return nil, nil, nil, 0, fmt.Errorf("credits: drain: close lock: %w", err)
	}
	s := NewStore(tx)
	b, err := s.openBook(ctx, tenantID)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	b.late = &lateLog{q: tx}
	ps, err := s.TenantSettings(ctx, tenantID)
	switch {
	case err == nil:
		return s, b, &ps, ps.Overdraft, nil
	case tollgate.ErrorCode(err) == tollgate.ENOTFOUND:
		return s, b, nil, 0, nil
	}
	return nil, nil, nil, 0, err
}

// ledgerDraw begins the note of a draw's cause when the ledger drew units
// the store had counted past the balance (ledgerDrawn finds them by it).
const ledgerDraw = "drawn by the ledger"

// record writes one log entry into the ledger: grants expired by its
// time first, then its units drawn on the grants (or given back), and its
// overage and unpaid units on the hour's bill. Its rows name the entry
// "source:ID", source being its log's (the region's name, or the
// identity of the drainer of one region's Redis), or by its bare ID when
// source is "" (a store that keeps no identity): one entry is recorded
// once, and the entries of two logs never share a name. The units of a
// deferred entry (logged while the counter was missing) are split here
// as the check script would have: drawn while the ledger's balance stays at or
// above −overdraft, the rest overage or unpaid. In a region (reg not
// nil) grants expire no later than reg.safeUS, the room excludes what the
// regions hold in escrow, and what the region's script counted past its
// escrow as overage or unpaid is drawn while the room allows.
func (d *Drainer) record(ctx context.Context, s *Store, b *book, overdraft int64, reg *regionDrain, source string, e limiter.CreditEntry, r *Report) error {
	at := time.UnixMicro(e.AtUS).UTC()
	expired, err := b.expireDue(ctx, reg.expiryAt(at))
	if err != nil {
		return err
	}
	r.Expired += len(expired)
	cause := "check"
	if e.HoldID != "" {
		cause = "hold " + e.HoldID
	}
	room := func() int64 { return max(0, b.acct.Balance()+overdraft-reg.held()) }
	units, overage, unpaid := e.Units, e.Overage, e.Unpaid
	if e.Deferred != limiter.NotDeferred && units > 0 {
		cause += " (" + ledgerDraw + ": the balance was unknown)"
		drawn := min(units, room())
		if e.Deferred == limiter.DeferredOverage {
			overage += units - drawn
		} else {
			unpaid += units - drawn
		}
		units = drawn
	}
	if e.HoldID != "" && units <= 0 && (overage < 0 || unpaid < 0) {
		// A hold's settlement gives back first what the store counted
		// past the balance (overage, unpaid); what of that the ledger drew
		// for the hold (past a region's escrow, or on a balance that was
		// unknown) returns to the balance, as a refund, not as negative
		// overage.
		drawn, err := s.ledgerDrawn(ctx, b.acct.TenantID, cause)
		if err != nil {
			return err
		}
		// Of the overage given back, what the hold's bill still counts
		// (the store's overage for it less what the ledger drew) goes
		// back first; then what the ledger drew returns to the balance.
		billed := max(0, e.HoldOverage-drawn)
		fromOverage := max(0, -min(0, overage)-billed)
		if back := min(drawn, fromOverage-min(0, unpaid)); back > 0 {
			fromOverage = min(back, fromOverage)
			overage += fromOverage
			unpaid += back - fromOverage
			units -= back
			cause += " (given back by the ledger: drawn by it for the hold)"
		}
	}
	id := e.ID
	if reg != nil && e.Deferred == limiter.NotDeferred {
		// The room is the same before and after the units the store drew
		// (they leave the balance and the region's escrow alike).
		if past := max(0, overage) + max(0, unpaid); past > 0 && units >= 0 {
			if drawn := min(past, room()); drawn > 0 {
				fromOverage := min(drawn, max(0, overage))
				overage -= fromOverage
				unpaid -= drawn - fromOverage
				units += drawn
				cause += " (" + ledgerDraw + " past the region's escrow)"
			}
		}
		reg.own.Counted += e.Units
	}
	if source != "" {
		id = source + ":" + e.ID // each log's IDs are its own Redis's
	}
	// A hold's settlement moves the grants as of its time, but its rows
	// and hour are dated at the hold's opening: its statement bills the
	// hold's units in the request's month, as its draw at the check and
	// its usage count there, however late it was settled.
	dated := at
	if e.OpenedUS > 0 {
		dated = time.UnixMicro(e.OpenedUS).UTC()
		b.dated = dated
	}
	var lapsed int64
	switch {
	case units > 0:
		err = b.take(ctx, KindConsumption, units, false, cause, &id, at)
	case units < 0:
		var from []drawnFrom
		if e.HoldID != "" {
			from, err = s.holdDraws(ctx, b.acct.TenantID, "hold "+e.HoldID)
		}
		if err == nil {
			lapsed, err = b.giveBack(ctx, KindRefund, -units, false, "settled "+cause, &id, at, from)
		}
	}
	b.dated = time.Time{}
	if err == nil && (overage != 0 || unpaid != 0) {
		err = s.addHour(ctx, b.acct.TenantID, dated, overage, unpaid)
	}
	if err == nil {
		err = b.late.note(ctx, b.acct.TenantID, &id, dated, Late{Drawn: units, Overage: overage, Unpaid: unpaid})
	}
	if err == nil && lapsed != 0 {
		// What expired at once did so now, not at the hold's opening.
		err = b.late.note(ctx, b.acct.TenantID, &id, at, Late{Expired: lapsed})
	}
	if reg == nil {
		b.acct.Position = e.ID
	} else {
		reg.own.Position = e.ID
	}
	return err
}

// notify emits credits.low and credits.exhausted when the balance first
// falls to the plan's low threshold or to its floor (−overdraft), again
// once it has risen above, and credits.expiring once per grant that
// expires within ExpiringWithin with units left.
func (d *Drainer) notify(ctx context.Context, tx pgx.Tx, ps *PlanSettings, b *book, now time.Time) error {
	if ps == nil {
		return nil // the tenant's plan does not draw on credits
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
