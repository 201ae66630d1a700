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

// Scopes of a rate limiting alert: the payload's scope.
const (
	// RateScopeKey is one key's alert (KeyID NoKey: the tenant's checks
	// without a key).
	RateScopeKey = "key"
	// RateScopeTenant is the tenant's alert: the denials of all its keys
	// and of its checks without a key, together.
	RateScopeTenant = "tenant"
)

// RateAlert says when rate limiting has gone on for long enough to tell:
// more than Denials checks of one key, or more than TenantDenials checks
// of one tenant (all its keys and its checks without a key together),
// denied by rate rules (not the monthly quota) within the last Window,
// counted in whole minutes of usage. Each alert resolves once the same
// window holds at most half its own threshold. A key's and its tenant's
// alerts open and resolve independently.
type RateAlert struct {
	Denials       int64
	TenantDenials int64
	Window        time.Duration
}

// Defaults of RateAlert (TOLLGATE_RATELIMIT_ALERT_DENIALS,
// TOLLGATE_RATELIMIT_TENANT_ALERT_DENIALS and
// TOLLGATE_RATELIMIT_ALERT_WINDOW).
const (
	DefaultRateAlertDenials       = 100
	DefaultTenantRateAlertDenials = 1000
	DefaultRateAlertWindow        = 5 * time.Minute
)

// WithDefaults returns c with its zero values replaced by the defaults.
func (c RateAlert) WithDefaults() RateAlert {
	if c.Denials <= 0 {
		c.Denials = DefaultRateAlertDenials
	}
	if c.TenantDenials <= 0 {
		c.TenantDenials = DefaultTenantRateAlertDenials
	}
	if c.Window < time.Minute {
		c.Window = DefaultRateAlertWindow
	}
	return c
}

// threshold is the number of denials in the window above which an alert
// of scope opens.
func (c RateAlert) threshold(scope string) int64 {
	if scope == RateScopeTenant {
		return c.TenantDenials
	}
	return c.Denials
}

// RateSubject is a key (KeyID NoKey: a tenant's checks without one) some
// of whose checks rate rules denied.
type RateSubject struct {
	TenantID, KeyID string
}

// rateTarget is what an alert is about: a key of a tenant (scope key), or
// the tenant as a whole (scope tenant, KeyID NoKey).
type rateTarget struct {
	TenantID, Scope, KeyID string
}

