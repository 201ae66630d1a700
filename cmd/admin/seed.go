package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/demo"
)

func seedDemo(fs *flag.FlagSet) action {
	asJSON := fs.Bool("json", false, `print {"service_token": …, "keys": {"free": …, "pro": …, "enterprise": …, "prepaid": …}, "users": {"operator": {…}, "tenant_admin": {…}, "tenant_viewer": {…}}, "usage_hours": …}`)
	withUsage := fs.Bool("usage", true, "make up the demo tenants' keys (in every state) and their usage of the last 30 days, in the hours that have none")
	return func(ctx context.Context, e *invocation) error {
		keys, err := e.secretKeys()
		if err != nil {
			return err
		}
		out, err := demo.Seed(ctx, e.db, audit.CLI, keys)
		if err != nil {
			return err
		}
		if *withUsage {
			if out.UsageHours, err = demo.SeedUsage(ctx, e.db, time.Now()); err != nil {
				return err
			}
		}
		if *asJSON {
			return printJSON(e.stdout, out)
		}
		fmt.Fprintf(e.stdout, "service token (for Authorization: Bearer …):\n  %s\n\nAPI keys (shown once):\n", out.ServiceToken)
		for _, name := range []string{"free", "pro", "enterprise"} {
			fmt.Fprintf(e.stdout, "  %-10s %s\n", name, out.Keys[name])
		}
		fmt.Fprintf(e.stdout, "\nadmin users (passwords shown once):\n")
		for _, role := range []string{"operator", "tenant_admin", "tenant_viewer"} {
			u := out.Users[role]
			fmt.Fprintf(e.stdout, "  %-12s %s  %s\n", role, u.Email, u.Password)
		}
		return nil
	}
}
