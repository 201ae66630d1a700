package usage

import "testing"

// TestRangesWidenToTheCoarsestTable: ranges widen to whole minutes, then
// read the coarsest table that answers exactly.
func TestRangesWidenToTheCoarsestTable(t *testing.T) {
	for _, c := range []struct {
		from, to string
		g        Granularity
		wantTo   string
	}{
		{"2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z", GranularityMonth, "2026-11-01T00:00:00Z"},
		{"2026-10-02T00:00:00Z", "2026-10-05T00:00:00Z", GranularityDay, "2026-10-05T00:00:00Z"},
		{"2026-10-02T03:00:00Z", "2026-10-05T00:00:00Z", GranularityHour, "2026-10-05T00:00:00Z"},
		{"2026-10-02T03:00:10Z", "2026-10-02T03:30:01Z", GranularityMinute, "2026-10-02T03:31:00Z"},
		{"2026-10-02T03:00:00Z", "2026-10-02T03:59:01Z", GranularityHour, "2026-10-02T04:00:00Z"},
	} {
		g, r := Range{mustTime(t, c.from), mustTime(t, c.to)}.coarsest()
		if g != c.g || !r.To.Equal(mustTime(t, c.wantTo)) {
			t.Errorf("%s–%s: %s to %s, want %s to %s", c.from, c.to, g, r.To, c.g, c.wantTo)
		}
	}
}
