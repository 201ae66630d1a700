package quota

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/events"
)

// Event types (docs/usage.md, "Quota events").
const (
	EventThresholdCrossed  = "quota.threshold.crossed"
	EventThresholdResolved = "quota.threshold.resolved"
	EventSpendCapReached   = "spend_cap.reached"
	EventExhausted         = "quota.exhausted"
)

// Kinds of crossing rows (quota_crossings.kind).
const (
	kindThreshold = "threshold"
	kindSpendCap  = "spend_cap"
	kindExhausted = "exhausted"
)

// Sources of a crossing: a check that saw it, the usage rollups, or the
// tenant's monthly quota counter in the limiter store (SweepCounters).
const (
	SourceCheck   = "check"
	SourceRollups = "rollups"
	SourceCounter = "counter"
)

// Crossing is a threshold a tenant's month-to-date count went past: Units
// is the threshold (a count), AtUS when (µs since the epoch; its UTC month
// is the month crossed).
type Crossing struct {
	TenantID string
	Units    int64
	AtUS     int64
}

// emit writes one event to the events outbox in tx (events.Emit), so it
// commits with what it reports and is delivered after. It is the one place
// events of this package leave it.
func emit(ctx context.Context, tx pgx.Tx, typ, tenantID string, data any) error {
	if _, err := events.Emit(ctx, tx, events.Event{Type: typ, TenantID: tenantID, Data: data}); err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	return nil
}

