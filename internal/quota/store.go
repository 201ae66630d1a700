package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Store keeps quota settings in Postgres. Safe for concurrent use.
type Store struct {
	db postgres.Conn
}

// NewStore returns a Store on db: a pool, or a transaction.
func NewStore(db postgres.Conn) *Store { return &Store{db: db} }

// PlanSettings returns plan planID's settings (none set: no thresholds,
// no caps); an unknown plan is ENOTFOUND.
func (s *Store) PlanSettings(ctx context.Context, planID int64) (PlanSettings, error) {
	ps, err := scanPlanSettings(s.db.QueryRow(ctx, `SELECT p.id, coalesce(q.thresholds, '[]'), q.spend_cap_default_minor,
		q.spend_cap_max_minor FROM plans p LEFT JOIN quota_plan_settings q ON q.plan_id = p.id WHERE p.id = $1`, planID))
	if errors.Is(err, pgx.ErrNoRows) {
		return PlanSettings{}, tollgate.Errorf(tollgate.ENOTFOUND, "plan %d not found", planID)
	}
	if err != nil {
		return PlanSettings{}, fmt.Errorf("quota: plan %d settings: %w", planID, err)
	}
	return ps, nil
}

// TenantSettings returns tenant tenantID's own settings (none set: the
// plan's apply); an unknown tenant is ENOTFOUND.
func (s *Store) TenantSettings(ctx context.Context, tenantID string) (TenantSettings, error) {
	notFound := tollgate.Errorf(tollgate.ENOTFOUND, "tenant %s not found", tenantID)
	if !tollgate.IsUUID(tenantID) {
		return TenantSettings{}, notFound
	}
	ts, err := scanTenantSettings(s.db.QueryRow(ctx, `SELECT t.id::text, q.thresholds, q.spend_cap_minor FROM tenants t
		LEFT JOIN quota_tenant_settings q ON q.tenant_id = t.id WHERE t.id = $1::uuid`, tenantID))
	if errors.Is(err, pgx.ErrNoRows) {
		return TenantSettings{}, notFound
	}
	if err != nil {
		return TenantSettings{}, fmt.Errorf("quota: tenant %s settings: %w", tenantID, err)
	}
	return ts, nil
}

// scanPlanSettings reads a row of plan_id, thresholds (JSON),
// spend_cap_default_minor and spend_cap_max_minor.
func scanPlanSettings(row pgx.Row) (PlanSettings, error) {
	var ps PlanSettings
	var raw []byte
	err := row.Scan(&ps.PlanID, &raw, &ps.SpendCapDefaultMinor, &ps.SpendCapMaxMinor)
	if err == nil {
		err = json.Unmarshal(raw, &ps.Thresholds)
	}
	return ps, err
}

// scanTenantSettings reads a row of tenant_id, thresholds (JSON; NULL:
// the plan's) and spend_cap_minor.
func scanTenantSettings(row pgx.Row) (TenantSettings, error) {
	var ts TenantSettings
	var raw []byte
	err := row.Scan(&ts.TenantID, &raw, &ts.SpendCapMinor)
	if err == nil && raw != nil {
		err = json.Unmarshal(raw, &ts.Thresholds)
	}
	return ts, err
}

// putPlan stores ps.
func (s *Store) putPlan(ctx context.Context, ps PlanSettings) error {
	raw, err := json.Marshal(ps.Thresholds)
	if err == nil {
		_, err = s.db.Exec(ctx, `INSERT INTO quota_plan_settings (plan_id, thresholds, spend_cap_default_minor, spend_cap_max_minor)
			VALUES ($1, $2, $3, $4) ON CONFLICT (plan_id) DO UPDATE SET thresholds = EXCLUDED.thresholds,
			spend_cap_default_minor = EXCLUDED.spend_cap_default_minor,
			spend_cap_max_minor = EXCLUDED.spend_cap_max_minor, updated_at = now()`,
			ps.PlanID, raw, ps.SpendCapDefaultMinor, ps.SpendCapMaxMinor)
	}
	if err != nil {
		return fmt.Errorf("quota: store plan %d settings: %w", ps.PlanID, err)
	}
	return nil
}

