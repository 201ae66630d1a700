package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/events"
)

func tokensIssue(fs *flag.FlagSet) action {
	name := fs.String("name", "", "who the token is for, e.g. edge-gateway (required)")
	ttl := fs.Duration("ttl", 365*24*time.Hour, "validity")
	return func(ctx context.Context, e *invocation) error {
		keys, err := e.secretKeys()
		if err != nil {
			return err
		}
		ttlS := int64(*ttl / time.Second)
		res, err := auth.NewOps(e.db, keys).IssueServiceToken(ctx, audit.CLI, auth.IssueServiceTokenInput{Name: *name, TTLS: &ttlS})
		if err != nil {
			return fmt.Errorf("tokens issue: %w", err)
		}
		st := res.ServiceToken
		fmt.Fprintln(e.stdout, res.Token)
		fmt.Fprintf(e.stderr, "service token %s for %s, expires %s\n", st.ID, st.Name, st.ExpiresAt.Format(time.RFC3339))
		return nil
	}
}

func tokensList(fs *flag.FlagSet) action {
	return listAction(fs, "service token records", []string{"ID", "NAME", "STATUS", "CREATED", "EXPIRES"},
		func(ctx context.Context, e *invocation) ([]auth.ServiceToken, func(auth.ServiceToken) []string, error) {
			list, err := auth.NewStore(e.db).ListServiceTokens(ctx)
			return list, serviceTokenRow(time.Now()), err
		})
}

// serviceTokenRow is the table row of a service token: its status is
// "revoked", "expired" or "active" at now.
func serviceTokenRow(now time.Time) func(auth.ServiceToken) []string {
	return func(st auth.ServiceToken) []string {
		status := "active"
		switch {
		case st.RevokedAt != nil:
			status = "revoked"
		case st.ExpiresAt != nil && !st.ExpiresAt.After(now):
			status = "expired"
		}
		return []string{st.ID, st.Name, status, timeCell(&st.CreatedAt), timeCell(st.ExpiresAt)}
	}
}

func tokensRevoke(fs *flag.FlagSet) action {
	return revokeAction(fs, "service token ID, as tokens list shows it", "token's",
		func(ctx context.Context, e *invocation, id string) (auth.ServiceToken, error) {
			return auth.NewOps(e.db, nil).RevokeServiceToken(ctx, audit.CLI, id)
		}, func(st auth.ServiceToken) string {
			return fmt.Sprintf("service token %s (%s) revoked at %s; the check API refuses it within a second",
				st.ID, st.Name, timeCell(st.RevokedAt))
		})
}

func secretsGenerate(fs *flag.FlagSet) action {
	return func(_ context.Context, e *invocation) error {
		_, err := fmt.Fprintln(e.stdout, auth.GenerateSecretKey())
		return err
	}
}

func secretsReseal(fs *flag.FlagSet) action {
	return func(ctx context.Context, e *invocation) error {
		keys, err := e.secretKeys()
		if err != nil {
			return err
		}
		n, err := auth.NewOps(e.db, keys).ResealSigningKeys(ctx, audit.CLI)
		if err != nil {
			return err
		}
		if _, err = fmt.Fprintf(e.stdout, "resealed %d signing keys with the current secret key\n", n); err != nil {
			return err
		}
		return sealWebhookSecrets(ctx, e, keys)
	}
}

// sealWebhookSecrets seals the webhook endpoints' secrets with the
// current secret key (events.SealSecrets) and says what it did.
func sealWebhookSecrets(ctx context.Context, e *invocation, keys *auth.SecretKeys) error {
	n, unopened, err := events.SealSecrets(ctx, e.db, keys)
	if err != nil {
		return err
	}
	if n > 0 {
		fmt.Fprintf(e.stdout, "sealed the secrets of %d webhook endpoints with the current secret key\n", n)
	}
	if len(unopened) > 0 {
		fmt.Fprintf(e.stderr, "the secrets of %d webhook endpoints are sealed with a key that is not configured "+
			"(TOLLGATE_SECRET_KEY_PREVIOUS): %s\n", len(unopened), strings.Join(unopened, ", "))
	}
	return nil
}
