// Package meteringtest has the fixtures of the tests that apply metering
// batches to Postgres and read them back (packages usage and billing):
// IDs, minutes, rows and the sums of a usage table.
package meteringtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/metering"
)

// ID returns a UUID that reads as n.
func ID(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

// At returns the Unix minute of a UTC time given as "2006-01-02T15:04".
func At(t *testing.T, s string) int64 {
	t.Helper()
	tm, err := time.Parse("2006-01-02T15:04", s)
	if err != nil {
		t.Fatal(err)
	}
	return tm.Unix()
}

// Time returns the time s (RFC 3339).
func Time(t testing.TB, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// FixedNow returns a clock stopped at s (RFC 3339).
func FixedNow(s string) func() time.Time {
	tm, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return func() time.Time { return tm }
}

// Sums reads a usage table's totals by tenant/key.
func Sums(t testing.TB, db *pgxpool.Pool, table string) map[string]metering.Counts {
	t.Helper()
	return sums(t, db, table, `tenant_id::text || '/' || key_id::text`)
}

// SumsByTier reads a usage table's totals by tenant/key/tier.
func SumsByTier(t testing.TB, db *pgxpool.Pool, table string) map[string]metering.Counts {
	t.Helper()
	return sums(t, db, table, `tenant_id::text || '/' || key_id::text || '/' || tier`)
}

// sums reads table's totals grouped by the SQL expression by.
func sums(t testing.TB, db *pgxpool.Pool, table, by string) map[string]metering.Counts {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT `+by+`,
		sum(allowed), sum(denied), sum(allowed_units), sum(denied_units) FROM `+table+` GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]metering.Counts{}
	for rows.Next() {
		var k string
		var c metering.Counts
		if err := rows.Scan(&k, &c.Allowed, &c.Denied, &c.AllowedUnits, &c.DeniedUnits); err != nil {
			t.Fatal(err)
		}
		out[k] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Row returns a row of an authenticated key's decisions, the denied ones
// by the rule "hourly".
func Row(minute int64, tenant, key, resource string, c metering.Counts) metering.Row {
	reason, deniedBy := "ok", ""
	if c.Denied > 0 {
		reason, deniedBy = "rate_limited", "hourly"
	}
	return metering.Row{Minute: minute, TenantID: tenant, KeyID: key, Tier: "authenticated", Resource: resource,
		Reason: reason, DeniedBy: deniedBy, Counts: c}
}
