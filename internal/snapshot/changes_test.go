package snapshot

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
)

// TestChangesReloadOnlyWhatChanged: with the holder listening, issuing,
// revoking, expiring and deleting keys reloads those keys only; a change
// to a tenant reloads plans and tenants but no key; more keys changed in
// one statement than a notification names loads everything.
func TestChangesReloadOnlyWhatChanged(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	plan := fixture.Plan(t, db, plans.Plan{Name: "p", Rules: []plans.Rule{
		{Name: "hourly", Algorithm: limiter.GCRA, Limit: 100, PeriodUS: limiter.HourUS},
	}})
	tn := fixture.Tenant(t, db, "t", plan.ID)
	secret1, key1 := fixture.Key(t, db, tn.ID, "one")
	ts := tenants.NewStore(db)

	h := NewHolder(NewPostgresSource(db), nil)
	syncCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); h.Sync(syncCtx, db, time.Hour) }()
	defer func() { cancel(); <-done }()
	testenv.WaitFor(t, 5*time.Second, "first load", func() bool { return h.fullReloads.Load() >= 1 })
	full := h.fullReloads.Load()
	key := func(secret string) *Key { k, _ := h.Current().key(tenants.HashKey(secret)); return k }
	if key(secret1) == nil {
		t.Fatal("key not in the first load")
	}

	testenv.Must(t, ts.RevokeKey(ctx, key1.ID))
	testenv.WaitFor(t, time.Second, "revocation", func() bool { k := key(secret1); return k != nil && k.RevokedAtUS != 0 })

	secret2, key2 := fixture.Key(t, db, tn.ID, "two")
	testenv.WaitFor(t, time.Second, "new key", func() bool { return key(secret2) != nil })

	soon := time.Now().Add(time.Hour)
	_, err := ts.UpdateKey(ctx, tn.ID, key2.ID, tenants.KeyChange{ExpiresAt: func() **time.Time { p := &soon; return &p }()}, time.Now())
	testenv.Must(t, err)
	testenv.WaitFor(t, time.Second, "expiry", func() bool { k := key(secret2); return k != nil && k.ExpiresAtUS == soon.UnixMicro() })

	_, err = db.Exec(ctx, `DELETE FROM api_keys WHERE id = $1`, key2.ID)
	testenv.Must(t, err)
	testenv.WaitFor(t, time.Second, "deletion", func() bool { return key(secret2) == nil })

	// Last-used times change no column the snapshot reads: no reload.
	partial := h.partialReloads.Load()
	testenv.Must(t, ts.TouchKeys(ctx, map[string]time.Time{key1.ID: time.Now()}))

	_, err = ts.SetStatus(ctx, tn.ID, tenants.StatusSuspended)
	testenv.Must(t, err)
	testenv.WaitFor(t, time.Second, "suspension", func() bool {
		s := h.Current()
		k, _ := s.key(tenants.HashKey(secret1))
		return k != nil && s.tenantOf(k).Status == tenants.StatusSuspended
	})
	if got := h.partialReloads.Load() - partial; got != 1 {
		t.Errorf("%d partial reloads for a touch and a suspension, want 1 (the suspension)", got)
	}
	if got := h.fullReloads.Load(); got != full {
		t.Errorf("%d full loads after single-key and tenant changes, want still %d", got, full)
	}

	// 150 keys in one statement: more than a notification names.
	_, err = db.Exec(ctx, `INSERT INTO api_keys (tenant_id, hash, prefix)
		SELECT $1::uuid, sha256(('bulk' || g)::bytea), 'tg_bulk' FROM generate_series(1, 150) g`, tn.ID)
	testenv.Must(t, err)
	testenv.WaitFor(t, 2*time.Second, "full load after a bulk insert", func() bool { return h.fullReloads.Load() > full })
	if k := key(secret1); k == nil || k.RevokedAtUS == 0 {
		t.Errorf("after the full load: key one %+v, want it revoked", k)
	}
}

