package usage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/postgres"
)

// The operator-wide views of the web console's overview: every tenant's
// and anonymous caller's decisions together, what denies most, and how far
// behind the pipeline is. Each reads the coarsest table that answers its
// range exactly (see Range.coarsest).

// Overall returns the counts of every decision in r (widened to whole
// minutes), of all tenants and anonymous callers, from the totals by
// minute or, for whole hours, by hour.
func (s *Reader) Overall(ctx context.Context, r Range) (metering.Counts, error) {
	var c metering.Counts
	g, r := r.coarsest()
	if err := s.checkRange(g, r); err != nil {
		return c, err
	}
	table := "usage_total_hour"
	if g == GranularityMinute {
		table = "usage_total_minute"
	}
	err := s.db.QueryRow(ctx, `SELECT coalesce(sum(allowed), 0), coalesce(sum(denied), 0),
			coalesce(sum(allowed_units), 0), coalesce(sum(denied_units), 0)
		FROM `+table+` WHERE bucket_start >= $1 AND bucket_start < $2`, r.From, r.To).
		Scan(&c.Allowed, &c.Denied, &c.AllowedUnits, &c.DeniedUnits)
	if err != nil {
		return c, fmt.Errorf("usage: overall: %w", err)
	}
	return c, nil
}

// OverallSeries returns every decision's counts per bucket of g over r
// (widened to whole buckets), zeros included, like Series for all
// tenants together: from the totals by minute, or by hour for hours,
// days and months.
func (s *Reader) OverallSeries(ctx context.Context, g Granularity, r Range) ([]Point, error) {
	points, from, to, err := s.buckets(g, r)
	if err != nil {
		return nil, err
	}
	table, unit := "usage_total_hour", string(g)
	if g == GranularityMinute {
		table = "usage_total_minute"
	}
	// unit is a granularity's name: minute, hour, day or month.
	rows, err := s.db.Query(ctx, `SELECT date_trunc('`+unit+`', bucket_start AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
			sum(allowed), sum(denied), sum(allowed_units), sum(denied_units)
		FROM `+table+` WHERE bucket_start >= $1 AND bucket_start < $2 GROUP BY 1 ORDER BY 1`, from, to)
	if err != nil {
		return nil, fmt.Errorf("usage: overall series: %w", err)
	}
	if err := fillPoints(rows, points); err != nil {
		return nil, fmt.Errorf("usage: overall series: %w", err)
	}
	return points, nil
}

// DeniedKey is a key's denials.
type DeniedKey struct {
	TenantID string `json:"tenant_id"`
	KeyID    string `json:"key_id"`
	Denied   int64  `json:"denied"`
	Allowed  int64  `json:"allowed"`
}

// TopDeniedKeys returns the keys with the most denied decisions in r, of
// every tenant, at most limit.
func (s *Reader) TopDeniedKeys(ctx context.Context, r Range, limit int) ([]DeniedKey, error) {
	return topRows(ctx, s, r, "top denied keys", func(table string, r Range) (string, []any) {
		return `SELECT tenant_id::text, key_id::text, sum(denied), sum(allowed)
		FROM ` + table + ` WHERE bucket_start >= $1 AND bucket_start < $2 AND key_id <> $3
		GROUP BY tenant_id, key_id HAVING sum(denied) > 0 ORDER BY 3 DESC, 2 LIMIT $4`, []any{r.From, r.To, nilUUID, limit}
	}, func(row pgx.Row) (k DeniedKey, err error) {
		err = row.Scan(&k.TenantID, &k.KeyID, &k.Denied, &k.Allowed)
		return k, err
	})
}

// RuleDenials counts the denials of the rules named Rule (comma-separated
// when several denied together); Rule "" counts decisions denied before
// any rule ran (unknown or revoked keys, suspended tenants…).
type RuleDenials struct {
	Rule   string `json:"rule"`
	Denied int64  `json:"denied"`
}

