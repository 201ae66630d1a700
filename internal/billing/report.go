package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
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
)

// Progress is told how many of total items are done; nil tells nobody.
type Progress func(done, total int)

func (p Progress) report(done, total int) {
	if p != nil {
		p(done, total)
	}
}

// billing is what statements need besides usage.
type billing struct {
	plans   map[int64]plans.Plan
	keys    map[string]tenants.Key
	history map[string][]tenants.PlanChange
}

func (s *Store) loadBilling(ctx context.Context, tenantID string) (billing, error) {
	return loadBilling(ctx, s.plans, s.tenants, tenantID)
}

// loadBilling reads what statements are computed from through ps and ts
// (on the pool, or on a transaction).
func loadBilling(ctx context.Context, ps *plans.Store, ts *tenants.Store, tenantID string) (billing, error) {
	b := billing{plans: map[int64]plans.Plan{}, keys: map[string]tenants.Key{}, history: map[string][]tenants.PlanChange{}}
	planList, err := ps.List(ctx)
	if err != nil {
		return b, err
	}
	for _, p := range planList {
		b.plans[p.ID] = p
	}
	keys, err := ts.ListKeys(ctx, tenantID)
	if err != nil {
		return b, err
	}
	for _, k := range keys {
		b.keys[k.ID] = k
	}
	hist, err := ts.PlanChanges(ctx, tenantID)
	if err != nil {
		return b, err
	}
	for _, c := range hist {
		b.history[c.TenantID] = append(b.history[c.TenantID], c)
	}
	return b, nil
}

// billable reports whether t was on a plan at some time before m ended.
func (b billing) billable(t tenants.Tenant, m Month) bool {
	h := b.history[t.ID]
	return len(h) > 0 && h[0].EffectiveAt.Before(m.End())
}

