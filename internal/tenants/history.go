package tenants

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PlanChange is one entry of a tenant's plan history: from EffectiveAt on
// (until the next change) the tenant is on PlanID. Of two changes with the
// same EffectiveAt, the later recorded (higher ID) wins.
type PlanChange struct {
	ID          int64     `json:"id"`
	TenantID    string    `json:"tenant_id"`
	PlanID      int64     `json:"plan_id"`
	EffectiveAt time.Time `json:"effective_at"`
}

// PlanHistory returns the tenant's plan changes ("" = every tenant's),
// ordered by tenant, effective time and ID.
func (s *Store) PlanHistory(ctx context.Context, tenantID string) ([]PlanChange, error) {
	rows, err := s.db.Query(ctx, `SELECT id, tenant_id, plan_id, effective_at FROM tenant_plan_changes
		WHERE $1 = '' OR tenant_id::text = $1 ORDER BY tenant_id, effective_at, id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("tenants: plan history: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PlanChange, error) {
		var c PlanChange
		err := r.Scan(&c.ID, &c.TenantID, &c.PlanID, &c.EffectiveAt)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("tenants: plan history: %w", err)
	}
	return list, nil
}
