package tenants

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/postgres"
)

// PlanChanges returns the tenant's whole plan history ("" = every
// tenant's), ordered by tenant, effective time and ID, for billing: from a
// change's EffectiveAt on (until the next change) the tenant is on its
// PlanID; of two changes with the same EffectiveAt the later recorded
// (higher ID) wins. PlanHistory is the paged, newest-first view for people.
// A malformed tenant ID has no history.
func (s *Store) PlanChanges(ctx context.Context, tenantID string) ([]PlanChange, error) {
	if tenantID != "" && !postgres.IsUUID(tenantID) {
		return []PlanChange{}, nil
	}
	rows, err := s.db.Query(ctx, selectPlanChanges+`
		WHERE $1::uuid IS NULL OR c.tenant_id = $1::uuid ORDER BY c.tenant_id, c.effective_at, c.id`, postgres.OptionalID(tenantID))
	return postgres.Collect(rows, err, scanPlanChange, "tenants: plan changes")
}

// selectPlanChanges reads plan changes (c) with their plan's name (p), as
// scanPlanChange scans them; callers add WHERE and ORDER BY.
const selectPlanChanges = `SELECT c.id, c.tenant_id, c.plan_id, p.name, c.effective_at, c.recorded_at
		FROM tenant_plan_changes c JOIN plans p ON p.id = c.plan_id`

func scanPlanChange(r pgx.Row) (PlanChange, error) {
	var c PlanChange
	err := r.Scan(&c.ID, &c.TenantID, &c.PlanID, &c.PlanName, &c.EffectiveAt, &c.RecordedAt)
	return c, err
}
