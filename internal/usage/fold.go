package usage

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/metering"
)

// DefaultResourceCap is the default of StoreConfig.ResourceCap.
const DefaultResourceCap = 200

// resourceLock is the first key of the advisory locks, one per tenant and
// month, under which a batch decides which of its resources fold.
const resourceLock int32 = 7_274_003

// tenantMonth is one tenant's (NilUUID: the anonymous callers') month.
type tenantMonth struct {
	tenantID string
	month    time.Time
}

// folded names the resources of tenant months that a batch records as
// metering.OtherResource: they would take a tenant past its cap of
// distinct resources in the month.
type folded map[tenantMonth]map[string]bool

// resource returns what r is recorded under: its resource, or
// metering.OtherResource when that is folded.
func (f folded) resource(r metering.Row) string {
	if f[tenantMonth{orNil(r.TenantID), MonthStart(time.Unix(r.Minute, 0))}][r.Resource] {
		return metering.OtherResource
	}
	return r.Resource
}

// foldResources decides, in tx, which resources of rows fold into
// metering.OtherResource: a tenant month keeps at most limit distinct
// resources besides metering.OtherResource, those it already has first,
// then the rows' new ones in name order until the limit. It holds an
// advisory lock per tenant month until tx ends, taken in one order by
// every batch, so that concurrent batches decide one after the other and
// together never pass the limit.
func foldResources(ctx context.Context, tx pgx.Tx, limit int, rows []metering.Row) (folded, error) {
	candidates := map[tenantMonth]map[string]bool{}
	for _, r := range rows {
		if r.Resource == metering.OtherResource {
			continue
		}
		tm := tenantMonth{orNil(r.TenantID), MonthStart(time.Unix(r.Minute, 0))}
		if candidates[tm] == nil {
			candidates[tm] = map[string]bool{}
		}
		candidates[tm][r.Resource] = true
	}
	if len(candidates) == 0 {
		return nil, nil
	}
	if err := lockTenantMonths(ctx, tx, candidates); err != nil {
		return nil, err
	}
	have, err := monthResources(ctx, tx, candidates)
	if err != nil {
		return nil, err
	}
	fold := folded{}
	for tm, set := range candidates {
		named := have[tm]
		if named == nil {
			named = map[string]bool{}
		}
		for _, res := range sortedSet(set) {
			switch {
			case named[res]:
			case len(named) < limit:
				named[res] = true
			default:
				if fold[tm] == nil {
					fold[tm] = map[string]bool{}
				}
				fold[tm][res] = true
			}
		}
	}
	return fold, nil
}

// lockTenantMonths takes the advisory lock of each tenant month, in the
// order of their lock keys.
func lockTenantMonths(ctx context.Context, tx pgx.Tx, tms map[tenantMonth]map[string]bool) error {
	keys := make([]int32, 0, len(tms))
	for tm := range tms {
		h := fnv.New32a()
		h.Write([]byte(tm.tenantID + tm.month.Format("2006-01")))
		keys = append(keys, int32(h.Sum32()))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	// unnest yields the keys in the array's order: the locks are taken in it.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, k) FROM unnest($2::int4[]) k`, resourceLock, keys); err != nil {
		return fmt.Errorf("usage: apply: lock resources: %w", err)
	}
	return nil
}

// monthResources returns the resources, but metering.OtherResource, that
// the tenant months have recorded so far.
func monthResources(ctx context.Context, tx pgx.Tx, tms map[tenantMonth]map[string]bool) (map[tenantMonth]map[string]bool, error) {
	tenants, months := make([]string, 0, len(tms)), make([]time.Time, 0, len(tms))
	for tm := range tms {
		tenants, months = append(tenants, tm.tenantID), append(months, tm.month)
	}
	rows, err := tx.Query(ctx, `SELECT DISTINCT u.tenant_id::text, u.bucket_start, u.resource
		FROM unnest($1::uuid[], $2::timestamptz[]) AS x(t, m)
		JOIN usage_month u ON u.tenant_id = x.t AND u.bucket_start = x.m
		WHERE u.resource <> $3`, tenants, months, metering.OtherResource)
	if err != nil {
		return nil, fmt.Errorf("usage: apply: resources so far: %w", err)
	}
	defer rows.Close()
	have := map[tenantMonth]map[string]bool{}
	for rows.Next() {
		var tm tenantMonth
		var res string
		if err := rows.Scan(&tm.tenantID, &tm.month, &res); err != nil {
			return nil, fmt.Errorf("usage: apply: resources so far: %w", err)
		}
		tm.month = tm.month.UTC()
		if have[tm] == nil {
			have[tm] = map[string]bool{}
		}
		have[tm][res] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("usage: apply: resources so far: %w", err)
	}
	return have, nil
}

func sortedSet(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
