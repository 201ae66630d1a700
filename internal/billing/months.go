package billing

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/usage"
)

// MonthUsage is a tenant's usage in one month, and its statement's state.
type MonthUsage struct {
	Month usage.Month
	metering.Counts
	// ClosedAt is when the month was closed; nil while it is open.
	ClosedAt *time.Time
	// TotalMinor and Currency are the frozen statement's, once closed.
	TotalMinor int64
	Currency   string
}

// TenantMonths returns the months in which the tenant has usage or a
// closed statement, newest first.
func (s *Store) TenantMonths(ctx context.Context, tenantID string) ([]MonthUsage, error) {
	out := []MonthUsage{}
	if !postgres.IsUUID(tenantID) {
		return out, nil
	}
	used, err := s.usage.TenantMonths(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	byMonth := map[time.Time]int{}
	for _, m := range used {
		byMonth[m.Month.Start()] = len(out)
		out = append(out, MonthUsage{Month: m.Month, Counts: m.Counts})
	}
	rows, err := s.db.Query(ctx, `SELECT month::timestamp AT TIME ZONE 'UTC', closed_at, total_minor, currency
		FROM statements WHERE tenant_id = $1`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("usage: tenant months: %w", err)
	}
	var month, closed time.Time
	var total int64
	var currency string
	_, err = pgx.ForEachRow(rows, []any{&month, &closed, &total, &currency}, func() error {
		m := usage.MonthOf(month)
		i, ok := byMonth[m.Start()]
		if !ok {
			i = len(out)
			byMonth[m.Start()] = i
			out = append(out, MonthUsage{Month: m})
		}
		at := closed
		out[i].ClosedAt, out[i].TotalMinor, out[i].Currency = &at, total, currency
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("usage: tenant months: %w", err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Month.Start().After(out[j].Month.Start()) })
	return out, nil
}
