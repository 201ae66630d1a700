package quota

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/statekey"
)

// counterPage is how many tenants SweepCounters looks at with one
// Postgres query and one read of the limiter store (a variable for
// tests).
var counterPage = 500

// SweepCounters records the threshold crossings that tenants' monthly
// quota counters show and nothing recorded: a crossing whose check's
// usage batch was lost (its api process killed before it published)
// has lost its units to the rollups too, so Reconcile alone would find
// it only once later usage brings the rollups to the threshold.
//
// It looks at every tenant whose plan keeps a monthly quota counter
// (quota_mode hard or overage) and that has a threshold with no crossing
// this month, counterPage (500) tenants at a time: it reads their counters from
// windows (the keys statekey.TenantMonthKey lays out under prefix) and,
// for those whose counter is of the current month (at now) and at or
// past such a threshold, reconciles them in one transaction with the
// greater of the rollups' count and the counter's (source counter for
// what only the counter reached). The counter is trusted as the units
// admitted this month; one of an earlier month is ignored. Each crossing
// is recorded once however many workers sweep, and whether the check's
// batch or the sweep gets there first (quota_crossings' key).
//
// A pass over every tenant may take several calls: each starts after the
// tenant ID from ("" for the first) and looks at pages until budget has
// gone by (at least one page), so that a worker's sweep stays short
// however many tenants there are; next is where the next call goes on,
// "" when the pass is done.
//
// It reads the limiter store outside any transaction and returns its
// first error, having recorded what the pages before it found (next is
// then from, so that the next call tries those tenants again).
func SweepCounters(ctx context.Context, db postgres.Conn, windows limiter.WindowReader, prefix string, now time.Time,
	from string, budget time.Duration) (next string, err error) {
	month := monthOf(now)
	after := from
	if after == "" {
		after = "00000000-0000-0000-0000-000000000000"
	}
	started := time.Now()
	for {
		page, last, err := counterCandidates(ctx, db, after, month)
		if err != nil {
			return from, err
		}
		if len(page) > 0 {
			if err := reconcileCounters(ctx, db, windows, prefix, page, now); err != nil {
				return from, err
			}
		}
		if last == "" || time.Since(started) >= budget {
			return last, nil
		}
		after = last
	}
}

// counterCandidate is a tenant whose counter may show a crossing: below
// is its lowest threshold (units) with no crossing this month.
type counterCandidate struct {
	tenantID string
	below    int64
}

// counterCandidates returns, of the counterPage tenants after the tenant
// ID after (in ID order) that have thresholds and a plan with a monthly
// quota counter, those with a threshold that has no crossing in month;
// last is the page's last tenant ID, "" when the page was the last.
func counterCandidates(ctx context.Context, db postgres.Conn, after string, month time.Time) (page []counterCandidate, last string, err error) {
	rows, err := db.Query(ctx, `SELECT t.id::text, p.included_units, coalesce(ts.thresholds, ps.thresholds),
			coalesce((SELECT array_agg(c.units) FROM quota_crossings c WHERE c.tenant_id = t.id
				AND c.month = $2 AND c.kind = 'threshold'), '{}')
		FROM tenants t JOIN plans p ON p.id = t.plan_id
		LEFT JOIN quota_plan_settings ps ON ps.plan_id = t.plan_id
		LEFT JOIN quota_tenant_settings ts ON ts.tenant_id = t.id
		WHERE t.id > $1::uuid AND p.quota_mode IN ($3, $4)
			AND coalesce(ts.thresholds, ps.thresholds, '[]'::jsonb) <> '[]'::jsonb
		ORDER BY t.id LIMIT $5`, after, month, plans.QuotaHard, plans.QuotaOverage, counterPage)
	if err != nil {
		return nil, "", fmt.Errorf("quota: sweep counters: %w", err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id string
		var included int64
		var raw []byte
		var crossed []int64
		if err := rows.Scan(&id, &included, &raw, &crossed); err != nil {
			return nil, "", fmt.Errorf("quota: sweep counters: %w", err)
		}
		n, last = n+1, id
		var ts []Threshold
		if err := json.Unmarshal(raw, &ts); err != nil {
			return nil, "", fmt.Errorf("quota: sweep counters: thresholds of tenant %s: %w", id, err)
		}
		for _, units := range Points(ts, included) {
			if !slices.Contains(crossed, units) {
				page = append(page, counterCandidate{tenantID: id, below: units})
				break
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("quota: sweep counters: %w", err)
	}
	if n < counterPage {
		last = ""
	}
	return page, last, nil
}

// reconcileCounters reads the counters of page's tenants and reconciles,
// in one transaction, those whose counter of the current month reached
// their lowest threshold without a crossing.
func reconcileCounters(ctx context.Context, db postgres.Conn, windows limiter.WindowReader, prefix string,
	page []counterCandidate, now time.Time) error {
	keys := make([]string, len(page))
	for i, c := range page {
		keys[i] = statekey.TenantMonthKey(prefix, c.tenantID, plans.QuotaRuleName)
	}
	read, err := windows.ReadWindows(ctx, keys)
	if err != nil {
		return fmt.Errorf("quota: sweep counters: %w", err)
	}
	if len(read) != len(keys) {
		return fmt.Errorf("quota: sweep counters: %d counters read for %d keys", len(read), len(keys))
	}
	startUS := monthOf(now).UnixMicro()
	var tenantIDs []string
	counters := map[string]int64{}
	for i, c := range page {
		w := read[i]
		if !w.Present || w.StartUS != startUS || w.Count < c.below {
			continue
		}
		tenantIDs = append(tenantIDs, c.tenantID)
		counters[c.tenantID] = w.Count
	}
	if len(tenantIDs) == 0 {
		return nil
	}
	return postgres.Tx(ctx, db, func(tx pgx.Tx) error {
		return reconcile(ctx, tx, tenantIDs, counters, monthOf(now), now)
	})
}
