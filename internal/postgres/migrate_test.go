package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

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
	for _, table := range []string{"users", "admin_sessions", "tenant_rule_overrides", "audit_log",
		"quota_crossings", "events", "webhook_endpoints", "webhook_deliveries",
		"credit_plan_settings", "credit_accounts", "credit_grants", "credit_ledger", "credit_hours", "plan_billing", "credit_regions", "credit_idempotency_keys"} {
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
	for _, table := range []string{"plans", "tenants", "api_keys", "users", "audit_log",
		"quota_crossings", "events", "webhook_endpoints", "webhook_deliveries",
		"credit_plan_settings", "credit_accounts", "credit_grants", "credit_ledger", "credit_hours", "plan_billing", "credit_regions", "credit_idempotency_keys"} {
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

// TestRoutesMigrationMapsUsageKeepingTotals writes usage by raw path at
// schema v6 and migrates up through v7: query strings are cut off, each tenant's
// month keeps its 200 resources with the most units and folds the rest
// into (other), and every total per tenant, key, tier, reason and bucket
// stays what it was, in every rollup.
func TestRoutesMigrationMapsUsageKeepingTotals(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	// Down to the version before the routes migration (7), whatever
	// migrations came after it.
	const routes = 8
	steps := 0
	for _, v := range postgres.MigrationVersions() {
		if v >= routes {
			steps++
		}
	}
	testenv.Must(t, postgres.MigrateDown(db, steps))
	wantVersion(t, db, routes-1)
	_, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS usage_minute_202611 PARTITION OF usage_minute
		FOR VALUES FROM ('2026-11-01T00:00:00Z') TO ('2026-12-01T00:00:00Z')`)
	testenv.Must(t, err)
	tenantA, tenantB := "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"
	key := "00000000-0000-4000-8000-000000000011"
	insert := func(tenant, resource, reason string, allowed, units int64) {
		t.Helper()
		for table, bucket := range map[string]string{"usage_minute": "2026-11-03T10:07:00Z", "usage_hour": "2026-11-03T10:00:00Z",
			"usage_day": "2026-11-03T00:00:00Z", "usage_month": "2026-11-01T00:00:00Z"} {
			_, err := db.Exec(ctx, `INSERT INTO `+table+` (tenant_id, bucket_start, key_id, tier, resource, reason, denied_by,
				allowed, denied, allowed_units, denied_units) VALUES ($1, $2, $3, 'authenticated', $4, $5, '', $6, 1, $7, 2)`,
				tenant, bucket, key, resource, reason, allowed, units)
			testenv.Must(t, err)
		}
	}
	// Tenant A: 260 paths, the first 10 of them also with query strings.
	for i := range 260 {
		insert(tenantA, fmt.Sprintf("GET /items/%d", i), "ok", 1, int64(1000-i))
		if i < 10 {
			insert(tenantA, fmt.Sprintf("GET /items/%d?page=2", i), "ok", 1, 3)
			insert(tenantA, fmt.Sprintf("GET /items/%d?page=2#top", i), "rate_limited", 2, 4)
		}
	}
	insert(tenantA, "(other)", "ok", 5, 5)
	// Tenant B: few resources, one with a query string.
	insert(tenantB, "GET /repos", "ok", 7, 7)
	insert(tenantB, "GET /repos?x=1", "ok", 1, 1)
	totals := func(table string) string {
		t.Helper()
		var s string
		testenv.Must(t, db.QueryRow(ctx, `SELECT string_agg(x, ';' ORDER BY x) FROM (
			SELECT concat_ws(',', tenant_id, bucket_start, key_id, tier, reason, sum(allowed), sum(denied),
				sum(allowed_units), sum(denied_units)) x
			FROM `+table+` GROUP BY tenant_id, bucket_start, key_id, tier, reason) y`).Scan(&s))
		return s
	}
	tables := []string{"usage_minute", "usage_hour", "usage_day", "usage_month"}
	before := map[string]string{}
	for _, table := range tables {
		before[table] = totals(table)
	}

	testenv.Must(t, postgres.MigrateUp(db))
	for _, table := range tables {
		if got := totals(table); got != before[table] {
			t.Errorf("%s: totals changed:\n%s\nwant\n%s", table, got, before[table])
		}
		var namedA, namedB, queries int
		var otherUnits, items0 int64
		testenv.Must(t, db.QueryRow(ctx, `SELECT
			count(DISTINCT resource) FILTER (WHERE tenant_id = $1 AND resource <> '(other)'),
			count(DISTINCT resource) FILTER (WHERE tenant_id = $2),
			count(*) FILTER (WHERE resource ~ '[?#]'),
			coalesce(sum(allowed_units) FILTER (WHERE tenant_id = $1 AND resource = '(other)'), 0),
			coalesce(sum(allowed_units) FILTER (WHERE tenant_id = $1 AND resource = 'GET /items/0'), 0)
			FROM `+table, tenantA, tenantB).Scan(&namedA, &namedB, &queries, &otherUnits, &items0))
		// The 60 paths with the fewest units (GET /items/200 … 259) fold.
		var wantOther int64 = 5
		for i := 200; i < 260; i++ {
			wantOther += int64(1000 - i)
		}
		if namedA != 200 || namedB != 1 || queries != 0 || otherUnits != wantOther || items0 != 1000+3+4 {
			t.Errorf("%s: tenant A %d resources, (other) %d units, GET /items/0 %d units; tenant B %d resources; %d with a query; "+
				"want 200, %d, 1007, 1, 0", table, namedA, otherUnits, items0, namedB, queries, wantOther)
		}
	}
	// And down and up again over the mapped data.
	testenv.Must(t, postgres.MigrateDown(db, steps))
	testenv.Must(t, postgres.MigrateUp(db))
}

// TestFailedMigrationSaysWhereNotWhat: a migration Postgres refuses is
// named by its version and file, with the line and column of the fault
// and Postgres's error, but not the file's text (golang-migrate's error
// carries the whole file: a terminal of SQL to find one line in). None
// of the migration is applied, as its advice says.
func TestFailedMigrationSaysWhereNotWhat(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	testenv.Must(t, postgres.MigrateDown(db, 0))
	files := fstest.MapFS{
		"1_first.up.sql":    {Data: []byte("CREATE TABLE first_table (a int);\n")},
		"1_first.down.sql":  {Data: []byte("DROP TABLE first_table;\n")},
		"2_second.down.sql": {Data: []byte("DROP TABLE made_before_the_fault;\n")},
		"2_second.up.sql": {Data: []byte("-- A long migration whose text must not be in the error.\n" +
			"CREATE TABLE made_before_the_fault (a int);\n" +
			"\n" +
			"INSERT INTO first_table (a) SELECT nope FROM first_table;\n")},
	}
	err := postgres.MigrateUpFrom(db, files)
	if err == nil {
		t.Fatal("a migration naming a column that does not exist succeeded")
	}
	msg := err.Error()
	for _, want := range []string{"postgres: migrate up: migration 2 (2_second.up.sql) failed at line 4, column 36",
		`column "nope" does not exist (SQLSTATE 42703)`, "`admin migrate force 1`"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	for _, text := range []string{"must not be in the error", "made_before_the_fault", "INSERT INTO"} {
		if strings.Contains(msg, text) {
			t.Errorf("error %q holds the migration's text (%q)", msg, text)
		}
	}
	var me *postgres.MigrationError
	if !errors.As(err, &me) || me.Version != 2 || me.Line != 4 {
		t.Errorf("error %v, want a *MigrationError of version 2 at line 4", err)
	}
	if !postgres.Is(err, "42703") {
		t.Errorf("error %v does not wrap Postgres's error", err)
	}
	if tableExists(t, db, "made_before_the_fault") {
		t.Error("the failed migration's first statement was applied; the advice says none of it is")
	}
	if v, dirty, err := postgres.Version(ctx, db); err != nil || v != 2 || !dirty {
		t.Errorf("after the failure: version %d dirty %v (%v), want 2 dirty", v, dirty, err)
	}
}

// TestSchemaCheckAsksOncePerInterval: the readiness probes' schema check
// answers what the database's schema is, asking it at most once per
// interval.
func TestSchemaCheckAsksOncePerInterval(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	clk := testenv.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	check := postgres.NewSchemaCheck(db, 5*time.Second)
	check.SetClock(clk.Now)
	testenv.Must(t, check.Check(ctx))
	testenv.Must(t, postgres.MigrateDown(db, 1))
	if err := check.Check(ctx); err != nil {
		t.Errorf("within the interval: %v, want the remembered answer (nil)", err)
	}
	clk.Advance(5 * time.Second)
	if err := check.Check(ctx); !errors.Is(err, postgres.ErrSchemaMismatch) || !strings.Contains(err.Error(), "migrate up") {
		t.Errorf("after the interval, one version behind: %v, want ErrSchemaMismatch saying to migrate up", err)
	}
	testenv.Must(t, postgres.MigrateUp(db))
	clk.Advance(5 * time.Second)
	testenv.Must(t, check.Check(ctx))
}
