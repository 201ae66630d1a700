package quota

import (
	"context"
	"fmt"
	"math/bits"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/plans"
)

// EventForecastExceeded is emitted when a tenant's month, at its pace so
// far, passes its included units or its spend cap before the month ends.
const EventForecastExceeded = "quota.forecast.exceeded"

// ForecastMinElapsed is how long a month must have run before its pace is
// projected: a first hour's burst says little about a month.
const ForecastMinElapsed = 24 * time.Hour

// Limits a forecast projects (quota_forecasts.kind, the event's "limit").
const (
	LimitIncluded = "included_units"
	LimitSpendCap = "spend_cap"
)

// ProjectReach returns when a month [start, end) that has counted used
// units by now reaches limit units if the pace so far holds: start +
// (now−start) × limit / used, exact to the microsecond. ok is false when
// it never does before end, when the month is already at or past limit
// (then the limit itself reports, not a forecast), when nothing is used
// yet, or when less than ForecastMinElapsed of the month has run.
func ProjectReach(start, end, now time.Time, used, limit int64) (time.Time, bool) {
	elapsed := now.Sub(start)
	if used <= 0 || limit <= used || elapsed < ForecastMinElapsed || !now.Before(end) {
		return time.Time{}, false
	}
	hi, lo := bits.Mul64(uint64(limit), uint64(elapsed.Microseconds()))
	if hi >= uint64(used) {
		return time.Time{}, false // beyond any month
	}
	us, _ := bits.Div64(hi, lo, uint64(used))
	if us >= uint64(end.Sub(start).Microseconds()) {
		return time.Time{}, false
	}
	return start.Add(time.Duration(us) * time.Microsecond), true
}

// forecastInput is what a tenant's forecast needs from the reconcile
// query.
type forecastInput struct {
	planID   int64
	mode     plans.QuotaMode
	included int64
	since    time.Time
	ps       PlanSettings
	ts       TenantSettings
}

// capBinds reports whether a spend cap may be in force: an overage plan
// with a cap set somewhere.
func (f forecastInput) capBinds() bool {
	return f.mode == plans.QuotaOverage &&
		(f.ts.SpendCapMinor != nil || f.ps.SpendCapDefaultMinor != nil || f.ps.SpendCapMaxMinor != nil)
}

// forecast emits quota.forecast.exceeded for one tenant whose month has
// counted count units by now, for each limit the month's pace passes
// before it ends: its included units (on a plan that includes some), and
// its spend cap in units (when one binds). Each limit's event is emitted
// once a month, and again only when the projected day moves earlier
// (quota_forecasts keeps the earliest day told; the row's lock makes
// concurrent workers agree).
func forecast(ctx context.Context, tx pgx.Tx, tenantID string, f forecastInput, count int64, now time.Time) error {
	start := monthOf(now)
	end := start.AddDate(0, 1, 0)
	if count <= 0 || now.Sub(start) < ForecastMinElapsed {
		return nil
	}
	if f.included > 0 {
		if err := forecastLimit(ctx, tx, tenantID, start, end, now, count, LimitIncluded, f.included, nil); err != nil {
			return err
		}
	}
	if !f.capBinds() {
		return nil
	}
	p, err := plans.NewStore(tx).Get(ctx, f.planID)
	if err != nil {
		return fmt.Errorf("quota: forecast of tenant %s: %w", tenantID, err)
	}
	l := Resolve(p, f.ps, f.ts, f.since, now)
	if !l.Capped {
		return nil
	}
	return forecastLimit(ctx, tx, tenantID, start, end, now, count, LimitSpendCap, l.CapUnits, &l.CapMinor)
}

// forecastLimit projects one limit and emits the event when the
// projected day is new or earlier than the one told.
func forecastLimit(ctx context.Context, tx pgx.Tx, tenantID string, start, end, now time.Time, count int64,
	kind string, limit int64, capMinor *int64) error {
	reach, ok := ProjectReach(start, end, now, count, limit)
	if !ok {
		return nil
	}
	day := time.Date(reach.Year(), reach.Month(), reach.Day(), 0, 0, 0, 0, time.UTC)
	tag, err := tx.Exec(ctx, `INSERT INTO quota_forecasts AS q (tenant_id, month, kind, projected_day, limit_units, updated_at)
		SELECT id, $2, $3, $4, $5, $6 FROM tenants WHERE id = $1::uuid
		ON CONFLICT (tenant_id, month, kind) DO UPDATE SET projected_day = EXCLUDED.projected_day,
			limit_units = EXCLUDED.limit_units, updated_at = EXCLUDED.updated_at
		WHERE q.projected_day > EXCLUDED.projected_day`, tenantID, start, kind, day, limit, now)
	if err != nil {
		return fmt.Errorf("quota: forecast %s of tenant %s: %w", kind, tenantID, err)
	}
	if tag.RowsAffected() == 0 {
		return nil
	}
	data := map[string]any{"month": start.Format("2006-01"), "limit": kind, "limit_units": limit,
		"used_units": count, "projected_day": day.Format(time.DateOnly),
		"projected_at": reach.Format(time.RFC3339Nano), "at": now.UTC().Format(time.RFC3339Nano)}
	if capMinor != nil {
		data["spend_cap_minor"] = *capMinor
	}
	return emit(ctx, tx, EventForecastExceeded, tenantID, data)
}