// TopDenyingRules returns the rules that denied most in r, of every plan,
// at most limit.
func (s *Reader) TopDenyingRules(ctx context.Context, r Range, limit int) ([]RuleDenials, error) {
	return topRows(ctx, s, r, "top denying rules", func(table string, r Range) (string, []any) {
		return `SELECT denied_by, sum(denied) FROM ` + table + `
		WHERE bucket_start >= $1 AND bucket_start < $2 AND denied > 0
		GROUP BY denied_by ORDER BY 2 DESC, 1 LIMIT $3`, []any{r.From, r.To, limit}
	}, func(row pgx.Row) (d RuleDenials, err error) {
		err = row.Scan(&d.Rule, &d.Denied)
		return d, err
	})
}

// topRows runs the query that sql builds over the coarsest table that
// covers r (with r widened to that table's buckets) and returns its rows,
// each read by scan. A range the tables cannot answer is the empty list
// and checkRange's error; what names the query in errors.
func topRows[T any](ctx context.Context, s *Reader, r Range, what string,
	sql func(table string, r Range) (string, []any), scan func(pgx.Row) (T, error)) ([]T, error) {
	g, r := r.coarsest()
	if err := s.checkRange(g, r); err != nil {
		return []T{}, err
	}
	query, args := sql(granularityTable[g], r)
	rows, err := s.db.Query(ctx, query, args...)
	return postgres.Collect(rows, err, scan, "usage: "+what)
}

// LastApplied returns when the latest batch was applied; zero when none
// was (or none within the batch IDs' retention).
func (s *Reader) LastApplied(ctx context.Context) (time.Time, error) {
	var at *time.Time
	if err := s.db.QueryRow(ctx, `SELECT max(applied_at) FROM usage_batches`).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("usage: last applied: %w", err)
	}
	if at == nil {
		return time.Time{}, nil
	}
	return *at, nil
}

// KeyRef names a key with its tenant (usage rows are keyed by both).
type KeyRef struct {
	TenantID, KeyID string
}

// KeyActivity is a key's recent use.
type KeyActivity struct {
	// Hours holds the key's decisions in each of the last 24 hours,
	// oldest first (the last is the current hour so far).
	Hours [24]int64
	// RateLimited is true when a check with the key was denied by a rule
	// (reason rate_limited) in the last hour.
	RateLimited bool
}

// KeysActivity returns the recent use of the keys at now, by key ID. Keys
// without any are absent.
func (s *Reader) KeysActivity(ctx context.Context, keys []KeyRef, now time.Time) (map[string]*KeyActivity, error) {
	out := map[string]*KeyActivity{}
	var tenantIDs, keyIDs []string
	seen := map[string]bool{}
	for _, k := range keys {
		if !postgres.IsUUID(k.TenantID) || !postgres.IsUUID(k.KeyID) {
			continue
		}
		keyIDs = append(keyIDs, k.KeyID)
		if !seen[k.TenantID] {
			seen[k.TenantID] = true
			tenantIDs = append(tenantIDs, k.TenantID)
		}
	}
	if len(keyIDs) == 0 {
		return out, nil
	}
	first := GranularityHour.floor(now).Add(-23 * time.Hour)
	err := postgres.ReadTx(ctx, s.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT key_id::text, bucket_start, sum(allowed + denied) FROM usage_hour
			WHERE tenant_id = ANY($1::uuid[]) AND bucket_start >= $2 AND key_id = ANY($3::uuid[])
			GROUP BY key_id, bucket_start`, tenantIDs, first, keyIDs)
		if err != nil {
			return err
		}
		var id string
		var at time.Time
		var n int64
		_, err = pgx.ForEachRow(rows, []any{&id, &at, &n}, func() error {
			i := int(at.Sub(first) / time.Hour)
			if i < 0 || i >= 24 {
				return nil
			}
			a := out[id]
			if a == nil {
				a = &KeyActivity{}
				out[id] = a
			}
			a.Hours[i] += n
			return nil
		})
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT DISTINCT key_id::text FROM usage_minute
			WHERE tenant_id = ANY($1::uuid[]) AND bucket_start >= $2 AND key_id = ANY($3::uuid[])
			AND reason = 'rate_limited' AND denied > 0`, tenantIDs, now.Add(-time.Hour).Truncate(time.Minute), keyIDs)
		if err != nil {
			return err
		}
		_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
			a := out[id]
			if a == nil {
				a = &KeyActivity{}
				out[id] = a
			}
			a.RateLimited = true
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("usage: keys' activity: %w", err)
	}
	return out, nil
}

