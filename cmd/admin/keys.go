package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/tenants"
)

func keysIssue(fs *flag.FlagSet) action {
	tenant := tenantFlag(fs, "tenant ID or name (required)")
	name := fs.String("name", "", "a name for the key")
	ttl := fs.Duration("expires-in", 0, "expire the key after this long (e.g. 720h); 0 = never")
	asJSON := fs.Bool("json", false, "print the key record and secret as JSON")
	count := fs.Int("count", 1, "issue this many keys, one secret per line (for load tests)")
	return func(ctx context.Context, e *invocation) error {
		if *count < 1 || *count > 100_000 {
			return errors.New("keys issue: --count must be from 1 to 100000")
		}
		t, err := tenant.get(ctx, e)
		if err != nil {
			return fmt.Errorf("keys issue: %w", err)
		}
		in := tenants.CreateKeyInput{Name: *name, Unlimited: true}
		if *ttl > 0 {
			at := time.Now().Add(*ttl)
			in.ExpiresAt = &at
		}
		ops := tenants.NewOps(e.db, nil)
		var res tenants.IssuedKey
		for i := range *count {
			res, err = ops.CreateKey(ctx, audit.CLI, t.ID, in)
			if err != nil || i == *count-1 {
				break
			}
			fmt.Fprintln(e.stdout, res.Secret)
		}
		if err != nil {
			return fmt.Errorf("keys issue: %w", err)
		}
		if *asJSON {
			return printJSON(e.stdout, map[string]any{"secret": res.Secret, "key": res.Key})
		}
		fmt.Fprintf(e.stdout, "%s\n", res.Secret)
		fmt.Fprintf(e.stderr, "key %s (%s…) issued for tenant %s (the check API takes it within a second); the secret above is not shown again\n", res.Key.ID, res.Key.Prefix, t.Name)
		return nil
	}
}

func keysRevoke(fs *flag.FlagSet) action {
	return revokeAction(fs, "key ID", "key's", func(ctx context.Context, e *invocation, id string) (tenants.Key, bool, error) {
		k, err := tenants.NewStore(e.db).KeyByID(ctx, id)
		if err != nil {
			return tenants.Key{}, false, err
		}
		after, err := tenants.NewOps(e.db, nil).RevokeKey(ctx, audit.CLI, k.TenantID, k.ID)
		return after, k.RevokedAt != nil, err
	}, func(k tenants.Key) (string, *time.Time) {
		return fmt.Sprintf("key %s (%s…)", k.ID, k.Prefix), k.RevokedAt
	}, "checks with it are denied within a second")
}

func keysList(fs *flag.FlagSet) action {
	tenant := tenantFlag(fs, "tenant ID or name (default: every tenant)")
	asJSON := fs.Bool("json", false, "print the key records as a JSON array")
	return func(ctx context.Context, e *invocation) error {
		ts := tenants.NewStore(e.db)
		tenantID, err := optionalTenantID(ctx, e, tenant)
		if err != nil {
			return fmt.Errorf("keys list: %w", err)
		}
		list, err := ts.ListKeys(ctx, tenantID)
		if err != nil {
			return fmt.Errorf("keys list: %w", err)
		}
		names, err := tenantNames(ctx, e)
		if err != nil {
			return fmt.Errorf("keys list: %w", err)
		}
		now := time.Now()
		return printList(e.stdout, *asJSON, list, []string{"ID", "PREFIX", "TENANT", "NAME", "STATUS", "CREATED",
			"EXPIRES", "LAST USED"}, func(k tenants.Key) []string {
			return []string{k.ID, k.Prefix + "…", names[k.TenantID], k.Name, keyStatus(k, now),
				timeCell(&k.CreatedAt), timeCell(k.ExpiresAt), timeCell(k.LastUsedAt)}
		})
	}
}

// tenantNames maps every tenant's ID to its name, for tables.
func tenantNames(ctx context.Context, e *invocation) (map[string]string, error) {
	return namesByID(ctx, tenants.NewStore(e.db).List, func(t tenants.Tenant) (string, string) { return t.ID, t.Name })
}

// keyStatus is "revoked", "expired" or "active" at now.
func keyStatus(k tenants.Key, now time.Time) string {
	switch {
	case k.RevokedAt != nil && !k.RevokedAt.After(now):
		return "revoked"
	case k.ExpiresAt != nil && !k.ExpiresAt.After(now):
		return "expired"
	}
	return "active"
}
