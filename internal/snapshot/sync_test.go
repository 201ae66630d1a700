package snapshot

import (
	"context"
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
	stop := time.Now().Add(time.Second)
	for time.Now().Before(stop) {
		_, err := db.Exec(context.Background(), "SELECT pg_notify('tollgate_changes', 'storm')")
		testenv.Must(t, err)
		time.Sleep(5 * time.Millisecond)
	}
	// A second of notifications 5 ms apart: at least a few reloads
	// (each at most 50 ms after its burst began), not none.
	if got := h.reloads.Load() - before; got < 3 {
		t.Errorf("%d reloads during a 1 s storm, want several", got)
	}
}