// MonthCounts are a tenant's counts in one month.
type MonthCounts struct {
	Month Month
	metering.Counts
}

// TenantMonths returns the months in which the tenant has usage, newest
// first.
func (s *Reader) TenantMonths(ctx context.Context, tenantID string) ([]MonthCounts, error) {
	out := []MonthCounts{}
	if !postgres.IsUUID(tenantID) {
		return out, nil
	}
	rows, err := s.db.Query(ctx, `SELECT bucket_start, sum(allowed), sum(denied), sum(allowed_units), sum(denied_units)
		FROM usage_month WHERE tenant_id = $1 GROUP BY bucket_start ORDER BY bucket_start DESC`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("usage: tenant months: %w", err)
	}
	var at time.Time
	err = forEachCounts(rows, []any{&at}, func(c metering.Counts) {
		out = append(out, MonthCounts{Month: MonthOf(at), Counts: c})
	})
	if err != nil {
		return nil, fmt.Errorf("usage: tenant months: %w", err)
	}
	return out, nil
}

// MonthTenants returns the tenants with the most allowed units in m, at
// most limit, and how many tenants had usage in m.
func (s *Reader) MonthTenants(ctx context.Context, m Month, limit int) (top []TenantTotal, tenants int64, err error) {
	top = []TenantTotal{}
	err = postgres.ReadTx(ctx, s.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT tenant_id::text, sum(allowed), sum(denied), sum(allowed_units), sum(denied_units)
			FROM usage_month WHERE bucket_start = $1 AND tenant_id <> $2
			GROUP BY tenant_id ORDER BY 4 DESC, 1 LIMIT $3`, m.Start(), nilUUID, limit)
		if err != nil {
			return err
		}
		var id string
		err = forEachCounts(rows, []any{&id}, func(c metering.Counts) {
			top = append(top, TenantTotal{TenantID: id, Counts: c})
		})
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(DISTINCT tenant_id) FROM usage_month WHERE bucket_start = $1 AND tenant_id <> $2`,
			m.Start(), nilUUID).Scan(&tenants)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("usage: month's tenants: %w", err)
	}
	return top, tenants, nil
}

// ClosedAt returns when m was closed, or nil while it is open.
func (s *Reader) ClosedAt(ctx context.Context, m Month) (*time.Time, error) {
	return ClosedAt(ctx, s.db, m)
}

// ClosedAt returns when m was closed, or nil while it is open, read
// through q (a pool, or the transaction of a close).
func ClosedAt(ctx context.Context, q postgres.Conn, m Month) (*time.Time, error) {
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

// TopTenants returns the tenants with the most allowed units in r (then
// the most decisions), at most limit. Names are the caller's to look up.
func (s *Reader) TopTenants(ctx context.Context, r Range, limit int) ([]TenantTotal, error) {
	out := []TenantTotal{}
	g, r := r.coarsest()
	if err := s.checkRange(g, r); err != nil {
		return out, err
	}
	rows, err := s.db.Query(ctx, `SELECT tenant_id::text, sum(allowed), sum(denied), sum(allowed_units), sum(denied_units)
		FROM `+granularityTable[g]+` WHERE bucket_start >= $1 AND bucket_start < $2 AND tenant_id <> $3
		GROUP BY tenant_id ORDER BY 4 DESC, 2 + 3 DESC, 1 LIMIT $4`, r.From, r.To, nilUUID, limit)
	if err != nil {
		return nil, fmt.Errorf("usage: top tenants: %w", err)
	}
	var id string
	err = forEachCounts(rows, []any{&id}, func(c metering.Counts) {
		out = append(out, TenantTotal{TenantID: id, Counts: c})
	})
	if err != nil {
		return nil, fmt.Errorf("usage: top tenants: %w", err)
	}
	return out, nil
}
