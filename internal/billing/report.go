package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
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
	plans   map[int64]plans.Plan // with their price history
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
	planList, err := ps.ListPriced(ctx)
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
func (b billing) billable(t tenants.Tenant, m usage.Month) bool {
	h := b.history[t.ID]
	return len(h) > 0 && h[0].EffectiveAt.Before(m.End())
}

// computeStatement builds t's open statement for m from usage read
// through q.
func computeStatement(ctx context.Context, q pgx.Tx, t tenants.Tenant, m usage.Month, b billing) (Statement, error) {
	lines, err := usage.MonthLines(ctx, q, t.ID, m)
	if err != nil {
		return Statement{}, err
	}
	for i, l := range lines {
		if k, ok := b.keys[l.KeyID]; ok {
			lines[i].KeyPrefix, lines[i].KeyName = k.Prefix, k.Name
		}
	}
	used, err := usage.MonthHours(ctx, q, t.ID, m)
	if err != nil {
		return Statement{}, err
	}
	hours := make([]HourUnits, len(used))
	for i, h := range used {
		hours[i] = HourUnits(h)
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

// Statement returns the tenant's statement for m: the frozen one when m is
// closed (with any late usage in Late), otherwise computed from current
// usage with status "open". A tenant that was on no plan in m has a zero
// statement, open or closed alike. ENOTFOUND when there is no such
// tenant.
func (s *Store) Statement(ctx context.Context, tenantID string, m usage.Month) (Statement, error) {
	t, err := s.tenants.Get(ctx, tenantID)
	if err != nil {
		return Statement{}, err
	}
	closed, err := usage.ClosedAt(ctx, s.db, m)
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
func (s *Store) Statements(ctx context.Context, m usage.Month, progress Progress) ([]Statement, error) {
	closed, err := usage.ClosedAt(ctx, s.db, m)
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

// statementsOf computes the statement for m of every tenant of list that
// was on a plan before m ended, ordered by tenant name. A statement that
// cannot be priced (BuildStatement's EINVALID: amounts past int64, a
// history naming an unknown plan or mixing currencies in the month) does
// not stop the others being computed: the error names every such tenant
// and why, so that one pass shows all there is to fix. Only a complete
// set is returned: a month is closed for every tenant at once
// (usage_closed_months has no tenant), and a tenant left out of a closed
// month would read as owing nothing for it, for ever. Any other error
// (the database) ends it at once.
func statementsOf(ctx context.Context, tx pgx.Tx, list []tenants.Tenant, m usage.Month, b billing, progress Progress) ([]Statement, error) {
	var todo []tenants.Tenant
	for _, t := range list {
		if b.billable(t, m) {
			todo = append(todo, t)
		}
	}
	out := make([]Statement, 0, len(todo))
	var failed []string
	progress.report(0, len(todo))
	for i, t := range todo {
		st, err := computeStatement(ctx, tx, t, m, b)
		switch {
		case err != nil && tollgate.ErrorCode(err) == tollgate.EINTERNAL:
			return nil, fmt.Errorf("usage: statement of %s: %w", t.Name, err)
		case err != nil:
			failed = append(failed, t.Name+": "+tollgate.ErrorMessage(err))
		default:
			out = append(out, st)
		}
		progress.report(i+1, len(todo))
	}
	if len(failed) > 0 {
		sort.Strings(failed)
		n := len(failed)
		if n > maxNamedFailures {
			failed = append(failed[:maxNamedFailures], fmt.Sprintf("and %d more", n-maxNamedFailures))
		}
		return nil, tollgate.Errorf(tollgate.EINVALID, "the statements of %d of %d tenants for %s cannot be computed: %s",
			n, len(todo), m, strings.Join(failed, "; "))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TenantName < out[j].TenantName })
	return out, nil
}

// maxNamedFailures bounds the tenants statementsOf's error names, so that
// a plan that breaks every statement does not make a message of megabytes.
const maxNamedFailures = 20

// notClosed says of err, which kept month m from being closed, that
// nothing was: the close is one transaction, for every tenant or none.
func notClosed(m usage.Month, err error) error {
	var e *tollgate.Error
	if !errors.As(err, &e) || e.Code == tollgate.EINTERNAL {
		return err
	}
	return &tollgate.Error{Code: e.Code, Fields: e.Fields,
		Message: "month " + m.String() + " is not closed, for any tenant: " + e.Message}
}

// frozen reads the stored statements of closed month m (one tenant's, or
// all when tenantID is ""), with late usage summed in Late and late
// credits in LateCredits, in one snapshot.
func (s *Store) frozen(ctx context.Context, m usage.Month, tenantID string) ([]Statement, error) {
	var list []Statement
	err := postgres.ReadTx(ctx, s.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT body FROM statements
			WHERE month = $1 AND ($2 = '' OR tenant_id::text = $2)
			ORDER BY body->>'tenant_name'`, m.Start(), tenantID)
		list, err = postgres.Collect(rows, err, func(r pgx.Row) (Statement, error) {
			var body []byte
			if err := r.Scan(&body); err != nil {
				return Statement{}, err
			}
			var st Statement
			err := json.Unmarshal(body, &st)
			return st, err
		}, "usage: read statements")
		if err != nil || len(list) == 0 {
			return err
		}
		late, err := usage.LateByTenant(ctx, tx, m, tenantID)
		if err != nil {
			return err
		}
		lateCredits, err := credits.LateByTenant(ctx, tx, m.Start(), tenantID)
		if err != nil {
			return err
		}
		for i := range list {
			if c, ok := late[list[i].TenantID]; ok {
				list[i].Late = &c
			}
			if c, ok := lateCredits[list[i].TenantID]; ok {
				list[i].LateCredits = &c
			}
		}
		return attachInvoices(ctx, tx, m, list)
	})
	return list, err
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

// attachInvoices fills the invoice of each of list, m's closed
// statements that has one.
func attachInvoices(ctx context.Context, tx pgx.Tx, m usage.Month, list []Statement) error {
	rows, err := tx.Query(ctx, `SELECT tenant_id::text, push_state, payment_status, coalesce(provider_invoice_id, '')
		FROM invoices WHERE month = $1`, m.Start())
	if err != nil {
		return fmt.Errorf("billing: statements' invoices: %w", err)
	}
	byTenant := map[string]*StatementInvoice{}
	var tenantID string
	var si StatementInvoice
	_, err = pgx.ForEachRow(rows, []any{&tenantID, &si.PushState, &si.PaymentStatus, &si.ProviderInvoiceID}, func() error {
		v := si
		byTenant[tenantID] = &v
		return nil
	})
	if err != nil {
		return fmt.Errorf("billing: statements' invoices: %w", err)
	}
	for i := range list {
		list[i].Invoice = byTenant[list[i].TenantID]
	}
	return nil
}
