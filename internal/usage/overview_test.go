package usage

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestOverallFollowsApply applies batches of two tenants and anonymous
// callers and reads every decision together, by minute, hour, day and
// month, from the totals the batches keep; a duplicate batch adds nothing.
func TestOverallFollowsApply(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t, "2026-10-15T12:00:00Z")
	a, b := "0aaf1c8e-5a6b-4c3d-8e9f-0a1b2c3d4e5f", "1aaf1c8e-5a6b-4c3d-8e9f-0a1b2c3d4e5f"
	m1, m2 := at(t, "2026-10-15T09:30"), at(t, "2026-10-15T10:05")
	batches := []metering.Batch{
		{Version: 1, ID: "o:1", Rows: []metering.Row{row(m1, a, "", "GET /a", metering.Counts{Allowed: 3, AllowedUnits: 3}),
			row(m1, b, "", "GET /a", metering.Counts{Allowed: 4, Denied: 1, AllowedUnits: 4, DeniedUnits: 1})}},
		{Version: 1, ID: "o:2", Rows: []metering.Row{row(m2, "", "", "*", metering.Counts{Allowed: 5, AllowedUnits: 5})}},
	}
	for _, batch := range append(batches, batches[0]) {
		_, err := s.Apply(ctx, batch)
		testenv.Must(t, err)
	}
	day := Range{From: time.Date(2026, 10, 15, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 10, 16, 0, 0, 0, 0, time.UTC)}
	for name, tc := range map[string]struct {
		r    Range
		want metering.Counts
	}{
		"a minute":  {Range{From: time.Unix(m1, 0), To: time.Unix(m1+60, 0)}, metering.Counts{Allowed: 7, Denied: 1, AllowedUnits: 7, DeniedUnits: 1}},
		"the day":   {day, metering.Counts{Allowed: 12, Denied: 1, AllowedUnits: 12, DeniedUnits: 1}},
		"the month": {Range{From: time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}, metering.Counts{Allowed: 12, Denied: 1, AllowedUnits: 12, DeniedUnits: 1}},
	} {
		got, err := s.Overall(ctx, tc.r)
		testenv.Must(t, err)
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", name, got, tc.want)
		}
	}
	hours, err := s.OverallSeries(ctx, GranularityHour, day)
	testenv.Must(t, err)
	if len(hours) != 24 || hours[9].Allowed != 7 || hours[10].Allowed != 5 || hours[11].Allowed != 0 {
		t.Errorf("by hour: %+v", hours)
	}
	days, err := s.OverallSeries(ctx, GranularityDay, Range{From: day.From.AddDate(0, 0, -1), To: day.To})
	testenv.Must(t, err)
	if len(days) != 2 || days[0].Allowed != 0 || days[1].Allowed != 12 || days[1].Denied != 1 {
		t.Errorf("by day: %+v", days)
	}
}
