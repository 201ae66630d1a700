package enforce_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate"

	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
)

type fakeToucher struct {
	calls []map[string]time.Time
	err   error
}

func (f *fakeToucher) TouchKeys(_ context.Context, usedAt map[string]time.Time) error {
	f.calls = append(f.calls, usedAt)
	return f.err
}

func TestLastUsedBatchesAndRetries(t *testing.T) {
	ctx := context.Background()
	store := &fakeToucher{}
	l := enforce.NewLastUsed(store, nil)
	base := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for _, ev := range []tollgate.UsageEvent{
		{KeyID: "a", AtUS: base + 5},
		{KeyID: "a", AtUS: base + 3}, // out of order: the latest use wins
		{KeyID: "b", AtUS: base + 1},
		{AtUS: base + 9}, // anonymous: nothing to note
	} {
		l.Record(ev)
	}
	testenv.Must(t, l.Flush(ctx))
	if len(store.calls) != 1 {
		t.Fatalf("%d writes, want 1", len(store.calls))
	}
	got := store.calls[0]
	if len(got) != 2 || got["a"].UnixMicro() != base+5 || got["b"].UnixMicro() != base+1 {
		t.Errorf("written %v", got)
	}
	testenv.Must(t, l.Flush(ctx))
	if len(store.calls) != 1 {
		t.Errorf("an empty flush wrote: %d writes", len(store.calls))
	}

	store.err = errors.New("postgres down")
	l.Record(tollgate.UsageEvent{KeyID: "c", AtUS: base + 7})
	if err := l.Flush(ctx); err == nil {
		t.Fatal("Flush hid the store error")
	}
	if l.Pending() != 1 {
		t.Fatalf("pending after a failed flush = %d, want 1 (kept for retry)", l.Pending())
	}
	store.err = nil
	testenv.Must(t, l.Flush(ctx))
	if last := store.calls[len(store.calls)-1]; last["c"].UnixMicro() != base+7 {
		t.Errorf("retry wrote %v", last)
	}
}

// TestLastUsedRunFlushesAtShutdown runs the background writer against
// Postgres and stops it: the keys noted before the stop are written.
func TestLastUsedRunFlushesAtShutdown(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	tenant := fixture.Tenant(t, db, "acme", fixture.Plan(t, db, plans.Plan{Name: "free"}).ID)
	_, k := fixture.Key(t, db, tenant.ID, "")
	ts := tenants.NewStore(db)

	l := enforce.NewLastUsed(ts, nil)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.Run(runCtx, time.Hour) }()
	used := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	l.Record(tollgate.UsageEvent{KeyID: k.ID, AtUS: used.UnixMicro()})
	stop()
	<-done

	got, err := ts.GetKey(ctx, tenant.ID, k.ID)
	testenv.Must(t, err)
	if got.LastUsedAt == nil || !got.LastUsedAt.Equal(used) {
		t.Errorf("last_used_at = %v, want %v", got.LastUsedAt, used)
	}
}
