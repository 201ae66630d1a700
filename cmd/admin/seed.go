package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
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
		revoked, err := revokeEarlierDemoTokens(ctx, e, out.ServiceToken)
		if err != nil {
			return fmt.Errorf("seed demo: the new service token is issued, but revoking the earlier ones failed (seed again): %w", err)
		}
		if revoked > 0 {
			fmt.Fprintf(e.stderr, "seed demo: revoked %s issued by earlier seeds\n", plural(revoked, "demo-gateway service token"))
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
		for _, name := range []string{"free", "pro", "enterprise", "prepaid"} {
			fmt.Fprintf(e.stdout, "  %-10s %s\n", name, out.Keys[name])
		}
		fmt.Fprintf(e.stdout, "\nadmin users (passwords shown once; their earlier sessions are ended):\n")
		for _, role := range []string{"operator", "tenant_admin", "tenant_viewer"} {
			u := out.Users[role]
			fmt.Fprintf(e.stdout, "  %-12s %s  %s\n", role, u.Email, u.Password)
		}
		return nil
	}
}

// demoTokenName is the name of the service token seed demo issues.
const demoTokenName = "demo-gateway"

// revokeEarlierDemoTokens revokes every active service token named
// demo-gateway but the one just issued, token (one service_token.revoke
// entry each): each seed, so each `make run`, issues a year-long token,
// and the earlier ones, printed once and forgotten, would otherwise stay
// valid. It returns how many it revoked.
func revokeEarlierDemoTokens(ctx context.Context, e *invocation, token string) (int, error) {
	as := auth.NewStore(e.db)
	public, err := as.PublicKeys(ctx)
	if err != nil {
		return 0, err
	}
	now := time.Now()
	current, _, err := auth.VerifyServiceToken(token, public, now)
	if err != nil {
		return 0, fmt.Errorf("the new token: %w", err)
	}
	list, err := as.ListServiceTokens(ctx)
	if err != nil {
		return 0, err
	}
	ops, n := auth.NewOps(e.db, nil), 0
	for _, st := range list {
		if st.Name != demoTokenName || st.ID == current || st.RevokedAt != nil || (st.ExpiresAt != nil && !st.ExpiresAt.After(now)) {
			continue
		}
		if _, err := ops.RevokeServiceToken(ctx, audit.CLI, st.ID); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// plural is "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
