package tenants

import (
	"context"
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

// overrideRules are tenants' override rules: rule rows like a plan's.
var overrideRules = plans.RuleTable{Table: "tenant_rule_overrides", Owner: "tenant_id"}

// Overrides returns the tenant's override rules in their order. An unknown
// tenant is ENOTFOUND.
func (s *Store) Overrides(ctx context.Context, tenantID string) ([]plans.Rule, error) {
	if _, err := s.Get(ctx, tenantID); err != nil {
		return nil, err
	}
	all, err := plans.LoadRules[string](ctx, s.db, overrideRules, "tenant_id = $1::uuid", tenantID)
	if err != nil {
		return nil, fmt.Errorf("tenants: overrides: %w", err)
	}
	if all[tenantID] == nil {
		return []plans.Rule{}, nil
	}
	return all[tenantID], nil
}

// AllOverrides returns every tenant's override rules by tenant ID.
func (s *Store) AllOverrides(ctx context.Context) (map[string][]plans.Rule, error) {
	all, err := plans.LoadRules[string](ctx, s.db, overrideRules, "true")
	if err != nil {
		return nil, fmt.Errorf("tenants: overrides: %w", err)
	}
	return all, nil
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
		if err := plans.PutRules(ctx, tx, overrideRules, id, rules); err != nil {
			return fmt.Errorf("tenants: set overrides: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.Overrides(ctx, tenantID)
}
