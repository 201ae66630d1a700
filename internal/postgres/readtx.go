package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/page"
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

// Collect returns every row of a query, each read by scan, closing rows;
// err is the query's own error, so that a call reads
//
//	rows, err := db.Query(ctx, sql, args...)
//	return postgres.Collect(rows, err, scanThing, "things: list")
//
// Either error is wrapped with op, which names the operation.
func Collect[T any](rows pgx.Rows, err error, scan func(pgx.Row) (T, error), op string) ([]T, error) {
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return list, nil
}

// CollectPage returns the rows of a keyset page query, read as Collect
// reads them, as pr's page; keyOf gives an item's cursor key. The query
// must ask for pr.Fetch() rows, one more than the page holds, so that
// the page knows whether another follows.
func CollectPage[T any](pr page.Request, rows pgx.Rows, err error, scan func(pgx.Row) (T, error), op string, keyOf func(T) any) (page.Page[T], error) {
	list, err := Collect(rows, err, scan, op)
	if err != nil {
		return page.Page[T]{}, err
	}
	return page.Make(pr, list, keyOf), nil
}
