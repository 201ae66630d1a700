package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
)

func tenantsCreate(fs *flag.FlagSet) action {
	name := fs.String("name", "", "tenant name (required)")
	plan := planFlag(fs, "free")
	return plan.run(func(ctx context.Context, e *invocation, p plans.Plan) error {
		t, err := tenants.NewOps(e.db, nil).Create(ctx, audit.CLI, tenants.CreateTenantInput{Name: *name, PlanID: p.ID})
		if err != nil {
			return fmt.Errorf("tenants create: %w", err)
		}
		return printJSON(e.stdout, t)
	})
}

func tenantsList(fs *flag.FlagSet) action {
	return listAction(fs, "tenant records", []string{"ID", "NAME", "PLAN", "STATUS", "CREATED"},
		func(ctx context.Context, e *invocation) ([]tenants.Tenant, func(tenants.Tenant) []string, error) {
			list, err := tenants.NewStore(e.db).List(ctx)
			if err != nil {
				return nil, nil, err
			}
			planNames, err := planNamesByID(ctx, e)
			return list, func(t tenants.Tenant) []string {
				return []string{t.ID, t.Name, planNames[t.PlanID], t.Status, timeCell(&t.CreatedAt)}
			}, err
		})
}

// tenantFlag declares --tenant on fs with usage (ending in "(required)"
// when the command needs one): a tenant's ID or name.
func tenantFlag(fs *flag.FlagSet, usage string) ref[tenants.Tenant] {
	return ref[tenants.Tenant]{"tenant", fs.String("tenant", "", usage),
		func(ctx context.Context, e *invocation, s string) (tenants.Tenant, error) {
			return tenants.NewStore(e.db).Find(ctx, s)
		}}
}

// optionalTenantID is the ID of the tenant the flag names, or "" (every
// tenant) when it is not given.
func optionalTenantID(ctx context.Context, e *invocation, tenant ref[tenants.Tenant]) (string, error) {
	if *tenant.value == "" {
		return "", nil
	}
	t, err := tenant.get(ctx, e)
	return t.ID, err
}
