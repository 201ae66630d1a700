package usage

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/testenv"
)

func TestApplyIsExactlyOnceAndRollsUp(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	ctx := context.Background()
	b := metering.Batch{Version: 1, ID: "p:1", Rows: []metering.Row{
		row(at(t, "2026-10-31T23:58"), tA, kA, "GET /a", metering.Counts{Allowed: 3, AllowedUnits: 5}),
		row(at(t, "2026-10-31T23:59"), tA, kA, "GET /a", metering.Counts{Allowed: 1, AllowedUnits: 1}),
		row(at(t, "2026-11-01T00:00"), tA, kA, "GET /a", metering.Counts{Allowed: 2, AllowedUnits: 2}),
		row(at(t, "2026-11-01T00:00"), tA, kA, "GET /a", metering.Counts{Denied: 4, DeniedUnits: 8}),
		row(at(t, "2026-11-01T00:00"), "", "", "*", metering.Counts{Allowed: 1, AllowedUnits: 1}),
	}}
	res, err := s.Apply(ctx, b)
	if err != nil || res.Duplicate {
		t.Fatalf("first apply: %+v, %v", res, err)
	}
	res, err = s.Apply(ctx, b)
	if err != nil || !res.Duplicate {
		t.Fatalf("second apply: %+v, %v; want a duplicate", res, err)
	}
	want := map[string]metering.Counts{
		tA + "/" + kA:           {Allowed: 6, Denied: 4, AllowedUnits: 8, DeniedUnits: 8},
		NilUUID + "/" + NilUUID: {Allowed: 1, AllowedUnits: 1},
	}
	for _, table := range []string{"usage_minute", "usage_hour", "usage_day", "usage_month"} {
		got := sums(t, db, table)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: got %v, want %v", table, got, want)
		}
	}
	// Buckets: October's two minutes are one hour, one day, one month.
	var n int
	for table, want := range map[string]int{"usage_minute": 5, "usage_hour": 4, "usage_day": 4, "usage_month": 4} {
		if err := db.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != want {
			t.Errorf("%s: %d rows (err %v), want %d", table, n, err, want)
		}
	}
	if err := db.QueryRow(ctx, `SELECT count(*) FROM usage_month WHERE bucket_start = '2026-10-01T00:00:00Z'
		AND allowed = 4 AND allowed_units = 6`).Scan(&n); err != nil || n != 1 {
		t.Errorf("October's month row: %d (err %v), want 1 with 4 allowed, 6 units", n, err)
	}
}

func TestApplyAllMergesBatchesAndSkipsDuplicates(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	ctx := context.Background()
	mk := func(id string, n int64) metering.Batch {
		return metering.Batch{Version: 1, ID: id, Rows: []metering.Row{row(at(t, "2026-11-20T10:00"), tA, kA, "GET /a", metering.Counts{Allowed: n, AllowedUnits: 2 * n})}}
	}
	if _, err := s.Apply(ctx, mk("b1", 1)); err != nil {
		t.Fatal(err)
	}
	res, err := s.ApplyAll(ctx, []metering.Batch{mk("b1", 1), mk("b2", 10), mk("b2", 10), mk("b3", 100)})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(res); got != "[{true 0 0 0} {false 0 0 0} {true 0 0 0} {false 0 0 0}]" {
		t.Errorf("results %s, want b1 and the second b2 duplicates", got)
	}
	if got := sums(t, db, "usage_minute")[tA+"/"+kA]; got != (metering.Counts{Allowed: 111, AllowedUnits: 222}) {
		t.Errorf("totals %+v, want 111 allowed", got)
	}
	if res, err := s.ApplyAll(ctx, nil); err != nil || len(res) != 0 {
		t.Errorf("no batches: %v, %v", res, err)
	}
}

