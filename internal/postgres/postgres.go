// Package postgres opens Tollgate's connection pool, runs the embedded
// migrations and checks that the schema is the one a binary expects.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/tollgate/tollgate/migrations"
)

// Open connects to url and verifies the connection.
func Open(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse TOLLGATE_DATABASE_URL: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect to %s: %w", redactURL(url), err)
	}
	return pool, nil
}

// redactURL drops the password from a connection URL for messages.
func redactURL(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "the database"
	}
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

// Conn is what stores run SQL on: a *pgxpool.Pool, or a pgx.Tx when a
// change must commit together with something else (an audit entry).
type Conn interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Tx runs fn in a transaction: committed when fn returns nil, rolled back
// otherwise. On a pgx.Tx, the transaction is a savepoint of it.
func Tx(ctx context.Context, db Conn, fn func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: commit: %w", err)
	}
	return nil
}

// SchemaVersion is the migration version this build expects: the highest
// numbered file in migrations/.
func SchemaVersion() uint {
	entries, _ := fs.ReadDir(migrations.FS, ".")
	var max uint
	for _, e := range entries {
		n, err := strconv.ParseUint(strings.SplitN(e.Name(), "_", 2)[0], 10, 32)
		if err == nil && uint(n) > max {
			max = uint(n)
		}
	}
	return max
}

func newMigrate(pool *pgxpool.Pool, files fs.FS) (*migrate.Migrate, func(), error) {
	src, err := iofs.New(files, ".")
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: migrations: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	drv, err := migratepgx.WithInstance(db, &migratepgx.Config{})
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("postgres: migrate driver: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	return m, func() { m.Close() }, nil
}

// MigrateUp applies every pending migration. A migration Postgres
// refuses is a *MigrationError.
func MigrateUp(pool *pgxpool.Pool) error { return migrateUp(pool, migrations.FS) }

// migrateUp applies every pending migration of files.
func migrateUp(pool *pgxpool.Pool, files fs.FS) error {
	return withMigrate(pool, files, "up", func(m *migrate.Migrate) error { return m.Up() })
}

// MigrateDown rolls back steps migrations (all of them when steps <= 0).
func MigrateDown(pool *pgxpool.Pool, steps int) error {
	return withMigrate(pool, migrations.FS, "down", func(m *migrate.Migrate) error {
		if steps <= 0 {
			return m.Down()
		}
		return m.Steps(-steps)
	})
}

// MigrateDownTo rolls a schema at SchemaVersion back to version, the
// last migration left applied: one step per migration above it (the
// numbers may have gaps). Nothing when version is the latest.
func MigrateDownTo(pool *pgxpool.Pool, version uint) error {
	steps := 0
	for _, v := range MigrationVersions() {
		if v > version {
			steps++
		}
	}
	if steps == 0 {
		return nil
	}
	return MigrateDown(pool, steps)
}

// MigrateForce records version as the schema's version and clears the
// dirty flag, running nothing: for after a failed migration was undone by
// hand. Version 0 means "no migration applied".
func MigrateForce(pool *pgxpool.Pool, version int) error {
	v := version
	if v == 0 {
		v = -1 // golang-migrate's "no version"
	}
	return withMigrate(pool, migrations.FS, fmt.Sprintf("force %d", version), func(m *migrate.Migrate) error { return m.Force(v) })
}

// withMigrate runs step on a migrator of pool's database with the
// migrations in files, and closes it. Nothing to do (migrate.ErrNoChange)
// is no error; another error is wrapped as "postgres: migrate <what>", a
// migration Postgres refused as a *MigrationError.
func withMigrate(pool *pgxpool.Pool, files fs.FS, what string, step func(*migrate.Migrate) error) error {
	m, done, err := newMigrate(pool, files)
	if err != nil {
		return err
	}
	defer done()
	if err := step(m); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("postgres: migrate %s: %w", what, migrationError(files, err))
	}
	return nil
}

// Version reports the database's schema version (0 when none applied) and
// whether a migration failed half-way.
func Version(ctx context.Context, pool *pgxpool.Pool) (version uint, dirty bool, err error) {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, false, fmt.Errorf("postgres: schema version: %w", err)
	}
	if !exists {
		return 0, false, nil
	}
	var v int64
	err = pool.QueryRow(ctx, `SELECT version, dirty FROM schema_migrations LIMIT 1`).Scan(&v, &dirty)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("postgres: schema version: %w", err)
	}
	return uint(v), dirty, nil
}

// ErrSchemaMismatch is what CheckSchema's errors are (errors.Is): the
// database answered, and its schema is not the one this binary expects.
var ErrSchemaMismatch = errors.New("postgres: the database schema is not the one this binary expects")

// schemaError is a CheckSchema error: its message says what to run.
type schemaError string

func (e schemaError) Error() string        { return string(e) }
func (e schemaError) Is(target error) bool { return target == ErrSchemaMismatch }

// CheckSchema returns an error that says what to run unless the database is
// exactly at SchemaVersion and clean: ErrSchemaMismatch (errors.Is), or
// the error of a database that did not answer.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool) error {
	v, dirty, err := Version(ctx, pool)
	if err != nil {
		return err
	}
	want := SchemaVersion()
	switch {
	case dirty:
		return schemaError(fmt.Sprintf("database schema version %d is dirty (a migration failed half-way): finish or undo it by hand, then record the version the schema now matches: `admin migrate force %d` if finished, `admin migrate force %d` if undone (then migrate up); see the README, Operations", v, v, int(v)-1))
	case v < want:
		return schemaError(fmt.Sprintf("database schema is at version %d but this binary expects %d: run `admin migrate up`", v, want))
	case v > want:
		return schemaError(fmt.Sprintf("database schema is at version %d, newer than this binary's %d: run the binary that matches it, or roll the schema back with that newer binary (`admin migrate down N`) before running this one", v, want))
	}
	return nil
}

// SchemaCheck is CheckSchema for readiness probes, which every load
// balancer and orchestrator asks every few seconds: it asks the database
// at most once per its interval and answers from the last answer in
// between, so its answer is at most that old. A database that does not
// answer is not remembered: the next call asks again. Safe for concurrent
// use.
type SchemaCheck struct {
	pool  *pgxpool.Pool
	every time.Duration
	now   func() time.Time

	mu     sync.Mutex
	asked  time.Time // when the remembered answer was given; zero: never
	answer error
}

// NewSchemaCheck returns a check of pool's schema that asks at most once
// every interval.
func NewSchemaCheck(pool *pgxpool.Pool, every time.Duration) *SchemaCheck {
	return &SchemaCheck{pool: pool, every: every, now: time.Now}
}

// Check returns nil when the schema is the one this binary expects,
// ErrSchemaMismatch (errors.Is, its message saying what to run) when it
// is not, or the error of a database that did not answer.
func (c *SchemaCheck) Check(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if !c.asked.IsZero() && now.Sub(c.asked) < c.every {
		return c.answer
	}
	err := CheckSchema(ctx, c.pool)
	if err != nil && !errors.Is(err, ErrSchemaMismatch) {
		return err
	}
	c.asked, c.answer = now, err
	return err
}

// MigrationVersions lists the versions embedded in this build, ascending.
func MigrationVersions() []uint {
	entries, _ := fs.ReadDir(migrations.FS, ".")
	seen := map[uint]bool{}
	var out []uint
	for _, e := range entries {
		n, err := strconv.ParseUint(strings.SplitN(e.Name(), "_", 2)[0], 10, 32)
		if err == nil && !seen[uint(n)] {
			seen[uint(n)] = true
			out = append(out, uint(n))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
