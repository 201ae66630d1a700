package events

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testenv"
)

// TestEventsCountedOnceAsWritten: tollgate_events_total counts each event
// written after the process started once, when it is a minute old, by
// reading only the events since the previous scrape; the events before
// the start are not counted.
func TestEventsCountedOnceAsWritten(t *testing.T) {
	db := testenv.DB(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := NewMetrics(db).outbox
	c.now = func() time.Time { return now }
	write := func(typ string, at time.Time) {
		t.Helper()
		_, err := insertEvent(ctx, db, Event{Type: typ, CreatedAt: at, Data: map[string]any{}})
		testenv.Must(t, err)
	}
	count := func() map[string]int64 {
		t.Helper()
		got, err := c.countEvents(ctx)
		testenv.Must(t, err)
		return got
	}
	write(KeyRevoked, now.Add(-2*time.Minute)) // before the start
	if got := count(); len(got) != len(Types) || got[KeyRevoked] != 0 {
		t.Fatalf("first scrape: %v, want every type at 0", got)
	}
	write(KeyRevoked, now.Add(-30*time.Second)) // committed late: counted next time
	write(KeyRevoked, now.Add(10*time.Second))
	write(WebhookTest, now.Add(20*time.Second))
	now = now.Add(90 * time.Second)
	if got := count(); got[KeyRevoked] != 2 || got[WebhookTest] != 1 {
		t.Errorf("second scrape: key.revoked %d, webhook.test %d; want 2 and 1", got[KeyRevoked], got[WebhookTest])
	}
	now = now.Add(time.Minute)
	if got := count(); got[KeyRevoked] != 2 || got[WebhookTest] != 1 {
		t.Errorf("third scrape: key.revoked %d, webhook.test %d; want still 2 and 1", got[KeyRevoked], got[WebhookTest])
	}
}
