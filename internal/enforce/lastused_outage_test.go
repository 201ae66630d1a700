package enforce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/testenv"
)

// flakyToucher fails while failing is set and counts its calls.
type flakyToucher struct {
	calls   atomic.Int64
	failing atomic.Bool
}

func (f *flakyToucher) TouchKeys(context.Context, map[string]time.Time) error {
	f.calls.Add(1)
	if f.failing.Load() {
		return errors.New("connection refused")
	}
	return nil
}

// TestLastUsedBacksOffWhilePostgresIsDown: with writes failing, the
// writer waits longer and longer between them instead of trying every
// interval, logs the outage once, and says when writes succeed again. Its
// waits are virtual until they add up to 800ms.
func TestLastUsedBacksOffWhilePostgresIsDown(t *testing.T) {
	store := &flakyToucher{}
	store.failing.Store(true)
	logs := &testenv.LogBuffer{}
	l := NewLastUsed(store, slog.New(slog.NewTextHandler(logs, nil)))
	sleep := testenv.NewVirtualSleep(800 * time.Millisecond)
	l.sleep = sleep.Sleep
	l.Record(tollgate.UsageEvent{KeyID: "a", AtUS: 1})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	const interval = 10 * time.Millisecond
	go func() { defer close(done); l.Run(ctx, interval) }()

	// A window to count attempts in: every 10ms would be 80.
	sleep.WaitReached(t, 10*time.Second)
	if n := store.calls.Load(); n < 2 || n > 12 {
		t.Errorf("%d writes in 800ms of failures at a 10ms interval, want a few (backing off)", n)
	}
	if got := strings.Count(logs.String(), "\n"); got != 1 {
		t.Errorf("%d log lines, want 1:\n%s", got, logs.String())
	}
	if l.Pending() != 1 {
		t.Errorf("pending = %d, want the key kept for the retry", l.Pending())
	}
	store.failing.Store(false)
	sleep.Release()
	testenv.Eventually(t, time.Now(), time.Minute, "written once Postgres was back", func() (bool, string) {
		return l.Pending() == 0 && strings.Contains(logs.String(), "postgres back"), fmt.Sprintf("%d pending, log:\n%s", l.Pending(), logs.String())
	})
	stop()
	<-done
}