// monthOf returns the first day (UTC) of the month holding t.
func monthOf(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// record inserts one crossing row unless the tenant, month, kind and units
// already have one (or the tenant is gone), and emits typ with data when
// it inserted. inserted reports whether it did.
func record(ctx context.Context, tx pgx.Tx, tenantID string, month time.Time, kind string, units int64,
	at time.Time, source, typ string, data map[string]any) (inserted bool, err error) {
	tag, err := tx.Exec(ctx, `INSERT INTO quota_crossings (tenant_id, month, kind, units, crossed_at, source)
		SELECT id, $2, $3, $4, $5, $6 FROM tenants WHERE id = $1::uuid
		ON CONFLICT (tenant_id, month, kind, units) DO NOTHING`, tenantID, month, kind, units, at, source)
	if err != nil {
		return false, fmt.Errorf("quota: record %s %d of tenant %s: %w", kind, units, tenantID, err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	data["month"] = month.Format("2006-01")
	data["at"] = at.UTC().Format(time.RFC3339Nano)
	data["source"] = source
	return true, emit(ctx, tx, typ, tenantID, data)
}

// RecordCrossings records crossings the check path saw, in tx (the
// transaction that applies the usage batch carrying them): each at most
// once per tenant, month and threshold, however many processes saw it,
// with one quota.threshold.crossed event when it is new. They are written
// in tenant and units order, so that two workers recording the same
// crossings wait for each other rather than deadlock.
func RecordCrossings(ctx context.Context, tx pgx.Tx, cs []Crossing) error {
	cs = slices.Clone(cs)
	slices.SortFunc(cs, func(a, b Crossing) int {
		if c := strings.Compare(a.TenantID, b.TenantID); c != 0 {
			return c
		}
		return cmp.Compare(a.Units, b.Units)
	})
	for _, c := range cs {
		at := time.UnixMicro(c.AtUS).UTC()
		if _, err := record(ctx, tx, c.TenantID, monthOf(at), kindThreshold, c.Units, at, SourceCheck,
			EventThresholdCrossed, map[string]any{"threshold_units": c.Units}); err != nil {
			return err
		}
	}
	return nil
}

// Denial is the first denial of a month a check path counted: by the
// spend cap, or by a hard monthly quota.
type Denial struct {
	TenantID string
	SpendCap bool
	AtUS     int64
}

// RecordDenials records, at most once per tenant and month each,
// spend_cap.reached (the spend cap began denying) and quota.exhausted (a
// hard quota began denying).
func RecordDenials(ctx context.Context, tx pgx.Tx, ds []Denial) error {
	for _, d := range ds {
		at := time.UnixMicro(d.AtUS).UTC()
		kind, typ := kindExhausted, EventExhausted
		if d.SpendCap {
			kind, typ = kindSpendCap, EventSpendCapReached
		}
		if _, err := record(ctx, tx, d.TenantID, monthOf(at), kind, 0, at, SourceCheck, typ, map[string]any{}); err != nil {
			return err
		}
	}
	return nil
}

// Reconcile brings the crossings of tenantIDs in line with the month
// rollups as of now, in tx: every threshold at or below the month-to-date
// count that has no crossing gets one (source rollups: a tenant without a
// monthly quota counter, units its counter did not count, or a crossing
// the check path could not hand on, which SweepCounters finds sooner from
// the counter); every unresolved crossing of an earlier month, or of a
// threshold no longer configured or now above the count (more included
// units), is resolved with quota.threshold.resolved. Call it after the
// rollups are written, in the same transaction.
func Reconcile(ctx context.Context, tx pgx.Tx, tenantIDs []string, now time.Time) error {
	return reconcile(ctx, tx, tenantIDs, nil, monthOf(now), now)
}

// reconcile is Reconcile of month (its first day, UTC), found at now,
// with, for some tenants, the month's count of their monthly quota
// counter (counters, by tenant ID): a threshold at or below it but above
// the rollups' count is recorded too (source counter). Forecasts stay
// with the rollups' count, and are made only for now's month: a month
// gone by has no pace left to project. month is the month of the usage
// being reconciled, which is not now's when a batch arrives late:
// October's usage applied in the first seconds of November crosses
// October's thresholds, on October's count, against October's plan:
// the plan in force at October's end, whatever the tenant is on now —
// its whole included units and its quota settings, with the tenant's own
// settings over them, as the checks of October's last instant had them.
func reconcile(ctx context.Context, tx pgx.Tx, tenantIDs []string, counters map[string]int64, month, now time.Time) error {
	if len(tenantIDs) == 0 {
		return nil
	}
	// The tenant's current plan for now's month (and a month after it, a
	// clock ahead); for a month gone by, the plan of its statement's last
	// span: the last change effective before the month's end, of two at
	// one instant the later recorded (the statements' rule,
	// tenants.PlanChanges), or for a month before the tenant's first
	// change, that first change (whose span its hours count on).
	var monthEnd *time.Time
	if month.Before(monthOf(now)) {
		end := month.AddDate(0, 1, 0)
		monthEnd = &end
	}
	rows, err := tx.Query(ctx, `SELECT t.id::text, p.id, p.included_units, p.quota_mode,
			coalesce(ts.thresholds, ps.thresholds, '[]'::jsonb),
			coalesce((SELECT sum(u.allowed_units) FROM usage_month u
				WHERE u.tenant_id = t.id AND u.bucket_start = $2), 0)::bigint,
			coalesce((SELECT array_agg(c.units) FROM quota_crossings c WHERE c.tenant_id = t.id
				AND c.month = $2 AND c.kind = 'threshold' AND c.resolved_at IS NULL), '{}'),
			ps.spend_cap_default_minor, ps.spend_cap_max_minor, ts.spend_cap_minor,
			coalesce((SELECT max(pc.effective_at) FROM tenant_plan_changes pc WHERE pc.tenant_id = t.id), t.created_at)
		FROM tenants t
		LEFT JOIN LATERAL (SELECT pc.plan_id FROM tenant_plan_changes pc
			WHERE pc.tenant_id = t.id AND $3::timestamptz IS NOT NULL
			ORDER BY pc.effective_at < $3 DESC, CASE WHEN pc.effective_at < $3 THEN pc.effective_at END DESC,
				pc.effective_at, pc.id DESC
			LIMIT 1) month_plan ON true
		JOIN plans p ON p.id = coalesce(month_plan.plan_id, t.plan_id)
		LEFT JOIN quota_plan_settings ps ON ps.plan_id = p.id
		LEFT JOIN quota_tenant_settings ts ON ts.tenant_id = t.id
		WHERE t.id = ANY($1::uuid[]) ORDER BY t.id`, tenantIDs, month, monthEnd)
	if err != nil {
		return fmt.Errorf("quota: reconcile: %w", err)
	}
	type state struct {
		id       string
		points   []int64
		count    int64
		unsolved []int64
		forecastInput
	}
	var states []state
	for rows.Next() {
		var s state
		var raw []byte
		var ts []Threshold
		f := &s.forecastInput
		if err := rows.Scan(&s.id, &f.planID, &f.included, &f.mode, &raw, &s.count, &s.unsolved,
			&f.ps.SpendCapDefaultMinor, &f.ps.SpendCapMaxMinor, &f.ts.SpendCapMinor, &f.since); err != nil {
			rows.Close()
			return fmt.Errorf("quota: reconcile: %w", err)
		}
		if err := json.Unmarshal(raw, &ts); err != nil {
			rows.Close()
			return fmt.Errorf("quota: reconcile: thresholds of tenant %s: %w", s.id, err)
		}
		s.points = Points(ts, f.included)
		states = append(states, s)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("quota: reconcile: %w", err)
	}
	for _, s := range states {
		if err := reconcileTenant(ctx, tx, s.id, month, s.points, s.count, counters[s.id], s.unsolved, now); err != nil {
			return err
		}
		if !month.Equal(monthOf(now)) {
			continue
		}
		if err := forecast(ctx, tx, s.id, s.forecastInput, s.count, now); err != nil {
			return err
		}
	}
	return resolveEarlier(ctx, tx, tenantIDs, month, now)
}

// reconcileTenant records the missing crossings of one tenant, up to the
// greater of the rollups' count and the counter's (0 when not read), and
// resolves those that no longer hold.
func reconcileTenant(ctx context.Context, tx pgx.Tx, tenantID string, month time.Time, points []int64,
	count, counter int64, unresolved []int64, now time.Time) error {
	for _, units := range points {
		if units > max(count, counter) || slices.Contains(unresolved, units) {
			continue
		}
		source := SourceRollups
		if units > count {
			source = SourceCounter
		}
		if _, err := record(ctx, tx, tenantID, month, kindThreshold, units, now, source,
			EventThresholdCrossed, map[string]any{"threshold_units": units}); err != nil {
			return err
		}
	}
	for _, units := range unresolved {
		if slices.Contains(points, units) {
			continue
		}
		if err := resolve(ctx, tx, tenantID, month, units, now, "threshold_changed"); err != nil {
			return err
		}
	}
	return nil
}

// resolveEarlier resolves the unresolved threshold crossings of tenantIDs
// in months before month: a new month starts every count from zero.
func resolveEarlier(ctx context.Context, tx pgx.Tx, tenantIDs []string, month, now time.Time) error {
	rows, err := tx.Query(ctx, `SELECT tenant_id::text, month, units FROM quota_crossings
		WHERE tenant_id = ANY($1::uuid[]) AND month < $2 AND kind = 'threshold' AND resolved_at IS NULL`, tenantIDs, month)
	if err != nil {
		return fmt.Errorf("quota: resolve earlier months: %w", err)
	}
	type old struct {
		tenantID string
		month    time.Time
		units    int64
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (old, error) {
		var o old
		return o, r.Scan(&o.tenantID, &o.month, &o.units)
	})
	if err != nil {
		return fmt.Errorf("quota: resolve earlier months: %w", err)
	}
	for _, o := range list {
		if err := resolve(ctx, tx, o.tenantID, o.month, o.units, now, "new_month"); err != nil {
			return err
		}
	}
	return nil
}

// resolve marks one threshold crossing resolved and emits
// quota.threshold.resolved, once: a crossing already resolved is left.
func resolve(ctx context.Context, tx pgx.Tx, tenantID string, month time.Time, units int64, now time.Time, why string) error {
	tag, err := tx.Exec(ctx, `UPDATE quota_crossings SET resolved_at = $5 WHERE tenant_id = $1::uuid AND month = $2
		AND kind = $3 AND units = $4 AND resolved_at IS NULL`, tenantID, month, kindThreshold, units, now)
	if err != nil {
		return fmt.Errorf("quota: resolve %d of tenant %s: %w", units, tenantID, err)
	}
	if tag.RowsAffected() == 0 {
		return nil
	}
	return emit(ctx, tx, EventThresholdResolved, tenantID, map[string]any{"threshold_units": units,
		"month": month.Format("2006-01"), "reason": why, "at": now.UTC().Format(time.RFC3339Nano)})
}

// SweepCrossings resolves, in tx, the threshold crossings that no longer
// hold although their tenant has no usage to apply, which Reconcile would
// otherwise find only with the tenant's next usage: those of months gone
// by (new_month), and those of tenants whose plan, plan settings or own
// settings changed since the crossing was recorded (threshold_changed: a
// plan upgrade, more included units, thresholds moved). It reconciles
// those tenants only, and only now's month, on their current plan: a
// month gone by is only resolved, never crossed again. The usage worker
// calls it every half minute; like Reconcile, each resolution is emitted
// once however many workers sweep.
func SweepCrossings(ctx context.Context, tx pgx.Tx, now time.Time) error {
	rows, err := tx.Query(ctx, `SELECT DISTINCT c.tenant_id::text FROM quota_crossings c
		JOIN tenants t ON t.id = c.tenant_id
		JOIN plans p ON p.id = t.plan_id
		LEFT JOIN quota_plan_settings ps ON ps.plan_id = t.plan_id
		LEFT JOIN quota_tenant_settings ts ON ts.tenant_id = t.id
		WHERE c.kind = 'threshold' AND c.resolved_at IS NULL
			AND (c.month < $1 OR greatest(t.updated_at, p.updated_at, ps.updated_at, ts.updated_at) > c.recorded_at)
		ORDER BY 1`, monthOf(now))
	if err != nil {
		return fmt.Errorf("quota: sweep crossings: %w", err)
	}
	tenantIDs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("quota: sweep crossings: %w", err)
	}
	return Reconcile(ctx, tx, tenantIDs, now)
}
