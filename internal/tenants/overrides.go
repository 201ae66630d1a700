package tenants

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
)

// A tenant's rule overrides are rules of its own: one named like a rule of
// the tenant's plan replaces that rule for this tenant, any other is added
// to the plan's rules (see plans.MergeRules). They follow the tenant across
// plan changes.

// MaxOverrides bounds a tenant's override rules.
const MaxOverrides = 50

const overrideColumns = `id, tenant_id, name, algorithm, limit_count, period_us, burst,
	resource, scope, mode, failure_mode, options`

func scanOverride(row pgx.Row) (tenantID string, r plans.Rule, err error) {
	var opts []byte
	err = row.Scan(&r.ID, &tenantID, &r.Name, &r.Algorithm, &r.Limit, &r.PeriodUS, &r.Burst,
		&r.Resource, &r.Scope, &r.Mode, &r.FailureMode, &opts)
	if err == nil {
		err = json.Unmarshal(opts, &r.Options)
	}
	return tenantID, r, err
}

// Overrides returns the tenant's override rules in their order. An unknown
// tenant is ENOTFOUND.
func (s *Store) Overrides(ctx context.Context, tenantID string) ([]plans.Rule, error) {
	if _, err := s.Get(ctx, tenantID); err != nil {
		return nil, err
	}
	all, err := s.overridesWhere(ctx, "WHERE tenant_id = $1::uuid", tenantID)
	if err != nil {
		return nil, err
	}
	if all[tenantID] == nil {
		return []plans.Rule{}, nil
	}
	return all[tenantID], nil
}

// AllOverrides returns every tenant's override rules by tenant ID.
func (s *Store) AllOverrides(ctx context.Context) (map[string][]plans.Rule, error) {
	return s.overridesWhere(ctx, "")
}

func (s *Store) overridesWhere(ctx context.Context, where string, args ...any) (map[string][]plans.Rule, error) {
	rows, err := s.db.Query(ctx, `SELECT `+overrideColumns+` FROM tenant_rule_overrides `+where+`
		ORDER BY tenant_id, position, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("tenants: overrides: %w", err)
	}
	defer rows.Close()
	out := map[string][]plans.Rule{}
	for rows.Next() {
		tenantID, r, err := scanOverride(rows)
		if err != nil {
			return nil, fmt.Errorf("tenants: scan override: %w", err)
		}
		out[tenantID] = append(out[tenantID], r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tenants: overrides: %w", err)
	}
	return out, nil
}

// ValidateOverrides names each invalid field ("rules[i].field") of rules
// as they will be stored, with their defaults.
func ValidateOverrides(rules []plans.Rule) error {
	f := map[string]string{}
	if len(rules) > MaxOverrides {
		f["rules"] = fmt.Sprintf("must hold at most %d rules", MaxOverrides)
	}
	plans.ValidateRules("rules", rules, f)
	return tollgate.Invalid(f)
}

// SetOverrides replaces the tenant's override rules with rules (none
// removes them all) and returns them as stored. Like plan rules, an
// override keeps its identity by name.
func (s *Store) SetOverrides(ctx context.Context, tenantID string, rules []plans.Rule) ([]plans.Rule, error) {
	rules = plans.RulesWithDefaults(rules)
	if err := ValidateOverrides(rules); err != nil {
		return nil, err
	}
	if !postgres.IsUUID(tenantID) {
		return nil, errTenantNotFound(tenantID)
	}
	err := postgres.Tx(ctx, s.db, func(tx pgx.Tx) error {
		var id string
		err := tx.QueryRow(ctx, `SELECT id FROM tenants WHERE id = $1::uuid FOR UPDATE`, tenantID).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return errTenantNotFound(tenantID)
		}
		if err != nil {
			return fmt.Errorf("tenants: set overrides: %w", err)
		}
		names := make([]string, len(rules))
		for i, r := range rules {
			names[i] = r.Name
			opts, _ := json.Marshal(r.Options)
			_, err := tx.Exec(ctx, `INSERT INTO tenant_rule_overrides (tenant_id, name, algorithm, limit_count,
				period_us, burst, resource, scope, mode, failure_mode, options, position)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
				ON CONFLICT (tenant_id, name) DO UPDATE SET algorithm = EXCLUDED.algorithm,
				limit_count = EXCLUDED.limit_count, period_us = EXCLUDED.period_us, burst = EXCLUDED.burst,
				resource = EXCLUDED.resource, scope = EXCLUDED.scope, mode = EXCLUDED.mode,
				failure_mode = EXCLUDED.failure_mode, options = EXCLUDED.options, position = EXCLUDED.position`,
				id, r.Name, r.Algorithm, r.Limit, r.PeriodUS, r.Burst, r.Resource, r.Scope, r.Mode,
				r.FailureMode, opts, i)
			if err != nil {
				return fmt.Errorf("tenants: put override %s: %w", r.Name, err)
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tenant_rule_overrides WHERE tenant_id = $1 AND NOT (name = ANY($2))`,
			id, names); err != nil {
			return fmt.Errorf("tenants: prune overrides: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.Overrides(ctx, tenantID)
}
