package main

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
)

// changer makes admin changes: each in one transaction together with its
// audit entries, so that no change is ever without its record (and no
// record without its change).
type changer struct {
	db *pgxpool.Pool
}

// change runs fn in a transaction and records the changes it returns by
// actor in the same transaction. fn builds its stores on tx.
func (c changer) change(ctx context.Context, actor audit.Actor, fn func(tx pgx.Tx) ([]audit.Change, error)) error {
	return postgres.Tx(ctx, c.db, func(tx pgx.Tx) error {
		changes, err := fn(tx)
		if err != nil {
			return err
		}
		for _, ch := range changes {
			if _, err := audit.Record(ctx, tx, actor, ch); err != nil {
				return err
			}
		}
		return nil
	})
}

// one is the common case of a change that records a single entry.
func one(ch audit.Change) []audit.Change { return []audit.Change{ch} }

// keyChange describes a change to an API key (the record only: it holds
// neither the secret nor its hash).
func keyChange(action string, before, after *tenants.Key) audit.Change {
	k := after
	if k == nil {
		k = before
	}
	return audit.Change{Action: action, TargetType: "key", TargetID: k.ID, TenantID: k.TenantID,
		Before: before, After: after}
}
