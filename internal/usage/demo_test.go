package usage

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestSeedDemo makes up demo usage twice: the rollups agree with each
// other (hours sum the minutes where there are minutes, days the hours,
// months the days), a second run at the same time adds nothing, and a run
// an hour later adds that hour only.
func TestSeedDemo(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 20, 14, 30, 0, 0, time.UTC)
	s, db := newStore(t, now.Format(time.RFC3339))
	tenant := "0aaf1c8e-5a6b-4c3d-8e9f-0a1b2c3d4e5f"
	keys := []string{"1aaf1c8e-5a6b-4c3d-8e9f-0a1b2c3d4e5f", "2aaf1c8e-5a6b-4c3d-8e9f-0a1b2c3d4e5f"}
	demo := []DemoTenant{{TenantID: tenant, KeyIDs: keys, Resources: []string{"GET /a", "POST /b"}, PerHour: 600,
		DenyRule: "hourly", DenyRate: 0.05}}
	anon := DemoAnonymous{IPs: []string{"203.0.113.7", "2001:db8::5"}, PerHour: 30, DenyRule: "hourly"}
	n, err := s.SeedDemo(ctx, demo, anon, now)
	testenv.Must(t, err)
	if want := 30*24 + 1; n != want { // 30 days back from the current hour, which is under way
		t.Errorf("first run added %d hours, want %d", n, want)
	}
	hour, day, month := sums(t, db, "usage_hour"), sums(t, db, "usage_day"), sums(t, db, "usage_month")
	if !reflect.DeepEqual(hour, day) || !reflect.DeepEqual(day, month) {
		t.Errorf("rollups disagree:\nhour  %v\nday   %v\nmonth %v", hour, day, month)
	}
	if len(hour) != 3 { // two keys and the anonymous callers
		t.Errorf("usage of %d tenant/key pairs, want 3: %v", len(hour), hour)
	}
	var minutes, hours metering.Counts
	from := now.Truncate(time.Hour).Add(-3*time.Hour + time.Hour) // minute rows cover the last three hours
	testenv.Must(t, db.QueryRow(ctx, `SELECT sum(allowed), sum(denied) FROM usage_minute WHERE bucket_start >= $1`, from).
		Scan(&minutes.Allowed, &minutes.Denied))
	testenv.Must(t, db.QueryRow(ctx, `SELECT sum(allowed), sum(denied) FROM usage_hour WHERE bucket_start >= $1`, from).
		Scan(&hours.Allowed, &hours.Denied))
	if minutes != hours || minutes.Allowed == 0 || minutes.Denied == 0 {
		t.Errorf("the last hours: minutes %+v, hours %+v", minutes, hours)
	}
	// The totals of every tenant by minute and by hour agree with the rows.
	for _, tables := range [][2]string{{"usage_total_minute", "usage_minute"}, {"usage_total_hour", "usage_hour"}} {
		var total, rows metering.Counts
		testenv.Must(t, db.QueryRow(ctx, `SELECT sum(allowed), sum(denied) FROM `+tables[0]).Scan(&total.Allowed, &total.Denied))
		testenv.Must(t, db.QueryRow(ctx, `SELECT sum(allowed), sum(denied) FROM `+tables[1]).Scan(&rows.Allowed, &rows.Denied))
		if total != rows || total.Allowed == 0 {
			t.Errorf("%s %+v, %s %+v", tables[0], total, tables[1], rows)
		}
	}
	ips, err := s.TopIPs(ctx, Range{From: now.Add(-24 * time.Hour), To: now}, 10)
	testenv.Must(t, err)
	if len(ips.Top) != 2 {
		t.Errorf("top anonymous addresses: %+v", ips)
	}

	if n, err := s.SeedDemo(ctx, demo, anon, now); err != nil || n != 0 {
		t.Errorf("second run at the same time added %d hours (%v), want none", n, err)
	}
	if after := sums(t, db, "usage_hour"); !reflect.DeepEqual(after, hour) {
		t.Errorf("second run changed the usage: %v, was %v", after, hour)
	}
	if n, err := s.SeedDemo(ctx, demo, anon, now.Add(time.Hour)); err != nil || n != 1 {
		t.Errorf("a run an hour later added %d hours (%v), want 1", n, err)
	}
}
