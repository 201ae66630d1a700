package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestMigrateAllDownAndSchemaGuard applies every migration, rolls all back, and
// applies them again: each down file must undo its up file completely.
func TestMigrateAllDownAndSchemaGuard(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	want := postgres.SchemaVersion()
	if v, _, _ := postgres.Version(ctx, db); v != want {
		t.Fatalf("fresh test database at %d, want %d", v, want)
	}
	testenv.Must(t, postgres.MigrateDown(db, 0))
	var tables int
	testenv.Must(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'
		AND tablename <> 'schema_migrations'`).Scan(&tables))
	if tables != 0 {
		t.Errorf("%d tables left after migrating all the way down", tables)
	}
	err := postgres.CheckSchema(ctx, db)
	if err == nil || !strings.Contains(err.Error(), "migrate up") {
		t.Errorf("CheckSchema on an empty schema = %v, want advice to run migrate up", err)
	}
	testenv.Must(t, postgres.MigrateUp(db))
	testenv.Must(t, postgres.CheckSchema(ctx, db))
	// One step at a time, down and up again.
	for range postgres.MigrationVersions() {
		testenv.Must(t, postgres.MigrateDown(db, 1))
	}
	testenv.Must(t, postgres.MigrateUp(db))
	if v, dirty, err := postgres.Version(ctx, db); err != nil || dirty || v != want {
		t.Errorf("after up-down-up: version %d dirty %v err %v, want %d clean", v, dirty, err, want)
	}
}

func TestCheckSchemaNewerDatabase(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	_, err := db.Exec(ctx, `UPDATE schema_migrations SET version = version + 1`)
	testenv.Must(t, err)
	err = postgres.CheckSchema(ctx, db)
	if err == nil || !strings.Contains(err.Error(), "newer than this binary") {
		t.Errorf("CheckSchema = %v, want a newer-schema error", err)
	}
}
