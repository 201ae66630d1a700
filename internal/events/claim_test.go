package events

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/testenv"
)

// backlog makes an endpoint (disabled when disabled is set) and n pending
// deliveries to it, due from due on, one a second; it returns the
// endpoint's ID.
func backlog(t *testing.T, db *pgxpool.Pool, disabled bool, n int, due time.Time) string {
	t.Helper()
	ctx := context.Background()
	var id string
	var disabledAt *time.Time
	if disabled {
		disabledAt = &due
	}
	testenv.Must(t, db.QueryRow(ctx, `INSERT INTO webhook_endpoints (url, secret, created_at, disabled_at, disabled_reason)
		VALUES ('https://hooks.example.com/', 'whsec_test', $1, $2, CASE WHEN $2::timestamptz IS NULL THEN '' ELSE 'manual' END)
		RETURNING id::text`, due, disabledAt).Scan(&id))
	_, err := db.Exec(ctx, `WITH ev AS (
			INSERT INTO events (id, type, created_at, data)
			SELECT 'evt_' || $1::text || '_' || i, 'webhook.test', $2::timestamptz + i * interval '1 second', '{}'
			FROM generate_series(1, $3::int) i RETURNING id, created_at)
		INSERT INTO webhook_deliveries (event_id, endpoint_id, created_at, next_attempt_at)
		SELECT id, $1::uuid, created_at, created_at FROM ev`, id, due, n)
	testenv.Must(t, err)
	return id
}

// TestClaimSkipsDisabledAndFullEndpoints: a claim leases the oldest due
// delivery of each enabled endpoint not skipped, oldest first across
// endpoints, and never reads the backlog of a disabled endpoint, nor that
// of one it skips (its slots full), however long.
func TestClaimSkipsDisabledAndFullEndpoints(t *testing.T) {
	db := testenv.DB(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const long = 20000
	disabled := backlog(t, db, true, long, now.Add(-30*24*time.Hour))
	full := backlog(t, db, false, long, now.Add(-29*24*time.Hour))
	older := backlog(t, db, false, 3, now.Add(-time.Hour))
	newer := backlog(t, db, false, 3, now.Add(-time.Minute))
	_, err := db.Exec(ctx, `ANALYZE webhook_endpoints; ANALYZE webhook_deliveries; ANALYZE events`)
	testenv.Must(t, err)

	// The claim's plan reads a handful of deliveries, not the backlogs.
	tx, err := db.Begin(ctx)
	testenv.Must(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // the claim is undone
	var plan []byte
	testenv.Must(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+claimQuery,
		now, now.Add(time.Minute), "7f000000-0000-4000-8000-000000000001", 8, []string{full}).Scan(&plan))
	var root []struct {
		Plan map[string]any `json:"Plan"`
	}
	testenv.Must(t, json.Unmarshal(plan, &root))
	if read := deliveriesRead(root[0].Plan); read > 100 {
		t.Errorf("the claim read %.0f deliveries, want at most 100 (the backlogs of %d are not to be read): %s", read, long, plan)
	}
	testenv.Must(t, tx.Rollback(ctx))

	d := NewDeliverer(DelivererConfig{DB: db, Now: func() time.Time { return now }})
	got, err := d.claim(ctx, 8, []string{full})
	testenv.Must(t, err)
	var endpoints []string
	for _, c := range got {
		endpoints = append(endpoints, c.endpoint)
	}
	if len(got) != 2 || got[0].endpoint != older || got[1].endpoint != newer {
		t.Fatalf("claimed deliveries of %v, want one of %s then one of %s (disabled %s, skipped %s)",
			endpoints, older, newer, disabled, full)
	}
	if got[0].event.ID != "evt_"+older+"_1" || got[1].event.ID != "evt_"+newer+"_1" {
		t.Errorf("claimed %s and %s, want each endpoint's oldest", got[0].event.ID, got[1].event.ID)
	}
	// Without a skip list, the full endpoint's oldest comes first; the
	// leased ones are not claimed again.
	got, err = d.claim(ctx, 1, nil)
	testenv.Must(t, err)
	if len(got) != 1 || got[0].endpoint != full || got[0].event.ID != "evt_"+full+"_1" {
		t.Fatalf("claimed %+v, want the oldest delivery of %s", got, full)
	}
	got, err = d.claim(ctx, 8, []string{full})
	testenv.Must(t, err)
	if len(got) != 2 || got[0].event.ID != "evt_"+older+"_2" || got[1].event.ID != "evt_"+newer+"_2" {
		t.Errorf("claimed %d more, want the second of %s and of %s", len(got), older, newer)
	}
}

// deliveriesRead sums, over plan's nodes reading webhook_deliveries, the
// rows they returned and those their filters removed, in every loop
// (EXPLAIN gives both per loop).
func deliveriesRead(plan map[string]any) float64 {
	var read float64
	if plan["Relation Name"] == "webhook_deliveries" {
		loops, _ := plan["Actual Loops"].(float64)
		rows, _ := plan["Actual Rows"].(float64)
		filtered, _ := plan["Rows Removed by Filter"].(float64)
		read += (rows + filtered) * loops
	}
	if joined, ok := plan["Rows Removed by Join Filter"].(float64); ok {
		loops, _ := plan["Actual Loops"].(float64)
		read += joined * loops
	}
	children, _ := plan["Plans"].([]any)
	for _, c := range children {
		if child, ok := c.(map[string]any); ok {
			read += deliveriesRead(child)
		}
	}
	return read
}
