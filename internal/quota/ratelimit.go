package quota

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/plans"
)

// Event types of sustained rate limiting.
const (
	EventRateLimitSustained = "ratelimit.sustained"
	EventRateLimitResolved  = "ratelimit.resolved"
)

// NoKey is the key_id of a tenant's checks made without a key.
const NoKey = "00000000-0000-0000-0000-000000000000"

// RateAlert says when a key is being rate limited for long enough to
// tell: more than Denials checks denied by rate rules (not the monthly
// quota) within the last Window, counted in whole minutes of usage. The
// alert resolves once the same window holds at most half as many.
type RateAlert struct {
	Denials int64
	Window  time.Duration
}

// Defaults of RateAlert (TOLLGATE_RATELIMIT_ALERT_DENIALS and _WINDOW).
const (
	DefaultRateAlertDenials = 100
	DefaultRateAlertWindow  = 5 * time.Minute
)

// WithDefaults returns c with its zero values replaced by the defaults.
func (c RateAlert) WithDefaults() RateAlert {
	if c.Denials <= 0 {
		c.Denials = DefaultRateAlertDenials
	}
	if c.Window < time.Minute {
		c.Window = DefaultRateAlertWindow
	}
	return c
}

// RateSubject is a key (KeyID NoKey: a tenant's checks without one) some
// of whose checks rate rules denied.
type RateSubject struct {
	TenantID, KeyID string
}

// IsRateDenial reports whether a usage row's reason and denied_by count
// as a denial by rate rules: rate_limited by at least one rule that is
// not the monthly quota.
func IsRateDenial(reason, deniedBy string) bool {
	if reason != tollgate.ReasonRateLimited {
		return false
	}
	for r := range strings.SplitSeq(deniedBy, ",") {
		if r != "" && r != plans.QuotaRuleName {
			return true
		}
	}
	return false
}

// windowStart is the first minute bucket of the window ending at now.
func (c RateAlert) windowStart(now time.Time) time.Time {
	return now.UTC().Truncate(time.Minute).Add(time.Minute - c.Window)
}

// rateDenials returns the denials by rate rules of each subject in the
// window ending at now, from the minute rows (those of the transaction
// included).
func rateDenials(ctx context.Context, tx pgx.Tx, subjects []RateSubject, from time.Time) (map[RateSubject]int64, error) {
	tenantIDs, keyIDs := make([]string, len(subjects)), make([]string, len(subjects))
	for i, s := range subjects {
		tenantIDs[i], keyIDs[i] = s.TenantID, s.KeyID
	}
	rows, err := tx.Query(ctx, `SELECT u.tenant_id::text, u.key_id::text, sum(u.denied)::bigint
		FROM usage_minute u JOIN unnest($1::uuid[], $2::uuid[]) AS s(t, k) ON u.tenant_id = s.t AND u.key_id = s.k
		WHERE u.bucket_start >= $3 AND u.reason = $4
			AND EXISTS (SELECT 1 FROM unnest(string_to_array(u.denied_by, ',')) r WHERE r <> $5)
		GROUP BY 1, 2`, tenantIDs, keyIDs, from, tollgate.ReasonRateLimited, plans.QuotaRuleName)
	if err != nil {
		return nil, fmt.Errorf("quota: rate denials: %w", err)
	}
	out := map[RateSubject]int64{}
	for rows.Next() {
		var s RateSubject
		var n int64
		if err := rows.Scan(&s.TenantID, &s.KeyID, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("quota: rate denials: %w", err)
		}
		out[s] = n
	}
	return out, rows.Err()
}

// rateEventData is the payload both rate limiting events share.
func rateEventData(s RateSubject, c RateAlert, denials int64, startedAt, now time.Time) map[string]any {
	var key any
	if s.KeyID != NoKey {
		key = s.KeyID
	}
	return map[string]any{"key_id": key, "denials": denials, "threshold_denials": c.Denials,
		"window_seconds": int64(c.Window / time.Second), "started_at": startedAt.UTC().Format(time.RFC3339Nano),
		"at": now.UTC().Format(time.RFC3339Nano)}
}

