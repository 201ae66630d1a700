package testenv

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/postgres"
)

// GoodID is a well-formed ID that names nothing.
const GoodID = "0b9f3d5e-8a44-4c1e-9d3a-5f6e7a8b9c0d"

// MalformedIDs are IDs that are not UUIDs as Postgres prints them, so name
// nothing: a store must say so without a query (see NoQueries).
var MalformedIDs = []string{
	"",
	"nope",
	"0B9F3D5E-8A44-4C1E-9D3A-5F6E7A8B9C0D", // not as Postgres prints it
	"0b9f3d5e8a444c1e9d3a5f6e7a8b9c0d",
	"0b9f3d5e-8a44-4c1e-9d3a-5f6e7a8b9c0g",
	"0b9f3d5e-8a44-4c1e-9d3a-5f6e7a8b9c0d'--",
	"0b9f3d5e-8a44-4c1e-9d3a-5f6e7a8b9c0d' OR '1'='1",
	"{0b9f3d5e-8a44-4c1e-9d3a-5f6e7a8b9c0d}",
}

// NoQueries returns a database that fails t if it is asked anything.
func NoQueries(t testing.TB) postgres.Conn { return noQueries{t} }

type noQueries struct{ t testing.TB }

func (n noQueries) fail(sql string) {
	n.t.Helper()
	n.t.Errorf("unexpected query: %s", sql)
}

func (n noQueries) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	n.fail(sql)
	return pgconn.CommandTag{}, pgx.ErrTxClosed
}

func (n noQueries) Query(_ context.Context, sql string, _ ...any) (pgx.Rows, error) {
	n.fail(sql)
	return nil, pgx.ErrTxClosed
}

func (n noQueries) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	n.fail(sql)
	return errRow{}
}

func (n noQueries) Begin(context.Context) (pgx.Tx, error) {
	n.t.Error("unexpected transaction")
	return nil, pgx.ErrTxClosed
}

type errRow struct{}

func (errRow) Scan(...any) error { return pgx.ErrTxClosed }

// NoSeqScans runs lookups in a transaction of db with sequential scans
// priced out, and fails t if they scanned a table anyway (one of tables,
// when given): a lookup by ID that compares id::text with a parameter
// would. The transaction is rolled back.
func NoSeqScans(t testing.TB, db postgres.Conn, lookups func(tx pgx.Tx), tables ...string) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	Must(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `SET LOCAL enable_seqscan = off`)
	Must(t, err)
	// The view also counts the connection's earlier transactions whose
	// counts Postgres has not flushed yet (it flushes at most once a
	// second): only what the lookups add is theirs.
	seqScans := func() map[string]int64 {
		rows, err := tx.Query(ctx, `SELECT relname, seq_scan FROM pg_stat_xact_user_tables
			WHERE seq_scan > 0 AND (coalesce(cardinality($1::text[]), 0) = 0 OR relname = ANY($1))`, tables)
		Must(t, err)
		n := map[string]int64{}
		var name string
		var scans int64
		_, err = pgx.ForEachRow(rows, []any{&name, &scans}, func() error { n[name] = scans; return nil })
		Must(t, err)
		return n
	}
	before := seqScans()
	lookups(tx)
	scanned := map[string]int64{}
	for name, n := range seqScans() {
		if n > before[name] {
			scanned[name] = n - before[name]
		}
	}
	if len(scanned) > 0 {
		t.Errorf("lookups by ID scanned tables (sequential scans by table): %v", scanned)
	}
}

// WantNotFound calls calls with each of MalformedIDs and fails t for
// every call in the map it returns (by name) whose error is not
// ENOTFOUND: an ID that is not a UUID names nothing.
func WantNotFound(t testing.TB, calls func(id string) map[string]error) {
	t.Helper()
	for _, id := range MalformedIDs {
		for name, err := range calls(id) {
			if tollgate.ErrorCode(err) != tollgate.ENOTFOUND {
				t.Errorf("%s(%q) = %v, want not_found", name, id, err)
			}
		}
	}
}
