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
				var st auth.ServiceToken
				err := audit.Apply(ctx, e.db, audit.CLI, func(tx pgx.Tx) ([]audit.Change, error) {
					var err error
					if token, st, err = auth.NewStore(tx).IssueServiceToken(ctx, *name, *ttl); err != nil {
						return nil, err
					}
					return audit.One(audit.Change{Action: "service_token.create", TargetType: "service_token",
						TargetID: st.ID, After: st}), nil
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

func tokensListCommand() command {
	return command{
		name:    "tokens list",
		summary: "list service tokens (never the tokens themselves), newest first",
		flags: func(fs *flag.FlagSet) func(context.Context, *env) error {
			asJSON := fs.Bool("json", false, "print the service token records as a JSON array")
			return func(ctx context.Context, e *env) error {
				list, err := auth.NewStore(e.db).ListServiceTokens(ctx)
				if err != nil {
					return fmt.Errorf("tokens list: %w", err)
				}
				if *asJSON {
					return printJSON(e.stdout, list)
				}
				now := time.Now()
				rows := make([][]string, len(list))
				for i, st := range list {
					status := "active"
					switch {
					case st.RevokedAt != nil:
						status = "revoked"
					case st.ExpiresAt != nil && !st.ExpiresAt.After(now):
						status = "expired"
					}
					rows[i] = []string{st.ID, st.Name, status, timeCell(&st.CreatedAt), timeCell(st.ExpiresAt)}
				}
				return printTable(e.stdout, []string{"ID", "NAME", "STATUS", "CREATED", "EXPIRES"}, rows)
			}
		},
	}
}

func tokensRevokeCommand() command {
	return command{
		name:    "tokens revoke",
		summary: "revoke a service token by ID; the check API refuses it (401) within a second",
		flags: func(fs *flag.FlagSet) func(context.Context, *env) error {
			id := fs.String("id", "", "service token ID, as `tokens list` shows it (required)")
			asJSON := fs.Bool("json", false, "print the revoked token's record as JSON")
			return func(ctx context.Context, e *env) error {
				if *id == "" {
					return errors.New("tokens revoke: --id is required")
				}
				var after auth.ServiceToken
				err := audit.Apply(ctx, e.db, audit.CLI, func(tx pgx.Tx) ([]audit.Change, error) {
					as := auth.NewStore(tx)
					before, err := as.GetServiceToken(ctx, *id)
					if err != nil {
						return nil, err
					}
					if err := as.RevokeServiceToken(ctx, *id); err != nil {
						return nil, err
					}
					if after, err = as.GetServiceToken(ctx, *id); err != nil {
						return nil, err
					}
					return audit.One(audit.Change{Action: "service_token.revoke", TargetType: "service_token",
						TargetID: after.ID, Before: &before, After: &after}), nil
				})
				if err != nil {
					return fmt.Errorf("tokens revoke: %w", err)
				}
				if *asJSON {
					return printJSON(e.stdout, after)
				}
				fmt.Fprintf(e.stdout, "service token %s (%s) revoked at %s; the check API refuses it within a second\n",
					after.ID, after.Name, timeCell(after.RevokedAt))
				return nil
			}
		},
	}
}