// RecordRateDenials opens an alert, with ratelimit.sustained, for each of
// subjects (whose checks rate rules denied in the batches being applied,
// in tx) denied more than c.Denials times in the window ending at now and
// without an open alert; then resolves the open alerts that no longer
// hold (SweepRateAlerts). Each alert opens and resolves once, however
// many workers apply at once: one open alert per key is all the table
// allows.
func RecordRateDenials(ctx context.Context, tx pgx.Tx, subjects []RateSubject, c RateAlert, now time.Time) error {
	c = c.WithDefaults()
	if len(subjects) > 0 {
		subjects = slices.Clone(subjects)
		slices.SortFunc(subjects, func(a, b RateSubject) int {
			return cmp.Or(strings.Compare(a.TenantID, b.TenantID), strings.Compare(a.KeyID, b.KeyID))
		})
		subjects = slices.Compact(subjects)
		counts, err := rateDenials(ctx, tx, subjects, c.windowStart(now))
		if err != nil {
			return err
		}
		for _, s := range subjects {
			n := counts[s]
			if n <= c.Denials {
				continue
			}
			tag, err := tx.Exec(ctx, `INSERT INTO ratelimit_alerts (tenant_id, key_id, started_at, denials)
				SELECT id, $2::uuid, $3, $4 FROM tenants WHERE id = $1::uuid
				ON CONFLICT (tenant_id, key_id) WHERE resolved_at IS NULL DO NOTHING`, s.TenantID, s.KeyID, now, n)
			if err != nil {
				return fmt.Errorf("quota: rate alert of key %s: %w", s.KeyID, err)
			}
			if tag.RowsAffected() == 1 {
				if err := emit(ctx, tx, EventRateLimitSustained, s.TenantID, rateEventData(s, c, n, now, now)); err != nil {
					return err
				}
			}
		}
	}
	return SweepRateAlerts(ctx, tx, c, now)
}

// SweepRateAlerts resolves, with ratelimit.resolved, each open alert
// whose key was denied by rate rules at most c.Denials/2 times in the
// window ending at now (the hysteresis that keeps a key hovering at the
// threshold from flapping). The usage worker calls it with each batch it
// applies and every half minute while idle.
func SweepRateAlerts(ctx context.Context, tx pgx.Tx, c RateAlert, now time.Time) error {
	c = c.WithDefaults()
	rows, err := tx.Query(ctx, `SELECT tenant_id::text, key_id::text, started_at FROM ratelimit_alerts
		WHERE resolved_at IS NULL ORDER BY tenant_id, key_id`)
	if err != nil {
		return fmt.Errorf("quota: open rate alerts: %w", err)
	}
	type open struct {
		s       RateSubject
		started time.Time
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (open, error) {
		var o open
		return o, r.Scan(&o.s.TenantID, &o.s.KeyID, &o.started)
	})
	if err != nil || len(list) == 0 {
		return err
	}
	subjects := make([]RateSubject, len(list))
	for i, o := range list {
		subjects[i] = o.s
	}
	counts, err := rateDenials(ctx, tx, subjects, c.windowStart(now))
	if err != nil {
		return err
	}
	for _, o := range list {
		n := counts[o.s]
		if n > c.Denials/2 {
			continue
		}
		tag, err := tx.Exec(ctx, `UPDATE ratelimit_alerts SET resolved_at = $3
			WHERE tenant_id = $1::uuid AND key_id = $2::uuid AND resolved_at IS NULL`, o.s.TenantID, o.s.KeyID, now)
		if err != nil {
			return fmt.Errorf("quota: resolve rate alert of key %s: %w", o.s.KeyID, err)
		}
		if tag.RowsAffected() == 1 {
			if err := emit(ctx, tx, EventRateLimitResolved, o.s.TenantID, rateEventData(o.s, c, n, o.started, now)); err != nil {
				return err
			}
		}
	}
	return nil
}