// SeedPlan stores ps unless plan ps.PlanID has settings already: the demo
// seed's first settings of a plan, made without an audit entry of their
// own (seed.demo's says what the seed made); the seed puts back settings
// an operator changed since through the audited operations.
func (s *Store) SeedPlan(ctx context.Context, ps PlanSettings) error {
	raw, err := json.Marshal(ps.Thresholds)
	if err == nil {
		_, err = s.db.Exec(ctx, `INSERT INTO quota_plan_settings (plan_id, thresholds, spend_cap_default_minor, spend_cap_max_minor)
			VALUES ($1, $2, $3, $4) ON CONFLICT (plan_id) DO NOTHING`,
			ps.PlanID, raw, ps.SpendCapDefaultMinor, ps.SpendCapMaxMinor)
	}
	if err != nil {
		return fmt.Errorf("quota: seed plan %d settings: %w", ps.PlanID, err)
	}
	return nil
}

// putTenant stores ts.
func (s *Store) putTenant(ctx context.Context, ts TenantSettings) error {
	var raw []byte
	var err error
	if ts.Thresholds != nil {
		raw, err = json.Marshal(ts.Thresholds)
	}
	if err == nil {
		_, err = s.db.Exec(ctx, `INSERT INTO quota_tenant_settings (tenant_id, thresholds, spend_cap_minor)
			VALUES ($1::uuid, $2, $3) ON CONFLICT (tenant_id) DO UPDATE SET thresholds = EXCLUDED.thresholds,
			spend_cap_minor = EXCLUDED.spend_cap_minor, updated_at = now()`, ts.TenantID, raw, ts.SpendCapMinor)
	}
	if err != nil {
		return fmt.Errorf("quota: store tenant %s settings: %w", ts.TenantID, err)
	}
	return nil
}

// All is every plan's and tenant's settings, as a snapshot of the check
// path reads them.
type All struct {
	Plans   map[int64]PlanSettings
	Tenants map[string]TenantSettings
	// PlanSince is when each tenant's current plan came into force.
	PlanSince map[string]time.Time
}

// LoadAll reads every setting.
func (s *Store) LoadAll(ctx context.Context) (All, error) {
	all := All{Plans: map[int64]PlanSettings{}, Tenants: map[string]TenantSettings{}, PlanSince: map[string]time.Time{}}
	rows, err := s.db.Query(ctx, `SELECT plan_id, thresholds, spend_cap_default_minor, spend_cap_max_minor FROM quota_plan_settings`)
	planList, err := postgres.Collect(rows, err, scanPlanSettings, "quota: load plan settings")
	if err != nil {
		return All{}, err
	}
	for _, ps := range planList {
		all.Plans[ps.PlanID] = ps
	}
	rows, err = s.db.Query(ctx, `SELECT tenant_id::text, thresholds, spend_cap_minor FROM quota_tenant_settings`)
	tenantList, err := postgres.Collect(rows, err, scanTenantSettings, "quota: load tenant settings")
	if err != nil {
		return All{}, err
	}
	for _, ts := range tenantList {
		all.Tenants[ts.TenantID] = ts
	}
	rows, err = s.db.Query(ctx, `SELECT tenant_id::text, max(effective_at) FROM tenant_plan_changes GROUP BY tenant_id`)
	if err != nil {
		return All{}, fmt.Errorf("quota: load plan changes: %w", err)
	}
	since, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		ID string
		At time.Time
	}])
	if err != nil {
		return All{}, fmt.Errorf("quota: load plan changes: %w", err)
	}
	for _, s := range since {
		all.PlanSince[s.ID] = s.At
	}
	return all, nil
}
