package usage

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestResourceCapFoldsExactlyUnderConcurrentWorkers: four workers apply
// 40 batches at once, together naming 60 resources of one tenant in one
// month and a few of another tenant; with a cap of 10 the tenant's month
// keeps exactly 10 resources and (other), in every rollup the same, and
// every count stays exact. The other tenant and the previous month are
// untouched by the cap.
func TestResourceCapFoldsExactlyUnderConcurrentWorkers(t *testing.T) {
	db := testenv.DB(t)
	ctx := context.Background()
	const limit = 10
	stores := make([]*Store, 4)
	for i := range stores {
		stores[i] = NewStore(db, StoreConfig{Now: fixedNow("2026-11-22T12:00:00Z"), ResourceCap: limit})
	}
	var batches []metering.Batch
	var wantA metering.Counts
	for i := range 40 {
		b := metering.Batch{Version: 1, ID: fmt.Sprintf("b%d", i)}
		for j := range 3 {
			c := metering.Counts{Allowed: int64(1 + j), AllowedUnits: int64(2 + i), Denied: int64(i % 2), DeniedUnits: int64(i % 2)}
			b.Rows = append(b.Rows, row(at(t, fmt.Sprintf("2026-11-%02dT10:%02d", 1+i%20, j)), tA, kA,
				fmt.Sprintf("GET /r%d", (i*3+j)%60), c))
			wantA.Add(c)
		}
		b.Rows = append(b.Rows, row(at(t, "2026-11-05T10:00"), tB, kB, fmt.Sprintf("GET /b%d", i%3), metering.Counts{Allowed: 1, AllowedUnits: 1}))
		b.Rows = append(b.Rows, row(at(t, "2026-10-05T10:00"), tA, kA, "GET /october", metering.Counts{Allowed: 1, AllowedUnits: 1}))
		wantA.Add(metering.Counts{Allowed: 1, AllowedUnits: 1})
		batches = append(batches, b)
	}
	var wg sync.WaitGroup
	for w, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(batches); i += len(stores) {
				if _, err := s.Apply(ctx, batches[i]); err != nil {
					t.Errorf("apply %s: %v", batches[i].ID, err)
				}
			}
		}()
	}
	wg.Wait()

	want := map[string]metering.Counts{tA + "/" + kA: wantA, tB + "/" + kB: {Allowed: 40, AllowedUnits: 40}}
	for _, table := range []string{"usage_minute", "usage_hour", "usage_day", "usage_month"} {
		if got := sums(t, db, table); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: sums %v, want %v", table, got, want)
		}
		var named, other, otherB, october int
		err := db.QueryRow(ctx, `SELECT
			count(DISTINCT resource) FILTER (WHERE tenant_id = $1 AND bucket_start >= '2026-11-01' AND resource <> '(other)'),
			count(*) FILTER (WHERE tenant_id = $1 AND resource = '(other)'),
			count(DISTINCT resource) FILTER (WHERE tenant_id = $2),
			count(*) FILTER (WHERE resource = 'GET /october')
			FROM `+table, tA, tB).Scan(&named, &other, &otherB, &october)
		testenv.Must(t, err)
		if named != limit || other == 0 || otherB != 3 || october == 0 {
			t.Errorf("%s: tenant A named %d resources, %d (other) rows; tenant B %d resources; October rows %d; want %d, some, 3, some",
				table, named, other, otherB, october, limit)
		}
	}
	// The minute rows fold the same resources as the month.
	var mismatched int
	testenv.Must(t, db.QueryRow(ctx, `SELECT count(*) FROM (SELECT DISTINCT resource FROM usage_minute WHERE tenant_id = $1
		EXCEPT SELECT resource FROM usage_month WHERE tenant_id = $1) x`, tA).Scan(&mismatched))
	if mismatched != 0 {
		t.Errorf("%d resources of the minute rows are not in the month's", mismatched)
	}
}
