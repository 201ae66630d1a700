package tenants_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

func TestKeyExpiringSevenDaysAndOneDayBefore(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	t0 := time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)
	key := func(name string, expires time.Time) string {
		t.Helper()
		_, k, err := f.ts.IssueKey(ctx, f.acme.ID, name, &expires)
		testenv.Must(t, err)
		return k.ID
	}
	ten := key("ten-days", t0.Add(10*24*time.Hour))
	key("twenty-hours", t0.Add(20*time.Hour))
	revoked := key("revoked", t0.Add(2*24*time.Hour))
	rotated := key("rotated", t0.Add(2*24*time.Hour))
	_, err := f.db.Exec(ctx, `UPDATE api_keys SET revoked_at = $2 WHERE id = $1`, revoked, t0)
	testenv.Must(t, err)
	_, err = f.db.Exec(ctx, `UPDATE api_keys SET rotated_at = $2 WHERE id = $1`, rotated, t0)
	testenv.Must(t, err)

	told := func() string {
		t.Helper()
		rows, err := f.db.Query(ctx, `SELECT data FROM events WHERE type = $1 ORDER BY created_at, id`, tenants.EventKeyExpiring)
		testenv.Must(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var d tenants.KeyExpiringData
			var raw []byte
			testenv.Must(t, rows.Scan(&raw))
			testenv.Must(t, json.Unmarshal(raw, &d))
			out = append(out, fmt.Sprintf("%s/%d", d.Name, d.DaysLeft))
		}
		return fmt.Sprint(out)
	}
	run := func(at time.Time, wantNew int, want string) {
		t.Helper()
		n, err := tenants.NotifyExpiringKeys(ctx, f.db, at)
		testenv.Must(t, err)
		if got := told(); n != wantNew || got != want {
			t.Fatalf("at %s: %d new, told %s; want %d new, %s", at.Format(time.RFC3339), n, got, wantNew, want)
		}
	}
	// Within a day already: the 1-day notice only.
	run(t0, 1, "[twenty-hours/1]")
	run(t0.Add(time.Hour), 0, "[twenty-hours/1]")
	// 7 days before the ten-day key: not a minute early.
	run(t0.Add(3*24*time.Hour-time.Minute), 0, "[twenty-hours/1]")
	run(t0.Add(3*24*time.Hour), 1, "[twenty-hours/1 ten-days/7]")
	run(t0.Add(5*24*time.Hour), 0, "[twenty-hours/1 ten-days/7]")
	run(t0.Add(9*24*time.Hour), 1, "[twenty-hours/1 ten-days/7 ten-days/1]")
	run(t0.Add(9*24*time.Hour+time.Minute), 0, "[twenty-hours/1 ten-days/7 ten-days/1]")
	// An extended expiry is told anew.
	_, err = f.db.Exec(ctx, `UPDATE api_keys SET expires_at = $2 WHERE id = $1`, ten, t0.Add(30*24*time.Hour))
	testenv.Must(t, err)
	run(t0.Add(23*24*time.Hour), 1, "[twenty-hours/1 ten-days/7 ten-days/1 ten-days/7]")

	// Six admin processes at once: one event.
	crowd := key("crowded", t0.Add(40*24*time.Hour))
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := tenants.NotifyExpiringKeys(ctx, f.db, t0.Add(33*24*time.Hour))
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	var n int
	testenv.Must(t, f.db.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = $1 AND data->>'key_id' = $2`,
		tenants.EventKeyExpiring, crowd).Scan(&n))
	if n != 1 || total != 1 {
		t.Errorf("6 concurrent runs: %d events, %d reported; want 1", n, total)
	}
}
