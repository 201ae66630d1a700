package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
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

// ByID returns the row query selects by id (its $1, compared as uuid),
// read by scan. A malformed id names no row, so it is notFound without a
// query, and so is a missing row; another error is wrapped with op.
func ByID[T any](ctx context.Context, db Conn, query, id string, scan func(pgx.Row) (T, error), notFound error, op string) (T, error) {
	var zero T
	if !IsUUID(id) {
		return zero, notFound
	}
	v, err := scan(db.QueryRow(ctx, query, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return zero, notFound
	}
	if err != nil {
		return zero, fmt.Errorf("%s: %w", op, err)
	}
	return v, nil
}

// ExecByID runs query, which changes the row id names (its $1, compared
// as uuid). A malformed id, or no row changed, is notFound; another error
// is wrapped with op.
func ExecByID(ctx context.Context, db Conn, query, id string, notFound error, op string) error {
	if !IsUUID(id) {
		return notFound
	}
	tag, err := db.Exec(ctx, query, id)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if tag.RowsAffected() == 0 {
		return notFound
	}
	return nil
}

// ByName is the cursor key of a page ordered by name: the last item's.
type ByName struct {
	Name string `json:"n"`
}

// NewestFirst is the cursor key of a page ordered newest first by
// (created_at, id): the last item's creation time and ID.
type NewestFirst struct {
	CreatedAt time.Time `json:"t"`
	ID        string    `json:"i"`
}

// After decodes pr's cursor into k and reports whether there was one. A
// cursor whose ID is not a UUID is EINVALID naming "cursor": no list
// returned it.
func (k *NewestFirst) After(pr page.Request) (bool, error) {
	have, err := pr.After(k)
	if err == nil && have && !IsUUID(k.ID) {
		err = tollgate.Invalid(map[string]string{"cursor": "is not a cursor this list returned"})
	}
	return have, err
}