func TestApplyConcurrentWorkersCountEachBatchOnce(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	other := NewStore(db, StoreConfig{Now: fixedNow("2026-11-22T12:00:00Z")})
	var batches []metering.Batch
	want := metering.Counts{}
	for i := range 40 {
		c := metering.Counts{Allowed: int64(i % 3), Denied: 1, AllowedUnits: int64(i), DeniedUnits: 2}
		want.Add(c)
		batches = append(batches, metering.Batch{Version: 1, ID: fmt.Sprintf("p:%d", i), Rows: []metering.Row{
			row(at(t, "2026-11-20T10:00")+int64(i%4)*60, tA, kA, "GET /a", c),
			row(at(t, "2026-11-20T10:00"), tA, kB, "GET /b", metering.Counts{Allowed: 1, AllowedUnits: 1}),
		}})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(batches))
	for _, st := range []*Store{s.Store, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, b := range batches {
				if _, err := st.Apply(context.Background(), b); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got := sums(t, db, "usage_minute")
	if got[tA+"/"+kA] != want || got[tA+"/"+kB] != (metering.Counts{Allowed: 40, AllowedUnits: 40}) {
		t.Errorf("got %v, want %v for key A and 40 for key B", got, want)
	}
	if got := sums(t, db, "usage_month"); got[tA+"/"+kA] != want {
		t.Errorf("month rollup %v, want %v", got[tA+"/"+kA], want)
	}
}

func TestMaintainKeepsPartitionsAheadAndDropsOld(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	ctx := context.Background()
	// A row from July (older than 3 months before November) goes to the
	// rollups only; an August row gets a partition.
	_, err := s.Apply(ctx, metering.Batch{Version: 1, ID: "p:1", Rows: []metering.Row{
		row(at(t, "2026-07-15T10:00"), tA, kA, "*", metering.Counts{Allowed: 1, AllowedUnits: 1}),
		row(at(t, "2026-08-15T10:00"), tA, kA, "*", metering.Counts{Allowed: 2, AllowedUnits: 2}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	partitions := func() []string {
		rows, err := db.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'usage_minute' ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var n string
			_ = rows.Scan(&n)
			out = append(out, n)
		}
		return out
	}
	if got := fmt.Sprint(partitions()); got != "[usage_minute_202608]" {
		t.Errorf("partitions after apply: %s", got)
	}
	if got := sums(t, db, "usage_month")[tA+"/"+kA]; got.Allowed != 3 {
		t.Errorf("month rollups hold %d allowed, want 3 (July's too)", got.Allowed)
	}
	// Three months later August is past retention.
	later := NewStore(db, StoreConfig{Now: fixedNow("2026-12-01T00:00:00Z")})
	res, err := later.Maintain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(res.Dropped); got != "[usage_anon_ip_minute_202608 usage_minute_202608]" {
		t.Errorf("dropped %s", got)
	}
	if got := fmt.Sprint(partitions()); got != "[usage_minute_202612 usage_minute_202701 usage_minute_202702]" {
		t.Errorf("partitions after maintenance: %s", got)
	}
	if got := sums(t, db, "usage_hour")[tA+"/"+kA]; got.Allowed != 3 {
		t.Errorf("hour rollups hold %d allowed after the drop, want 3", got.Allowed)
	}
}

func TestMaintainForgetsOldBatchIDs(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO usage_batches (batch_id, applied_at, row_count, decisions)
		VALUES ('old', '2026-10-01', 1, 1), ('recent', '2026-11-20', 1, 1)`); err != nil {
		t.Fatal(err)
	}
	res, err := s.Maintain(ctx)
	if err != nil || res.PurgedBatches != 1 {
		t.Fatalf("purged %d (err %v), want 1", res.PurgedBatches, err)
	}
}

func TestMigrationUpDownUp(t *testing.T) {
	db := testenv.DB(t)
	ctx := context.Background()
	exists := func(table string) bool {
		var ok bool
		if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	s := NewStore(db, StoreConfig{})
	if _, err := s.Maintain(ctx); err != nil { // partitions exist when migrating down
		t.Fatal(err)
	}
	// Down to schema 2, the last before usage (migration 3).
	testenv.Must(t, postgres.MigrateDownTo(db, 2))
	for _, table := range []string{"usage_minute", "usage_batches", "statements", "usage_late"} {
		if exists(table) {
			t.Errorf("%s exists after migrating down", table)
		}
	}
	testenv.Must(t, postgres.MigrateDown(db, 0))
	testenv.Must(t, postgres.MigrateUp(db))
	v, dirty, err := postgres.Version(ctx, db)
	if err != nil || dirty || v != postgres.SchemaVersion() {
		t.Fatalf("version %d dirty %v err %v", v, dirty, err)
	}
	s = NewStore(db, StoreConfig{})
	if _, err := s.Apply(ctx, metering.Batch{Version: 1, ID: "x", Rows: []metering.Row{row(time.Now().Unix()/60*60, tA, kA, "*", metering.Counts{Allowed: 1})}}); err != nil {
		t.Fatalf("apply after up-down-up: %v", err)
	}
}

// BenchmarkApply applies batches of 200 rows (a second of traffic from
// 50 keys on 4 resources) — the worker's cost per batch.
func BenchmarkApply(b *testing.B) {
	s, minute := benchStore(b)
	ctx := context.Background()
	for i := range b.N {
		if _, err := s.Apply(ctx, benchBatch(fmt.Sprintf("bench:%d", i), minute+int64(i%5)*60)); err != nil {
			b.Fatal(err)
		}
	}
}

// benchStore is a store on a fresh database and the current minute (Unix
// seconds) for a benchmark's batches; the benchmark's timer starts after.
func benchStore(b *testing.B) (*Store, int64) {
	s := NewStore(testenv.DB(b), StoreConfig{})
	minute := time.Now().Unix() / 60 * 60
	b.ResetTimer()
	return s, minute
}

// benchBatch is a batch of 200 rows of minute: a second of traffic from
// 50 keys of 7 tenants on 4 resources.
func benchBatch(id string, minute int64) metering.Batch {
	batch := metering.Batch{Version: 1, ID: id}
	for k := range 50 {
		for r := range 4 {
			batch.Rows = append(batch.Rows, metering.Row{Minute: minute, TenantID: testID(k % 7), KeyID: testID(100 + k),
				Tier: "authenticated", Resource: fmt.Sprintf("GET /r%d", r), Reason: "ok", Counts: metering.Counts{Allowed: 3, AllowedUnits: 3}})
		}
	}
	return batch
}

// BenchmarkApplyAll applies 64 such batches per transaction, as a worker
// catching up does: their rows merge before they are written.
func BenchmarkApplyAll(b *testing.B) {
	s, minute := benchStore(b)
	ctx := context.Background()
	for i := range b.N {
		var batches []metering.Batch
		for j := range 64 {
			batches = append(batches, benchBatch(fmt.Sprintf("bench:%d:%d", i, j), minute+int64(j%5)*60))
		}
		if _, err := s.ApplyAll(ctx, batches); err != nil {
			b.Fatal(err)
		}
	}
}
