package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/tenants"
)

func keysIssueCommand() command {
	return command{
		name:    "keys issue",
		summary: "issue an API key for a tenant; the secret is printed once and never stored",
		flags: func(fs *flag.FlagSet) func(context.Context, *env) error {
			tenant := fs.String("tenant", "", "tenant ID or name (required)")
			name := fs.String("name", "", "a name for the key")
			ttl := fs.Duration("expires-in", 0, "expire the key after this long (e.g. 720h); 0 = never")
			asJSON := fs.Bool("json", false, "print the key record and secret as JSON")
			count := fs.Int("count", 1, "issue this many keys, one secret per line (for load tests)")
			return func(ctx context.Context, e *env) error {
				if *tenant == "" {
					return errors.New("keys issue: --tenant is required")
				}
				if *count < 1 || *count > 100_000 {
					return errors.New("keys issue: --count must be from 1 to 100000")
				}
				ts := tenants.NewStore(e.db)
				t, err := ts.Find(ctx, *tenant)
				if err != nil {
					return fmt.Errorf("keys issue: --tenant: %w", err)
				}
				var exp *time.Time
				if *ttl > 0 {
					at := time.Now().Add(*ttl)
					exp = &at
				}
				var secret string
				var k tenants.Key
				for i := range *count {
					k, err = audit.Create(ctx, e.db, audit.CLI, "key.create", tenants.KeyAudit,
						func(tx pgx.Tx) (k tenants.Key, err error) {
							secret, k, err = tenants.NewStore(tx).IssueKey(ctx, t.ID, *name, exp)
							return k, err
						})
					if err != nil || i == *count-1 {
						break
					}
					fmt.Fprintln(e.stdout, secret)
				}
				if err != nil {
					return fmt.Errorf("keys issue: %w", err)
				}
				if *asJSON {
					return printJSON(e.stdout, map[string]any{"secret": secret, "key": k})
				}
				fmt.Fprintf(e.stdout, "%s\n", secret)
				fmt.Fprintf(e.stderr, "key %s (%s…) issued for tenant %s; the secret above is not shown again\n", k.ID, k.Prefix, t.Name)
				return nil
			}
		},
	}
}

func keysRevokeCommand() command {
	return command{
		name:    "keys revoke",
		summary: "revoke an API key by ID; checks with it are denied within a second",
		flags: func(fs *flag.FlagSet) func(context.Context, *env) error {
			id := fs.String("id", "", "key ID (required)")
			return func(ctx context.Context, e *env) error {
				if *id == "" {
					return errors.New("keys revoke: --id is required")
				}
				_, err := audit.Update(ctx, e.db, audit.CLI, "key.revoke", tenants.KeyAudit,
					func(tx pgx.Tx) (tenants.Key, error) { return tenants.NewStore(tx).KeyByID(ctx, *id) },
					func(tx pgx.Tx, before tenants.Key) (tenants.Key, error) {
						return tenants.NewStore(tx).RevokeTenantKey(ctx, before.TenantID, before.ID)
					})
				return err
			}
		},
	}
}
