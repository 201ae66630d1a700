package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
)

// Ops makes billing's one change, closing a month, in its own
// transaction with exactly one audit entry (audit.Apply), as every
// feature's Ops does. Who may make it is decided before
// (internal/access): operators only.
type Ops struct {
	db  postgres.Conn
	now func() time.Time
	// invoicing, when on, pushes the invoices a close issued once it has
	// committed.
	invoicing *Invoicing
}

// WithInvoicing makes CloseMonth push the month's invoices once the close
// has committed (inv nil or off: none; a process with a provider pushes
// them later).
func (o *Ops) WithInvoicing(inv *Invoicing) *Ops {
	o.invoicing = inv
	return o
}

// NewOps returns billing's operations on db (a pool); now is the clock
// (nil: time.Now).
func NewOps(db postgres.Conn, now func() time.Time) *Ops {
	if now == nil {
		now = time.Now
	}
	return &Ops{db: db, now: now}
}

// CloseResult says what CloseMonth did.
type CloseResult struct {
	Month string `json:"month"`
	// AlreadyClosed is true when the month had been closed before; nothing
	// changed.
	AlreadyClosed bool      `json:"already_closed"`
	ClosedAt      time.Time `json:"closed_at"`
	Statements    int       `json:"statements"`
	// TotalMinor sums the statements' totals by currency.
	TotalMinor map[string]int64 `json:"total_minor"`
	// Late sums usage that arrived after the close.
	Late metering.Counts `json:"late_usage"`
	// LateCredits sums what the credits drainer recorded for the month
	// after the close (credit_late).
	LateCredits credits.Late `json:"late_credits"`
	// CreditsBehind lists the IDs of the tenants whose credits drainer
	// had not recorded their draws up to the month's end when it was
	// closed (their statements say credits_behind): what it records later
	// for the month is late credits.
	CreditsBehind []string `json:"credits_behind"`
	// InvoicesIssued counts the invoices the close issued: one for each
	// statement of a tenant with a billing account, whether or not this
	// process can push them.
	InvoicesIssued int `json:"invoices_issued"`
	// Invoices says how pushing the month's invoices went, with
	// invoicing on: invoices that failed stay pending and are retried,
	// unless the provider refused them for good.
	Invoices *PushReport `json:"invoices,omitempty"`
}

// errClosed ends the transaction of a close that finds the month closed:
// nothing changed, so nothing is recorded.
var errClosed = errors.New("billing: month already closed")