// computeStatement builds t's open statement for m from usage read
// through q.
func computeStatement(ctx context.Context, q pgx.Tx, t tenants.Tenant, m Month, b billing) (Statement, error) {
	rows, err := q.Query(ctx, `SELECT key_id::text, resource, sum(allowed), sum(denied), sum(allowed_units),
			sum(denied_units), sum(expired_holds),
			coalesce(sum(allowed_units) FILTER (WHERE reason = '`+tollgate.ReasonHoldExpired+`'), 0)
		FROM usage_month WHERE tenant_id = $1 AND bucket_start = $2
		GROUP BY key_id, resource ORDER BY key_id, resource`, t.ID, m.Start())
	lines, err := postgres.Collect(rows, err, func(r pgx.Row) (UsageLine, error) {
		var l UsageLine
		err := r.Scan(&l.KeyID, &l.Resource, &l.Allowed, &l.Denied, &l.AllowedUnits, &l.DeniedUnits,
			&l.ExpiredHolds, &l.ExpiredHoldUnits)
		if l.KeyID == nilUUID {
			l.KeyID = ""
		}
		if k, ok := b.keys[l.KeyID]; ok {
			l.KeyPrefix, l.KeyName = k.Prefix, k.Name
		}
		return l, err
	}, "usage: statement usage")
	if err != nil {
		return Statement{}, err
	}
	rows, err = q.Query(ctx, `SELECT bucket_start, sum(allowed_units) FROM usage_hour
		WHERE tenant_id = $1 AND bucket_start >= $2 AND bucket_start < $3
		GROUP BY bucket_start HAVING sum(allowed_units) > 0 ORDER BY bucket_start`, t.ID, m.Start(), m.End())
	hours, err := postgres.Collect(rows, err, func(r pgx.Row) (HourUnits, error) {
		var h HourUnits
		err := r.Scan(&h.Start, &h.AllowedUnits)
		return h, err
	}, "usage: statement hours")
	if err != nil {
		return Statement{}, err
	}
	var hasCredits bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM credit_accounts WHERE tenant_id = $1)`, t.ID).Scan(&hasCredits); err != nil {
		return Statement{}, fmt.Errorf("usage: statement credits: %w", err)
	}
	in := StatementInput{Tenant: t, Month: m, History: b.history[t.ID], Plans: b.plans, Hours: hours, Lines: lines}
	var cm credits.Month
	if hasCredits {
		cs := credits.NewStore(q)
		if in.Credits, err = cs.Hours(ctx, t.ID, m.Start(), m.End()); err != nil {
			return Statement{}, err
		}
		if cm, err = cs.Month(ctx, t.ID, m.Start()); err != nil {
			return Statement{}, err
		}
	}
	st, err := BuildStatement(in)
	if err != nil {
		return st, err
	}
	if hasCredits {
		st.Credits = &cm
	}
	return st, nil
}

// closedAt returns when m was closed, or nil.
func closedAt(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, m Month) (*time.Time, error) {
	var at time.Time
	err := q.QueryRow(ctx, `SELECT closed_at FROM usage_closed_months WHERE month = $1`, m.Start()).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("usage: closed month: %w", err)
	}
	return &at, nil
}

// Statement returns the tenant's statement for m: the frozen one when m is
// closed (with any late usage in Late), otherwise computed from current
// usage with status "open". A tenant that was on no plan in m has a zero
// statement, open or closed alike. ENOTFOUND when there is no such
// tenant.
func (s *Store) Statement(ctx context.Context, tenantID string, m Month) (Statement, error) {
	t, err := s.tenants.Get(ctx, tenantID)
	if err != nil {
		return Statement{}, err
	}
	closed, err := closedAt(ctx, s.db, m)
	if err != nil {
		return Statement{}, err
	}
	if closed != nil {
		list, err := s.frozen(ctx, m, t.ID)
		if err != nil {
			return Statement{}, err
		}
		if len(list) == 0 {
			// Not billable in m (it joined later), so nothing was frozen:
			// the zero statement an open month shows, closed.
			st, err := BuildStatement(StatementInput{Tenant: t, Month: m})
			st.Status, st.ClosedAt = "closed", closed
			return st, err
		}
		return list[0], nil
	}
	b, err := s.loadBilling(ctx, t.ID)
	if err != nil {
		return Statement{}, err
	}
	var st Statement
	err = postgres.ReadTx(ctx, s.db, func(tx pgx.Tx) error {
		st, err = computeStatement(ctx, tx, t, m, b)
		return err
	})
	return st, err
}

// Statements returns every tenant's statement for m, ordered by tenant
// name: the frozen ones when m is closed, otherwise computed ("open") for
// every tenant that was on a plan before m ended.
func (s *Store) Statements(ctx context.Context, m Month, progress Progress) ([]Statement, error) {
	closed, err := closedAt(ctx, s.db, m)
	if err != nil {
		return nil, err
	}
	if closed != nil {
		return s.frozen(ctx, m, "")
	}
	b, err := s.loadBilling(ctx, "")
	if err != nil {
		return nil, err
	}
	list, err := s.tenants.List(ctx)
	if err != nil {
		return nil, err
	}
	out := []Statement{}
	err = postgres.ReadTx(ctx, s.db, func(tx pgx.Tx) error {
		out, err = statementsOf(ctx, tx, list, m, b, progress)
		return err
	})
	return out, err
}

func statementsOf(ctx context.Context, tx pgx.Tx, list []tenants.Tenant, m Month, b billing, progress Progress) ([]Statement, error) {
	var todo []tenants.Tenant
	for _, t := range list {
		if b.billable(t, m) {
			todo = append(todo, t)
		}
	}
	out := make([]Statement, 0, len(todo))
	progress.report(0, len(todo))
	for i, t := range todo {
		st, err := computeStatement(ctx, tx, t, m, b)
		if err != nil {
			return nil, fmt.Errorf("usage: statement of %s: %w", t.Name, err)
		}
		out = append(out, st)
		progress.report(i+1, len(todo))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TenantName < out[j].TenantName })
	return out, nil
}

// frozen reads the stored statements of closed month m (one tenant's, or
// all when tenantID is ""), with late usage summed in Late.
func (s *Store) frozen(ctx context.Context, m Month, tenantID string) ([]Statement, error) {
	rows, err := s.db.Query(ctx, `SELECT s.body,
			l.allowed, l.denied, l.allowed_units, l.denied_units
		FROM statements s LEFT JOIN LATERAL (
			SELECT sum(allowed) AS allowed, sum(denied) AS denied, sum(allowed_units) AS allowed_units,
				sum(denied_units) AS denied_units
			FROM usage_late WHERE month = s.month AND tenant_id = s.tenant_id) l ON true
		WHERE s.month = $1 AND ($2 = '' OR s.tenant_id::text = $2)
		ORDER BY s.body->>'tenant_name'`, m.Start(), tenantID)
	return postgres.Collect(rows, err, func(r pgx.Row) (Statement, error) {
		var body []byte
		var a, d, au, du *int64
		if err := r.Scan(&body, &a, &d, &au, &du); err != nil {
			return Statement{}, err
		}
		var st Statement
		if err := json.Unmarshal(body, &st); err != nil {
			return Statement{}, err
		}
		if a != nil {
			st.Late = &metering.Counts{Allowed: *a, Denied: *d, AllowedUnits: *au, DeniedUnits: *du}
		}
		return st, nil
	}, "usage: read statements")
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
}

// CloseMonth freezes m, by the actor by: every billable tenant's
// statement is computed and stored, and from then on Statement returns
// the stored one. It is the month-close operation of the admin API, the
// console and the CLI, and records month.close in the audit log in the
// closing transaction, so that there is no close without its record.
// Closing a closed month changes nothing (AlreadyClosed) and records
// nothing. A month that has not ended yet cannot be closed (EINVALID).
//
// Usage still in flight (buffered in API processes or the stream) when
// the month is closed is counted when it arrives and listed as late
// usage; close a month once the worker has caught up.
func (s *Store) CloseMonth(ctx context.Context, by audit.Actor, m Month, progress Progress) (CloseResult, error) {
	now := s.cfg.Now()
	res := CloseResult{Month: m.String(), TotalMinor: map[string]int64{}}
	if now.Before(m.End()) {
		return res, tollgate.Errorf(tollgate.EINVALID, "month %s has not ended yet", m)
	}
	err := postgres.Tx(ctx, s.db, func(tx pgx.Tx) error {
		// Wait for batches being applied; block new ones until committed.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, closeLock); err != nil {
			return fmt.Errorf("usage: close: lock: %w", err)
		}
		at, err := closedAt(ctx, tx, m)
		if err != nil {
			return err
		}
		if at != nil {
			res.AlreadyClosed, res.ClosedAt = true, *at
			return nil
		}
		res.ClosedAt = now.UTC().Truncate(time.Microsecond)
		if _, err := tx.Exec(ctx, `INSERT INTO usage_closed_months (month, closed_at, statements) VALUES ($1, $2, 0)`,
			m.Start(), res.ClosedAt); err != nil {
			return fmt.Errorf("usage: close: %w", err)
		}
		// Read plans, keys and plan history only now: a plan change that
		// checks for closed months (tenants.SetPlan locks the table) has
		// either committed before the insert above, or waits for this
		// transaction and then sees the month closed.
		ps, ts := plans.NewStore(tx), tenants.NewStore(tx)
		b, err := loadBilling(ctx, ps, ts, "")
		if err != nil {
			return err
		}
		list, err := ts.List(ctx)
		if err != nil {
			return err
		}
		sts, err := statementsOf(ctx, tx, list, m, b, progress)
		if err != nil {
			return err
		}
		for _, st := range sts {
			st.Status, st.ClosedAt = "closed", &res.ClosedAt
			body, err := json.Marshal(st)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO statements (tenant_id, month, currency, total_minor, body, closed_at)
				VALUES ($1, $2, $3, $4, $5, $6)`, st.TenantID, m.Start(), st.Currency, st.TotalMinor, body, res.ClosedAt); err != nil {
				return fmt.Errorf("usage: close: store statement of %s: %w", st.TenantName, err)
			}
			if _, err := events.Emit(ctx, tx, events.Event{Type: events.StatementClosed, TenantID: st.TenantID,
				CreatedAt: res.ClosedAt, Data: closedData(st)}); err != nil {
				return fmt.Errorf("usage: close: %w", err)
			}
			res.TotalMinor[st.Currency] += st.TotalMinor
		}
		res.Statements = len(sts)
		if _, err = tx.Exec(ctx, `UPDATE usage_closed_months SET statements = $2 WHERE month = $1`, m.Start(), len(sts)); err != nil {
			return err
		}
		_, err = audit.Record(ctx, tx, by, audit.Change{Action: "month.close", TargetType: "month", TargetID: res.Month,
			After: map[string]any{"statements": res.Statements, "total_minor": res.TotalMinor}})
		return err
	})
	if err != nil {
		return CloseResult{}, err
	}
	if res.AlreadyClosed {
		rows, err := s.db.Query(ctx, `SELECT currency, count(*), sum(total_minor) FROM statements
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
	}
	late, err := s.Late(ctx, m, "")
	if err != nil {
		return res, err
	}
	for _, l := range late {
		res.Late.Add(l.Counts)
	}
	return res, nil
}

// LateRow is usage that arrived after its month was closed.
type LateRow struct {
	BatchID    string    `json:"batch_id"`
	TenantID   string    `json:"tenant_id"`
	KeyID      string    `json:"key_id"`
	Resource   string    `json:"resource"`
	Minute     time.Time `json:"minute"`
	RecordedAt time.Time `json:"recorded_at"`
	metering.Counts
}

// Late lists usage that arrived after m was closed (one tenant's, or
// every tenant's when tenantID is ""), oldest first.
func (s *Store) Late(ctx context.Context, m Month, tenantID string) ([]LateRow, error) {
	rows, err := s.db.Query(ctx, `SELECT batch_id, tenant_id::text, key_id::text, resource, bucket_start,
			recorded_at, allowed, denied, allowed_units, denied_units
		FROM usage_late WHERE month = $1 AND ($2 = '' OR tenant_id::text = $2) ORDER BY id`, m.Start(), tenantID)
	return postgres.Collect(rows, err, func(r pgx.Row) (LateRow, error) {
		var l LateRow
		err := r.Scan(&l.BatchID, &l.TenantID, &l.KeyID, &l.Resource, &l.Minute, &l.RecordedAt,
			&l.Allowed, &l.Denied, &l.AllowedUnits, &l.DeniedUnits)
		if l.KeyID == nilUUID {
			l.KeyID = ""
		}
		return l, err
	}, "usage: late usage")
}

// StatementClosedData is the payload of statement.closed: a tenant's
// month, frozen, with its totals in minor units.
type StatementClosedData struct {
	TenantID     string          `json:"tenant_id"`
	Month        string          `json:"month"`
	Currency     string          `json:"currency"`
	Usage        metering.Counts `json:"usage"`
	BaseFeeMinor int64           `json:"base_fee_minor"`
	OverageMinor int64           `json:"overage_minor"`
	TotalMinor   int64           `json:"total_minor"`
	ClosedAt     *time.Time      `json:"closed_at"`
}

func closedData(st Statement) StatementClosedData {
	return StatementClosedData{TenantID: st.TenantID, Month: st.Month, Currency: st.Currency, Usage: st.Usage,
		BaseFeeMinor: st.BaseFeeMinor, OverageMinor: st.OverageMinor, TotalMinor: st.TotalMinor, ClosedAt: st.ClosedAt}
}
