package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/testenv"
)

func tableExists(t *testing.T, db *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := db.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func wantVersion(t *testing.T, db *pgxpool.Pool, want uint) {
	t.Helper()
	got, dirty, err := postgres.Version(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if got != want || dirty {
		t.Fatalf("schema version = %d (dirty %v), want %d clean", got, dirty, want)
	}
}

// TestMigrationsUpDownUp rolls every migration back one at a time and
// applies them again: each down file must undo its up file completely, or
// the second up fails.
func TestMigrationsUpDownUp(t *testing.T) {
	db := testenv.DB(t)
	versions := postgres.MigrationVersions()
	latest := versions[len(versions)-1]
	wantVersion(t, db, latest)
	for _, table := range []string{"users", "admin_sessions", "tenant_rule_overrides", "audit_log"} {
		if !tableExists(t, db, table) {
			t.Fatalf("table %s missing at version %d", table, latest)
		}
	}
	for i := len(versions) - 1; i >= 0; i-- {
		testenv.Must(t, postgres.MigrateDown(db, 1))
		if i > 0 {
			wantVersion(t, db, versions[i-1])
		}
	}
	for _, table := range []string{"plans", "tenants", "api_keys", "users", "audit_log"} {
		if tableExists(t, db, table) {
			t.Errorf("table %s survived migrating all the way down", table)
		}
	}
	testenv.Must(t, postgres.MigrateUp(db))
	wantVersion(t, db, latest)
	testenv.Must(t, postgres.CheckSchema(context.Background(), db))

	// And once more only the newest step, the one a rollback of a bad
	// release would take.
	testenv.Must(t, postgres.MigrateDown(db, 1))
	testenv.Must(t, postgres.MigrateUp(db))
	wantVersion(t, db, latest)
}
