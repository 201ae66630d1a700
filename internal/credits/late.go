package credits

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/usage"
)

// Late sums what the drainer recorded for a month after it was closed
// (credit_late): units drawn from balances (less those given back), past
// them (Overage, billed on the plan's overage pricing had they been on
// time), settled past the overdraft (Unpaid) and expired. None of it is
// in the frozen statements.
type Late struct {
	Drawn   int64 `json:"drawn"`
	Overage int64 `json:"overage"`
	Unpaid  int64 `json:"unpaid"`
	Expired int64 `json:"expired"`
}

// Add adds o to l.
func (l *Late) Add(o Late) {
	l.Drawn += o.Drawn
	l.Overage += o.Overage
	l.Unpaid += o.Unpaid
	l.Expired += o.Expired
}

func (l Late) zero() bool { return l == Late{} }

// lateLog lists in credit_late what a drain records for closed months.
// It reads each month's state once per transaction: the drain holds the
// close lock (usage.CloseLock) shared, so no month closes meanwhile.
type lateLog struct {
	q      postgres.Conn
	closed map[time.Time]bool
}

func (l *lateLog) isClosed(ctx context.Context, at time.Time) (bool, error) {
	m := usage.MonthOf(at)
	if c, ok := l.closed[m.Start()]; ok {
		return c, nil
	}
	when, err := usage.ClosedAt(ctx, l.q, m)
	if err != nil {
		return false, err
	}
	if l.closed == nil {
		l.closed = map[time.Time]bool{}
	}
	l.closed[m.Start()] = when != nil
	return when != nil, nil
}

// note lists n, dated at, when its month is closed (l nil: nothing is
// listed).
func (l *lateLog) note(ctx context.Context, tenantID string, entry *string, at time.Time, n Late) error {
	if l == nil || n.zero() {
		return nil
	}
	closed, err := l.isClosed(ctx, at)
	if err != nil || !closed {
		return err
	}
	_, err = l.q.Exec(ctx, `INSERT INTO credit_late (month, tenant_id, entry, at, drawn, overage, unpaid, expired)
		VALUES ($1, $2::uuid, $3, $4, $5, $6, $7, $8)`, usage.MonthStart(at), tenantID, entry, at,
		n.Drawn, n.Overage, n.Unpaid, n.Expired)
	if err != nil {
		return fmt.Errorf("credits: record late credits: %w", err)
	}
	return nil
}

// LateByTenant sums by tenant what was recorded for the month starting
// at start after it was closed (one tenant's, or every tenant's when
// tenantID is ""), read through q; tenants with nothing late are absent.
func LateByTenant(ctx context.Context, q postgres.Conn, start time.Time, tenantID string) (map[string]Late, error) {
	rows, err := q.Query(ctx, `SELECT tenant_id::text, sum(drawn), sum(overage), sum(unpaid), sum(expired)
		FROM credit_late WHERE month = $1 AND ($2 = '' OR tenant_id::text = $2) GROUP BY tenant_id`, start, tenantID)
	out := map[string]Late{}
	_, err = postgres.Collect(rows, err, func(r pgx.Row) (string, error) {
		var id string
		var l Late
		err := r.Scan(&id, &l.Drawn, &l.Overage, &l.Unpaid, &l.Expired)
		out[id] = l
		return id, err
	}, "credits: late credits")
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Behind returns, of the tenants with a credit account, those whose
// ledger may lack draws dated before end, read through q: their drainer
// had not recorded their whole log at a store time at or after end (in
// a deployment of several regions, some region's drainer had not). What
// it records later for a closed month is late.
func Behind(ctx context.Context, q postgres.Conn, end time.Time) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT a.tenant_id::text FROM credit_accounts a
		WHERE CASE WHEN EXISTS (SELECT 1 FROM credit_regions r WHERE r.tenant_id = a.tenant_id)
			THEN EXISTS (SELECT 1 FROM credit_regions r WHERE r.tenant_id = a.tenant_id AND r.through_us < $2)
			ELSE a.drained_through IS NULL OR a.drained_through < $1 END
		ORDER BY 1`, end, end.UnixMicro())
	return postgres.Collect(rows, err, func(r pgx.Row) (string, error) {
		var id string
		return id, r.Scan(&id)
	}, "credits: balances behind")
}
