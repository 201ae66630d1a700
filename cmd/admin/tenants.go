package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/tollgate/tollgate"
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

// tenantsPlan moves a tenant to another plan, as the console's and the
// API's plan change do.
func tenantsPlan(fs *flag.FlagSet) action {
	tenant := tenantFlag(fs, "tenant ID or name (required)")
	plan := planFlag(fs, "")
	effective := fs.String("effective-at", "", "when the new plan starts counting for billing: an RFC 3339 time, or a duration before now such as -24h (default: now; never in the future)")
	var moved plans.Plan
	return changeAction(fs, tenant, "tenant's", func(ctx context.Context, e *invocation, t tenants.Tenant) (tenants.Tenant, error) {
		var err error
		if moved, err = plan.get(ctx, e); err != nil {
			return t, err
		}
		in := tenants.SetPlanInput{PlanID: moved.ID}
		if *effective != "" {
			at, err := parseWhen(*effective, time.Now())
			if err != nil {
				return t, tollgate.Invalid(map[string]string{"effective-at": err.Error()})
			}
			in.EffectiveAt = &at
		}
		return tenants.NewOps(e.db, nil).SetPlan(ctx, audit.CLI, t.ID, in)
	}, func(t tenants.Tenant) string {
		return fmt.Sprintf("tenant %s is on plan %s: its checks get the plan's rules within a second", t.Name, moved.Name)
	})
}

// tenantsSuspend suspends a tenant, or resumes it (suspend false).
func tenantsSuspend(suspend bool) func(fs *flag.FlagSet) action {
	return func(fs *flag.FlagSet) action {
		ops, done := (*tenants.Ops).Resume, "resumed: its checks are allowed again"
		if suspend {
			ops, done = (*tenants.Ops).Suspend, "suspended: its checks are denied (tenant_suspended) within a second"
		}
		return changeAction(fs, tenantFlag(fs, "tenant ID or name (required)"), "tenant's",
			func(ctx context.Context, e *invocation, t tenants.Tenant) (tenants.Tenant, error) {
				return ops(tenants.NewOps(e.db, nil), ctx, audit.CLI, t.ID)
			}, func(t tenants.Tenant) string { return fmt.Sprintf("tenant %s %s", t.Name, done) })
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
