package usage

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/testenv"
)

// holdHash returns a hold hash that reads as n.
func holdHash(n int) string { return fmt.Sprintf("%032x", n) }

// settlement is hold n's settlement at minute for key A of tenant A.
func settlement(n int, minute, cost int64, expired bool) metering.Settlement {
	return metering.Settlement{HoldHash: holdHash(n), Minute: minute, TenantID: tA, KeyID: kA, Tier: "authenticated",
		Resource: "POST /v1/complete", Cost: cost, Expired: expired}
}

// expiredHolds returns the sum of expired_holds in table for tenant A.
func expiredHolds(t *testing.T, s *stores, table string) int64 {
	t.Helper()
	var n int64
	err := s.Store.db.QueryRow(context.Background(), `SELECT coalesce(sum(expired_holds), 0)::int8 FROM `+table+
		` WHERE tenant_id = $1`, tA).Scan(&n)
	testenv.Must(t, err)
	return n
}

// TestSettlementCountsOncePerHold: one hold's settlement handed on by two
// api processes (the settlement and its retry, answered repeated) comes
// in two batches applied by two stores (two workers): its units count
// once; a batch redelivered counts nothing again; an expiry counts its
// hold in expired_holds, once too.
func TestSettlementCountsOncePerHold(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	other := NewStore(db, StoreConfig{Now: fixedNow("2026-11-22T12:00:00Z")})
	ctx := context.Background()
	m := at(t, "2026-11-20T10:00")
	first := metering.Batch{Version: 1, ID: "api1:1",
		Rows:        []metering.Row{row(m, tA, kA, "POST /v1/complete", metering.Counts{Allowed: 2})},
		Settlements: []metering.Settlement{settlement(1, m, 300, false), settlement(2, m, 40, true)}}
	// The retry, on another process a minute later.
	retry := metering.Batch{Version: 1, ID: "api2:1",
		Settlements: []metering.Settlement{settlement(1, m+60, 300, false), settlement(2, m+60, 40, true)}}

	res, err := s.Apply(ctx, first)
	if err != nil || res.Settlements != 2 || res.RepeatedSettlements != 0 {
		t.Fatalf("first batch: %+v, %v; want 2 settlements counted", res, err)
	}
	res, err = other.Apply(ctx, retry)
	if err != nil || res.Duplicate || res.Settlements != 0 || res.RepeatedSettlements != 2 {
		t.Fatalf("the retry's batch: %+v, %v; want applied, its 2 settlements repeated", res, err)
	}
	if res, err := other.Apply(ctx, first); err != nil || !res.Duplicate {
		t.Fatalf("first batch redelivered: %+v, %v; want a duplicate", res, err)
	}
	want := metering.Counts{Allowed: 2, AllowedUnits: 340}
	for _, table := range []string{"usage_minute", "usage_hour", "usage_day", "usage_month"} {
		if got := sums(t, db, table)[tA+"/"+kA]; got != want {
			t.Errorf("%s: %+v, want %+v (each hold once)", table, got, want)
		}
		if got := expiredHolds(t, s, table); got != 1 {
			t.Errorf("%s: %d expired holds, want 1", table, got)
		}
	}
	var minutes int
	testenv.Must(t, db.QueryRow(ctx, `SELECT count(DISTINCT bucket_start) FROM usage_minute`).Scan(&minutes))
	if minutes != 1 {
		t.Errorf("usage in %d minutes, want 1: the first settlement's", minutes)
	}
}

