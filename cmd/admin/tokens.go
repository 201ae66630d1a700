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
				var token string
				st, err := audit.Create(ctx, e.db, audit.CLI, "service_token.create", auth.ServiceTokenAudit,
					func(tx pgx.Tx) (st auth.ServiceToken, err error) {
						token, st, err = auth.NewStore(tx).IssueServiceToken(ctx, *name, *ttl)
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
