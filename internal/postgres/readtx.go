package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ReadTx runs fn in a read-only REPEATABLE READ transaction: every query
// of fn sees the same snapshot, so reports that read several tables agree
// with each other.
func ReadTx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("postgres: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only: nothing to keep
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