// TestSettlementsInOneCallCountOnce: a hold listed twice in one batch, or
// in two batches applied together, counts in the first.
func TestSettlementsInOneCallCountOnce(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	m := at(t, "2026-11-20T10:00")
	res, err := s.ApplyAll(context.Background(), []metering.Batch{
		{Version: 1, ID: "a:1", Settlements: []metering.Settlement{settlement(1, m, 5, false), settlement(1, m, 5, false)}},
		{Version: 1, ID: "b:1", Settlements: []metering.Settlement{settlement(1, m, 5, false), settlement(2, m, 7, false)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%d/%d %d/%d", res[0].Settlements, res[0].RepeatedSettlements, res[1].Settlements,
		res[1].RepeatedSettlements); got != "1/1 1/1" {
		t.Errorf("counted/repeated per batch %s, want 1/1 1/1", got)
	}
	if got := sums(t, db, "usage_month")[tA+"/"+kA]; got != (metering.Counts{AllowedUnits: 12}) {
		t.Errorf("month: %+v, want 12 units", got)
	}
}

// TestConcurrentWorkersCountEachSettlementOnce: two workers apply, at
// once, two streams' worth of batches that carry the same 200 holds
// (every settlement handed on by two api processes), in opposite orders.
func TestConcurrentWorkersCountEachSettlementOnce(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	other := NewStore(db, StoreConfig{Now: fixedNow("2026-11-22T12:00:00Z")})
	m := at(t, "2026-11-20T10:00")
	var fromA, fromB []metering.Batch
	var want int64
	for i := range 20 {
		a := metering.Batch{Version: 1, ID: fmt.Sprintf("a:%d", i)}
		b := metering.Batch{Version: 1, ID: fmt.Sprintf("b:%d", i)}
		for j := range 10 {
			n := i*10 + j
			want += int64(n)
			a.Settlements = append(a.Settlements, settlement(n, m, int64(n), false))
			b.Settlements = append([]metering.Settlement{settlement(n, m+60, int64(n), false)}, b.Settlements...)
		}
		fromA, fromB = append(fromA, a), append([]metering.Batch{b}, fromB...)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, w := range []struct {
		store   *Store
		batches []metering.Batch
	}{{s.Store, fromA}, {other, fromB}} {
		wg.Go(func() {
			for k := 0; k < len(w.batches); k += 4 {
				if _, err := w.store.ApplyAll(context.Background(), w.batches[k:min(k+4, len(w.batches))]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := sums(t, db, "usage_month")[tA+"/"+kA]; got != (metering.Counts{AllowedUnits: want}) {
		t.Errorf("month: %+v, want %d units", got, want)
	}
	var n int
	testenv.Must(t, db.QueryRow(context.Background(), `SELECT count(*) FROM usage_settlements`).Scan(&n))
	if n != 200 {
		t.Errorf("%d holds recorded, want 200", n)
	}
}

// TestOldBatchWithoutSettlementsApplies: a batch of a producer from
// before settlements were kept apart (no "settlements" field, the
// settlement summed into its rows) applies as it always did.
func TestOldBatchWithoutSettlementsApplies(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	m := at(t, "2026-11-20T10:00")
	b, err := metering.DecodeBatch(fmt.Appendf(nil, `{"v":1,"id":"old:1","created_us":0,"rows":[
		{"minute":%d,"tenant_id":%q,"key_id":%q,"tier":"authenticated","resource":"POST /v1/complete","reason":"ok","allowed":1,"allowed_units":250},
		{"minute":%d,"tenant_id":%q,"key_id":%q,"tier":"authenticated","resource":"POST /v1/complete","reason":"hold_expired","allowed_units":9,"expired_holds":1}]}`,
		m, tA, kA, m, tA, kA))
	testenv.Must(t, err)
	res, err := s.Apply(context.Background(), b)
	if err != nil || res.Duplicate || res.Settlements != 0 {
		t.Fatalf("old batch: %+v, %v", res, err)
	}
	if got := sums(t, db, "usage_month")[tA+"/"+kA]; got != (metering.Counts{Allowed: 1, AllowedUnits: 259}) {
		t.Errorf("month: %+v, want 1 allowed, 259 units", got)
	}
	if got := expiredHolds(t, s, "usage_month"); got != 1 {
		t.Errorf("%d expired holds, want 1", got)
	}
}

// hookRows is a Hook that keeps the rows of the batches it is given.
type hookRows struct{ rows []metering.Row }

func (h *hookRows) Applied(_ context.Context, _ pgx.Tx, batches []metering.Batch, _ time.Time) error {
	for _, b := range batches {
		h.rows = append(h.rows, b.Rows...)
		if len(b.Settlements) > 0 {
			return fmt.Errorf("batch %s still lists settlements", b.ID)
		}
	}
	return nil
}

func (h *hookRows) Sweep(context.Context, time.Time) error { return nil }

// TestHooksSeeSettlementsAsRows: the hooks see a hold's settlement among
// the rows of the batch that counted it, as they saw settled usage
// before, and not again with a batch that repeats it.
func TestHooksSeeSettlementsAsRows(t *testing.T) {
	db := testenv.DB(t)
	hook := &hookRows{}
	s := NewStore(db, StoreConfig{Now: fixedNow("2026-11-22T12:00:00Z"), Hooks: []Hook{hook}})
	m := at(t, "2026-11-20T10:00")
	ctx := context.Background()
	_, err := s.Apply(ctx, metering.Batch{Version: 1, ID: "a:1", Settlements: []metering.Settlement{settlement(1, m, 30, false)}})
	testenv.Must(t, err)
	_, err = s.Apply(ctx, metering.Batch{Version: 1, ID: "b:1", Settlements: []metering.Settlement{settlement(1, m, 30, false)}})
	testenv.Must(t, err)
	if len(hook.rows) != 1 || hook.rows[0].AllowedUnits != 30 || hook.rows[0].TenantID != tA || hook.rows[0].Reason != "ok" {
		t.Errorf("the hooks saw rows %+v, want one of 30 units for tenant A", hook.rows)
	}
}

// TestAnonymousSettlementCountsByIP: an anonymous caller's settlement
// counts under its IP too, so the per-IP rows still sum to the tier.
func TestAnonymousSettlementCountsByIP(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	m := at(t, "2026-11-20T10:00")
	anon := metering.Settlement{HoldHash: holdHash(1), Minute: m, Tier: "anonymous", IP: "192.0.2.1", Resource: "*", Cost: 4}
	for _, id := range []string{"a:1", "b:1"} {
		_, err := s.Apply(context.Background(), metering.Batch{Version: 1, ID: id, Settlements: []metering.Settlement{anon}})
		testenv.Must(t, err)
	}
	var units int64
	testenv.Must(t, db.QueryRow(context.Background(), `SELECT coalesce(sum(allowed_units), 0)::int8
		FROM usage_anon_ip_minute WHERE ip = '192.0.2.1'`).Scan(&units))
	if got := sums(t, db, "usage_minute")[NilUUID+"/"+NilUUID]; got.AllowedUnits != 4 || units != 4 {
		t.Errorf("anonymous units %d, by IP %d; want 4 and 4", got.AllowedUnits, units)
	}
}

func TestMaintainForgetsOldSettlements(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO usage_settlements (hold_hash, applied_at)
		VALUES (decode($1, 'hex'), '2026-11-10'), (decode($2, 'hex'), '2026-11-20')`, holdHash(1), holdHash(2)); err != nil {
		t.Fatal(err)
	}
	res, err := s.Maintain(ctx)
	if err != nil || res.PurgedSettlements != 1 {
		t.Fatalf("purged %d settlements (err %v), want 1", res.PurgedSettlements, err)
	}
}
