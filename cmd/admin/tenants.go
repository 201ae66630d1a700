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
	plan := planRef{fs.String("plan", "free", "plan name")}
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

// tenantRef is a --tenant flag: a tenant's ID or name.
type tenantRef struct{ ref *string }

// tenantFlag declares --tenant on fs with usage: ending in "(required)",
// run refuses the command without it.
func tenantFlag(fs *flag.FlagSet, usage string) tenantRef {
	return tenantRef{fs.String("tenant", "", usage)}
}

// find returns the tenant the flag names; its error names the flag.
func (f tenantRef) find(ctx context.Context, e *invocation) (tenants.Tenant, error) {
	t, err := tenants.NewStore(e.db).Find(ctx, *f.ref)
	if err != nil {
		return tenants.Tenant{}, fmt.Errorf("--tenant: %w", err)
	}
	return t, nil
}

// run is the action that finds the tenant the flag names, then does act
// with it.
func (f tenantRef) run(act func(ctx context.Context, e *invocation, t tenants.Tenant) error) action {
	return func(ctx context.Context, e *invocation) error {
		t, err := f.find(ctx, e)
		if err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
		return act(ctx, e, t)
	}
}

// id returns the ID of the tenant the flag names, or "" (every tenant)
// when the flag is not given.
func (f tenantRef) id(ctx context.Context, e *invocation) (string, error) {
	if *f.ref == "" {
		return "", nil
	}
	t, err := f.find(ctx, e)
	return t.ID, err
}