// CloseMonth freezes m, by the actor by (month.close): every billable
// tenant's statement is computed and stored, and from then on
// Store.Statement returns the stored one. It is the month-close operation
// of the admin API, the console and the CLI, and records month.close in
// the audit log in the closing transaction, so that there is no close
// without its record. Closing a closed month changes nothing
// (AlreadyClosed) and records nothing. A month that has not ended yet
// cannot be closed (EINVALID).
//
// Each statement of a tenant with a billing account gets its invoice in
// the closing transaction, pending (InvoicesIssued), whatever this
// process's settings: with invoicing (WithInvoicing) the close pushes
// them once it has committed, and any process with a payment provider
// pushes those still pending later (admin serve, admin invoices push).
//
// Usage still in flight (buffered in API processes or the stream) when
// the month is closed is counted when it arrives and listed as late
// usage; close a month once the worker has caught up. Prepaid credits
// alike: the close waits for the credits drainer's transactions in
// flight and keeps new ones out until it commits; a tenant whose ledger
// had not been drained past the month's end is named in CreditsBehind
// (and its statement says so), and what the drainer records for the
// month later is listed as late credits.
func (o *Ops) CloseMonth(ctx context.Context, by audit.Actor, m usage.Month, progress Progress) (CloseResult, error) {
	now := o.now()
	res := CloseResult{Month: m.String(), TotalMinor: map[string]int64{}}
	if now.Before(m.End()) {
		return res, tollgate.Errorf(tollgate.EINVALID, "month %s has not ended yet", m)
	}
	err := audit.Apply(ctx, o.db, by, func(tx pgx.Tx) (audit.Change, error) {
		// Wait for batches being applied; block new ones until committed.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, usage.CloseLock); err != nil {
			return audit.Change{}, fmt.Errorf("usage: close: lock: %w", err)
		}
		at, err := usage.ClosedAt(ctx, tx, m)
		if err != nil {
			return audit.Change{}, err
		}
		if at != nil {
			res.AlreadyClosed, res.ClosedAt = true, *at
			return audit.Change{}, errClosed
		}
		res.ClosedAt = now.UTC().Truncate(time.Microsecond)
		if _, err := tx.Exec(ctx, `INSERT INTO usage_closed_months (month, closed_at, statements) VALUES ($1, $2, 0)`,
			m.Start(), res.ClosedAt); err != nil {
			return audit.Change{}, fmt.Errorf("usage: close: %w", err)
		}
		// Read plans, keys and plan history only now: a plan change that
		// checks for closed months (tenants.SetPlan locks the table) has
		// either committed before the insert above, or waits for this
		// transaction and then sees the month closed.
		ps, ts := plans.NewStore(tx), tenants.NewStore(tx)
		b, err := loadBilling(ctx, ps, ts, "")
		if err != nil {
			return audit.Change{}, err
		}
		list, err := ts.List(ctx)
		if err != nil {
			return audit.Change{}, err
		}
		sts, err := statementsOf(ctx, tx, list, m, b, progress)
		if err != nil {
			return audit.Change{}, notClosed(m, err)
		}
		// The close lock keeps drains out (credits.Drainer takes it shared):
		// a ledger whose drainer has not passed the month's end is named,
		// and what it records later for the month is late.
		behind, err := credits.Behind(ctx, tx, m.End())
		if err != nil {
			return audit.Change{}, err
		}
		isBehind := map[string]bool{}
		for _, id := range behind {
			isBehind[id] = true
		}
		for i := range sts {
			if isBehind[sts[i].TenantID] && sts[i].Credits != nil {
				sts[i].CreditsBehind = true
				res.CreditsBehind = append(res.CreditsBehind, sts[i].TenantID)
			}
		}
		for _, st := range sts {
			st.Status, st.ClosedAt = "closed", &res.ClosedAt
			body, err := json.Marshal(st)
			if err != nil {
				return audit.Change{}, err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO statements (tenant_id, month, currency, total_minor, body, closed_at)
				VALUES ($1, $2, $3, $4, $5, $6)`, st.TenantID, m.Start(), st.Currency, st.TotalMinor, body, res.ClosedAt); err != nil {
				return audit.Change{}, fmt.Errorf("usage: close: store statement of %s: %w", st.TenantName, err)
			}
			issued, err := issueInvoice(ctx, tx, st, now)
			if err != nil {
				return audit.Change{}, err
			}
			if issued {
				res.InvoicesIssued++
			}
			if _, err := events.Emit(ctx, tx, events.Event{Type: events.StatementClosed, TenantID: st.TenantID,
				CreatedAt: res.ClosedAt, Data: closedData(st)}); err != nil {
				return audit.Change{}, fmt.Errorf("usage: close: %w", err)
			}
			if res.TotalMinor[st.Currency], err = addChecked(res.TotalMinor[st.Currency], st.TotalMinor); err != nil {
				return audit.Change{}, fmt.Errorf("usage: close: total of %s: %w", st.Currency, err)
			}
		}
		res.Statements = len(sts)
		if _, err = tx.Exec(ctx, `UPDATE usage_closed_months SET statements = $2 WHERE month = $1`, m.Start(), len(sts)); err != nil {
			return audit.Change{}, err
		}
		return audit.Change{Action: "month.close", TargetType: "month", TargetID: res.Month,
			After: map[string]any{"statements": res.Statements, "total_minor": res.TotalMinor, "invoices_issued": res.InvoicesIssued}}, nil
	})
	if err != nil && !errors.Is(err, errClosed) {
		return CloseResult{}, err
	}
	if res.AlreadyClosed {
		rows, err := o.db.Query(ctx, `SELECT currency, count(*), sum(total_minor) FROM statements
			WHERE month = $1 GROUP BY currency`, m.Start())
		if err != nil {
			return res, fmt.Errorf("usage: close: %w", err)
		}
		var currency string
		var n int
		var total int64
		_, err = pgx.ForEachRow(rows, []any{&currency, &n, &total}, func() error {
			res.Statements += n
			res.TotalMinor[currency] = total
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("usage: close: %w", err)
		}
		rows, err = o.db.Query(ctx, `SELECT tenant_id::text FROM statements
			WHERE month = $1 AND coalesce((body->>'credits_behind')::boolean, false) ORDER BY body->>'tenant_name'`, m.Start())
		if res.CreditsBehind, err = postgres.Collect(rows, err, func(r pgx.Row) (string, error) {
			var id string
			return id, r.Scan(&id)
		}, "usage: close: credits behind"); err != nil {
			return res, err
		}
	}
	if o.invoicing.Enabled() {
		// A push that fails leaves its invoices pending (retried with
		// backoff); the close stands.
		r, err := o.invoicing.Push(ctx, false)
		if err != nil {
			o.invoicing.cfg.Log.Warn("pushing the month's invoices", "month", res.Month, "error", err)
		}
		res.Invoices = &r
	}
	late, err := usage.LateByTenant(ctx, o.db, m, "")
	if err != nil {
		return res, err
	}
	for _, c := range late {
		res.Late.Add(c)
	}
	lateCredits, err := credits.LateByTenant(ctx, o.db, m.Start(), "")
	if err != nil {
		return res, err
	}
	for _, c := range lateCredits {
		res.LateCredits.Add(c)
	}
	if res.CreditsBehind == nil {
		res.CreditsBehind = []string{}
	}
	return res, nil
}
