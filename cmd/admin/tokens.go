package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
)

func tokensIssueCommand() command {
	return command{
		name:    "tokens issue",
		summary: "issue a service token for a caller of the check API; printed once",
		flags: func(fs *flag.FlagSet) func(context.Context, *env) error {
			name := fs.String("name", "", "who the token is for, e.g. edge-gateway (required)")
			ttl := fs.Duration("ttl", 365*24*time.Hour, "validity")
			return func(ctx context.Context, e *env) error {
				if *name == "" {
					return errors.New("tokens issue: --name is required")
				}
				keys, err := e.secretKeys()
				if err != nil {
					return err
				}
				var token string
				st, err := audit.Create(ctx, e.db, audit.CLI, "service_token.create", auth.ServiceTokenAudit,
					func(tx pgx.Tx) (st auth.ServiceToken, err error) {
						token, st, err = auth.NewStore(tx).WithSecretKeys(keys).IssueServiceToken(ctx, *name, *ttl)
						return st, err
					})
				if err != nil {
					return fmt.Errorf("tokens issue: %w", err)
				}
				fmt.Fprintln(e.stdout, token)
				fmt.Fprintf(e.stderr, "service token %s for %s, expires %s\n", st.ID, st.Name, st.ExpiresAt.Format(time.RFC3339))
				return nil
			}
		},
	}
}

func secretsGenerateCommand() command {
	return command{
		name:       "secrets generate",
		summary:    "print a fresh TOLLGATE_SECRET_KEY (32 random bytes, base64)",
		noDatabase: true,
		flags: func(fs *flag.FlagSet) func(context.Context, *env) error {
			return func(_ context.Context, e *env) error {
				_, err := fmt.Fprintln(e.stdout, auth.GenerateSecretKey())
				return err
			}
		},
	}
}

func secretsResealCommand() command {
	return command{
		name: "secrets reseal",
		summary: "seal every stored signing key with TOLLGATE_SECRET_KEY: after rotating it " +
			"(the old key in TOLLGATE_SECRET_KEY_PREVIOUS), and for keys an earlier version stored in the clear",
		flags: func(fs *flag.FlagSet) func(context.Context, *env) error {
			return func(ctx context.Context, e *env) error {
				keys, err := e.secretKeys()
				if err != nil {
					return err
				}
				var n int
				err = audit.Apply(ctx, e.db, audit.CLI, func(tx pgx.Tx) ([]audit.Change, error) {
					var err error
					if n, err = auth.NewStore(tx).WithSecretKeys(keys).ResealSigningKeys(ctx); err != nil {
						return nil, err
					}
					return audit.One(audit.Change{Action: "signing_keys.reseal", TargetType: "signing_keys", TargetID: "all",
						After: map[string]int{"resealed": n}}), nil
				})
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(e.stdout, "resealed %d signing keys with the current secret key\n", n)
				return err
			}
		},
	}
}
