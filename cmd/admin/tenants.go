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
	plan := fs.String("plan", "free", "plan name")
	return func(ctx context.Context, e *invocation) error {
		p, err := plans.NewStore(e.db).GetByName(ctx, *plan)
		if err != nil {
			return fmt.Errorf("tenants create: --plan: %w", err)
		}
		t, err := tenants.NewOps(e.db, nil).Create(ctx, audit.CLI, tenants.CreateTenantInput{Name: *name, PlanID: p.ID})
		if err != nil {
			return fmt.Errorf("tenants create: %w", err)
		}
		return printJSON(e.stdout, t)
	}
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
