package usage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/postgres"
)

// A tenant's month as statements price it. These read through q, a pool
// or a transaction: billing reads them in the repeatable-read transaction
// of a statement, or in the transaction that closes a month.

// MonthLines returns the tenant's usage in m by key and resource, ordered
// by key and resource; KeyID is "" for decisions without a key, and the
// lines' key prefixes and names are left to the caller. ExpiredHoldUnits
// are the units charged for holds that expired unsettled.
func MonthLines(ctx context.Context, q postgres.Conn, tenantID string, m Month) ([]tollgate.UsageLine, error) {
	rows, err := q.Query(ctx, `SELECT key_id::text, resource, sum(allowed), sum(denied), sum(allowed_units),
			sum(denied_units), sum(expired_holds),
			coalesce(sum(allowed_units) FILTER (WHERE reason = '`+tollgate.ReasonHoldExpired+`'), 0)
		FROM usage_month WHERE tenant_id = $1 AND bucket_start = $2
		GROUP BY key_id, resource ORDER BY key_id, resource`, tenantID, m.Start())
	return postgres.Collect(rows, err, func(r pgx.Row) (tollgate.UsageLine, error) {
		var l tollgate.UsageLine
		err := r.Scan(&l.KeyID, &l.Resource, &l.Allowed, &l.Denied, &l.AllowedUnits, &l.DeniedUnits,
			&l.ExpiredHolds, &l.ExpiredHoldUnits)
		if l.KeyID == nilUUID {
			l.KeyID = ""
		}
		return l, err
	}, "usage: statement usage")
}

// HourUnits are the allowed units of one hour.
type HourUnits struct {
	Start        time.Time
	AllowedUnits int64
}

// MonthHours returns the hours of m in which the tenant was allowed
// units, in time order.
func MonthHours(ctx context.Context, q postgres.Conn, tenantID string, m Month) ([]HourUnits, error) {
	rows, err := q.Query(ctx, `SELECT bucket_start, sum(allowed_units) FROM usage_hour
		WHERE tenant_id = $1 AND bucket_start >= $2 AND bucket_start < $3
		GROUP BY bucket_start HAVING sum(allowed_units) > 0 ORDER BY bucket_start`, tenantID, m.Start(), m.End())
	return postgres.Collect(rows, err, func(r pgx.Row) (HourUnits, error) {
		var h HourUnits
		err := r.Scan(&h.Start, &h.AllowedUnits)
		return h, err
	}, "usage: statement hours")
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
func (s *Reader) Late(ctx context.Context, m Month, tenantID string) ([]LateRow, error) {
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

// LateByTenant sums the usage that arrived after m was closed by tenant
// (one tenant's, or every tenant's when tenantID is ""); tenants without
// late usage are absent.
func LateByTenant(ctx context.Context, q postgres.Conn, m Month, tenantID string) (map[string]metering.Counts, error) {
	out := map[string]metering.Counts{}
	rows, err := q.Query(ctx, `SELECT tenant_id::text, sum(allowed), sum(denied), sum(allowed_units), sum(denied_units)
		FROM usage_late WHERE month = $1 AND ($2 = '' OR tenant_id::text = $2) GROUP BY tenant_id`, m.Start(), tenantID)
	if err != nil {
		return nil, fmt.Errorf("usage: late usage: %w", err)
	}
	var id string
	err = forEachCounts(rows, []any{&id}, func(c metering.Counts) { out[id] = c })
	if err != nil {
		return nil, fmt.Errorf("usage: late usage: %w", err)
	}
	return out, nil
}