// TestSnapshotAtScale is a measurement, not a test: with TOLLGATE_MEASURE=1
// it fills a database with 100 000 tenants and 1 000 000 keys, then
// reports how long a full load takes, the heap it keeps per key, and how
// long a revocation takes to reach a listening holder.
//
//	TOLLGATE_MEASURE=1 scripts/services.sh test -- go test ./internal/snapshot/ -run TestSnapshotAtScale -v -timeout 30m
func TestSnapshotAtScale(t *testing.T) {
	if os.Getenv("TOLLGATE_MEASURE") != "1" {
		t.Skip("a measurement: set TOLLGATE_MEASURE=1 to run it")
	}
	ctx := context.Background()
	db := testenv.DB(t)
	const nTenants, nKeys = 100_000, 1_000_000
	for _, p := range plans.DemoPlans() {
		_, err := plans.NewStore(db).Put(ctx, p)
		testenv.Must(t, err)
	}
	started := time.Now()
	_, err := db.Exec(ctx, `INSERT INTO tenants (name, plan_id)
		SELECT 'scale-' || g, (SELECT id FROM plans WHERE name = 'pro') FROM generate_series(1, $1) g`, nTenants)
	testenv.Must(t, err)
	_, err = db.Exec(ctx, `INSERT INTO api_keys (tenant_id, hash, prefix, expires_at)
		SELECT t.id, sha256(('scale' || g)::bytea), 'tg_scale', CASE WHEN g % 10 = 0 THEN now() + interval '1 year' END
		FROM generate_series(1, $1) g JOIN (SELECT id, row_number() OVER () AS n FROM tenants) t ON t.n = 1 + g % $2`, nKeys, nTenants)
	testenv.Must(t, err)
	_, err = db.Exec(ctx, `ANALYZE`)
	testenv.Must(t, err)
	t.Logf("filled %d tenants and %d keys in %v", nTenants, nKeys, time.Since(started).Round(time.Millisecond))

	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for run := 1; run <= 3; run++ {
		before := heap()
		h := NewHolder(NewPostgresSource(db), nil)
		start := time.Now()
		testenv.Must(t, h.Reload(ctx))
		took := time.Since(start)
		kept := heap() - before
		s := h.Current()
		t.Logf("full load %d: %v, %d keys, heap kept %.0f MB = %.0f B per key", run, took.Round(time.Millisecond),
			len(s.keys), float64(kept)/1e6, float64(kept)/float64(len(s.keys)))
		runtime.KeepAlive(h)
	}

	h := NewHolder(NewPostgresSource(db), nil)
	syncCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); h.Sync(syncCtx, db, time.Hour) }()
	defer func() { cancel(); <-done }()
	testenv.WaitFor(t, time.Minute, "first load", func() bool { return h.fullReloads.Load() >= 1 })
	var id string
	var hash []byte
	testenv.Must(t, db.QueryRow(ctx, `SELECT id::text, hash FROM api_keys WHERE revoked_at IS NULL LIMIT 1`).Scan(&id, &hash))
	var kh tenants.KeyHash
	copy(kh[:], hash)
	for i := range 5 {
		start := time.Now()
		_, err := db.Exec(ctx, `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, id)
		testenv.Must(t, err)
		seen := time.Now()
		testenv.WaitFor(t, 10*time.Second, "revocation", func() bool { k, _ := h.Current().key(kh); return k != nil && k.RevokedAtUS != 0 })
		took := time.Since(seen)
		t.Logf("revocation %d seen after %v (from the UPDATE's start: %v)", i+1, took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		_, err = db.Exec(ctx, `UPDATE api_keys SET revoked_at = NULL WHERE id = $1`, id)
		testenv.Must(t, err)
		testenv.WaitFor(t, 10*time.Second, "reinstated", func() bool { k, _ := h.Current().key(kh); return k != nil && k.RevokedAtUS == 0 })
	}
	t.Logf("full loads %d, partial %d", h.fullReloads.Load(), h.partialReloads.Load())
	fmt.Fprint(os.Stderr)
}
