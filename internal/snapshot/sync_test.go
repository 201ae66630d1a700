package snapshot

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testenv"
)

// TestSyncReloadsDuringANotificationStorm: a steady stream of change
// notifications (one per key issued, say) must not postpone reloads: each
// burst is coalesced within a fixed window.
func TestSyncReloadsDuringANotificationStorm(t *testing.T) {
	db := testenv.DB(t)
	h := NewHolder(NewPostgresSource(db), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Sync(ctx, db, time.Hour) }()
	defer func() { cancel(); <-done }()

	testenv.WaitFor(t, 5*time.Second, "first load", func() bool { return h.reloads.Load() >= 1 })
	before := h.reloads.Load()
	// A notification every time Eventually polls (every 10 ms) for up to
	// a second: at least a few reloads (each at most 50 ms after its
	// burst began), not none, however steadily they keep coming.
	testenv.Eventually(t, time.Now(), time.Second, "several reloads during a storm of notifications", func() (bool, string) {
		_, err := db.Exec(context.Background(), "SELECT pg_notify('tollgate_changes', 'storm')")
		testenv.Must(t, err)
		got := h.reloads.Load() - before
		return got >= 3, fmt.Sprintf("%d reloads", got)
	})
}