func compareTargets(a, b rateTarget) int {
	return cmp.Or(strings.Compare(a.TenantID, b.TenantID), strings.Compare(a.Scope, b.Scope), strings.Compare(a.KeyID, b.KeyID))
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

// rateDenials returns the denials by rate rules of each target in the
// window beginning at from, from the minute rows (those of the
// transaction included): a key's own, or all of a tenant's.
func rateDenials(ctx context.Context, tx pgx.Tx, targets []rateTarget, from time.Time) (map[rateTarget]int64, error) {
	var tenantIDs, keyTenantIDs, keyIDs []string
	for _, s := range targets {
		if s.Scope == RateScopeTenant {
			tenantIDs = append(tenantIDs, s.TenantID)
		} else {
			keyTenantIDs, keyIDs = append(keyTenantIDs, s.TenantID), append(keyIDs, s.KeyID)
		}
	}
	const rateRows = `u.bucket_start >= $3 AND u.reason = $4
			AND EXISTS (SELECT 1 FROM unnest(string_to_array(u.denied_by, ',')) r WHERE r <> $5)`
	// One query for both scopes: the keys' rows, and the tenants' rows
	// summed over every key (the minute rows' primary key begins with
	// tenant_id and bucket_start, so either reads an index range).
	rows, err := tx.Query(ctx, `SELECT u.tenant_id::text, 'key', u.key_id::text, sum(u.denied)::bigint
		FROM usage_minute u JOIN unnest($1::uuid[], $2::uuid[]) AS s(t, k) ON u.tenant_id = s.t AND u.key_id = s.k
		WHERE `+rateRows+`
		GROUP BY 1, 3
		UNION ALL
		SELECT u.tenant_id::text, 'tenant', $7::text, sum(u.denied)::bigint
		FROM usage_minute u
		WHERE u.tenant_id = ANY($6::uuid[]) AND `+rateRows+`
		GROUP BY 1`, keyTenantIDs, keyIDs, from, tollgate.ReasonRateLimited, plans.QuotaRuleName, tenantIDs, NoKey)
	if err != nil {
		return nil, fmt.Errorf("quota: rate denials: %w", err)
	}
	out := map[rateTarget]int64{}
	for rows.Next() {
		var s rateTarget
		var n int64
		if err := rows.Scan(&s.TenantID, &s.Scope, &s.KeyID, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("quota: rate denials: %w", err)
		}
		out[s] = n
	}
	return out, rows.Err()
}

// rateEventData is the payload both rate limiting events share.
func rateEventData(s rateTarget, c RateAlert, denials int64, startedAt, now time.Time) map[string]any {
	var key any
	if s.KeyID != NoKey {
		key = s.KeyID
	}
	return map[string]any{"scope": s.Scope, "key_id": key, "denials": denials, "threshold_denials": c.threshold(s.Scope),
		"window_seconds": int64(c.Window / time.Second), "started_at": startedAt.UTC().Format(time.RFC3339Nano),
		"at": now.UTC().Format(time.RFC3339Nano)}
}

// RecordRateDenials opens an alert, with ratelimit.sustained, for each of
// subjects (whose checks rate rules denied in the batches being applied,
// in tx) denied more than c.Denials times in the window ending at now,
// and for each of their tenants denied more than c.TenantDenials times
// over all its keys, that has no open alert; then resolves the open
// alerts that no longer hold (SweepRateAlerts). Each alert opens and
// resolves once, however many workers apply at once: one open alert per
// key, and one per tenant, is all the table allows.
func RecordRateDenials(ctx context.Context, tx pgx.Tx, subjects []RateSubject, c RateAlert, now time.Time) error {
	c = c.WithDefaults()
	if len(subjects) > 0 {
		targets := make([]rateTarget, 0, 2*len(subjects))
		for _, s := range subjects {
			targets = append(targets, rateTarget{s.TenantID, RateScopeKey, s.KeyID}, rateTarget{s.TenantID, RateScopeTenant, NoKey})
		}
		slices.SortFunc(targets, compareTargets)
		targets = slices.Compact(targets)
		counts, err := rateDenials(ctx, tx, targets, c.windowStart(now))
		if err != nil {
			return err
		}
		for _, s := range targets {
			n := counts[s]
			if n <= c.threshold(s.Scope) {
				continue
			}
			tag, err := tx.Exec(ctx, `INSERT INTO ratelimit_alerts (tenant_id, scope, key_id, started_at, denials)
				SELECT id, $2, $3::uuid, $4, $5 FROM tenants WHERE id = $1::uuid
				ON CONFLICT (tenant_id, scope, key_id) WHERE resolved_at IS NULL DO NOTHING`, s.TenantID, s.Scope, s.KeyID, now, n)
			if err != nil {
				return fmt.Errorf("quota: rate alert of %s %s/%s: %w", s.Scope, s.TenantID, s.KeyID, err)
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
// whose key (or tenant) was denied by rate rules at most half its
// threshold (c.Denials/2, c.TenantDenials/2) in the window ending at now:
// the hysteresis that keeps a key or tenant hovering at the threshold
// from flapping. The usage worker calls it with each batch it applies and
// every half minute while idle.
func SweepRateAlerts(ctx context.Context, tx pgx.Tx, c RateAlert, now time.Time) error {
	c = c.WithDefaults()
	rows, err := tx.Query(ctx, `SELECT tenant_id::text, scope, key_id::text, started_at FROM ratelimit_alerts
		WHERE resolved_at IS NULL ORDER BY tenant_id, scope, key_id`)
	if err != nil {
		return fmt.Errorf("quota: open rate alerts: %w", err)
	}
	type open struct {
		s       rateTarget
		started time.Time
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (open, error) {
		var o open
		return o, r.Scan(&o.s.TenantID, &o.s.Scope, &o.s.KeyID, &o.started)
	})
	if err != nil || len(list) == 0 {
		return err
	}
	targets := make([]rateTarget, len(list))
	for i, o := range list {
		targets[i] = o.s
	}
	counts, err := rateDenials(ctx, tx, targets, c.windowStart(now))
	if err != nil {
		return err
	}
	for _, o := range list {
		n := counts[o.s]
		if n > c.threshold(o.s.Scope)/2 {
			continue
		}
		tag, err := tx.Exec(ctx, `UPDATE ratelimit_alerts SET resolved_at = $4
			WHERE tenant_id = $1::uuid AND scope = $2 AND key_id = $3::uuid AND resolved_at IS NULL`,
			o.s.TenantID, o.s.Scope, o.s.KeyID, now)
		if err != nil {
			return fmt.Errorf("quota: resolve rate alert of %s %s/%s: %w", o.s.Scope, o.s.TenantID, o.s.KeyID, err)
		}
		if tag.RowsAffected() == 1 {
			if err := emit(ctx, tx, EventRateLimitResolved, o.s.TenantID, rateEventData(o.s, c, n, o.started, now)); err != nil {
				return err
			}
		}
	}
	return nil
}
