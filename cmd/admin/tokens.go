package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/page"
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
		if errors.Is(err, auth.ErrKeyNotConfigured) {
			return fmt.Errorf("tokens issue: %w; if that key is lost, `admin secrets recover` retires the signing keys it sealed "+
				"(the tokens they signed keep working) so that tokens are signed with a new one", err)
		}
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
		func(ctx context.Context, e *invocation, id string) (auth.ServiceToken, bool, error) {
			before, err := auth.NewStore(e.db).GetServiceToken(ctx, id)
			already := err == nil && before.RevokedAt != nil
			after, err := auth.NewOps(e.db, nil).RevokeServiceToken(ctx, audit.CLI, id)
			return after, already, err
		}, func(st auth.ServiceToken) (string, *time.Time) {
			return fmt.Sprintf("service token %s (%s)", st.ID, st.Name), st.RevokedAt
		}, "the check API refuses it within a second")
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
		res, err := auth.NewOps(e.db, keys).ResealSigningKeys(ctx, audit.CLI)
		if errors.Is(err, auth.ErrKeyNotConfigured) {
			return fmt.Errorf("secrets reseal: %w; if that key is lost, run `admin secrets recover` first", err)
		}
		if err != nil {
			return fmt.Errorf("secrets reseal: %w", err)
		}
		fmt.Fprintf(e.stdout, "signing keys: %d resealed with the current secret key, %d already sealed with it\n", res.Resealed, res.Current)
		if len(res.Unreadable) > 0 {
			fmt.Fprintf(e.stdout, "signing keys: %d retired ones left as they are, sealed with a key that is not configured "+
				"(they sign nothing more): %s\n", len(res.Unreadable), strings.Join(res.Unreadable, ", "))
		}
		return sealWebhookSecrets(ctx, e, keys, true)
	}
}

const secretsRecoverHelp = `
Run it when a secret key is lost for good (not merely missing from this
process's TOLLGATE_SECRET_KEY_PREVIOUS: then set it there and run
secrets reseal instead), with the new key in TOLLGATE_SECRET_KEY and every
key that is still known in TOLLGATE_SECRET_KEY_PREVIOUS.

It retires the signing keys that no configured key opens: the service
tokens they signed keep working (their public keys are kept in the clear),
and the next tokens issue signs with a new key. Webhook endpoints whose
secrets no configured key opens are listed: their deliveries wait until
each is given a new secret with webhooks rotate-secret, to pass on to its
receiver. The rest is sealed with the current key, as secrets reseal does.`

func secretsRecover(fs *flag.FlagSet) action {
	return func(ctx context.Context, e *invocation) error {
		keys, err := e.secretKeys()
		if err != nil {
			return err
		}
		retired, err := auth.NewOps(e.db, keys).RetireUnreadableSigningKeys(ctx, audit.CLI)
		if err != nil {
			return fmt.Errorf("secrets recover: %w", err)
		}
		if len(retired) == 0 {
			fmt.Fprintln(e.stdout, "signing keys: every one opens with the configured keys; none retired")
		} else {
			tokens, err := auth.NewStore(e.db).ListServiceTokens(ctx)
			if err != nil {
				return fmt.Errorf("secrets recover: %w", err)
			}
			active, now := 0, time.Now()
			for _, st := range tokens {
				if slices.Contains(retired, st.KID) && st.RevokedAt == nil && (st.ExpiresAt == nil || st.ExpiresAt.After(now)) {
					active++
				}
			}
			fmt.Fprintf(e.stdout, "signing keys: retired %d that no configured key opens (%s); the service tokens they signed "+
				"(%d active) keep working, and tokens issue signs with a new key\n", len(retired), strings.Join(retired, ", "), active)
		}
		return sealWebhookSecrets(ctx, e, keys, true)
	}
}

// sealWebhookSecrets seals the webhook endpoints' secrets with the
// current secret key (events.SealSecrets) and says what it did, and which
// endpoints' secrets no configured key opens; with always, it says what
// it found even when there is no endpoint.
func sealWebhookSecrets(ctx context.Context, e *invocation, keys *auth.SecretKeys, always bool) error {
	n, unopened, err := events.SealSecrets(ctx, e.db, keys)
	if err != nil {
		return err
	}
	all, err := page.All(ctx, func(ctx context.Context, r page.Request) (page.Page[events.Endpoint], error) {
		return events.NewStore(e.db).Endpoints(ctx, "", r)
	})
	if err != nil {
		return err
	}
	if n > 0 {
		fmt.Fprintf(e.stdout, "webhook endpoint secrets: sealed those of %d endpoints with the current secret key\n", n)
	}
	if already := len(all) - n - len(unopened); already > 0 || (always && n == 0 && len(unopened) == 0) {
		fmt.Fprintf(e.stdout, "webhook endpoint secrets: %d already sealed with the current key\n", max(already, 0))
	}
	if len(unopened) > 0 {
		fmt.Fprintf(e.stderr, "webhook endpoint secrets: those of %d endpoints are sealed with a key that is not configured, "+
			"and their deliveries wait: %s. Set that key in TOLLGATE_SECRET_KEY_PREVIOUS and run `admin secrets reseal`; "+
			"if it is lost, give each endpoint a new secret (`admin webhooks rotate-secret --endpoint <id>`) and pass it on to its receiver\n",
			len(unopened), strings.Join(unopened, ", "))
	}
	return nil
}
