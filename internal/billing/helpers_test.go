package billing

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/metering/meteringtest"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/usage"
)

// Shorthands for the fixtures of package meteringtest.
var (
	at, fixedNow, sums, row = meteringtest.At, meteringtest.FixedNow, meteringtest.Sums, meteringtest.Row
	testID                  = meteringtest.ID
	mustTime                = meteringtest.Time
	tA, tB                  = testID(1), testID(2)
	kA, kB                  = testID(11), testID(12)
)

// stores is a test's billing Store and Ops, the usage.Store that writes
// the usage they read (quota's ingest plugged in, as the usage worker's)
// and the usage.Reader that reads it, on one database with one clock.
type stores struct {
	*Store
	*Ops
	*writer
	*reader
}

// writer and reader name usage.Store and usage.Reader as fields of
// stores beside Store.
type (
	writer = usage.Store
	reader = usage.Reader
)

func newStore(t *testing.T, now string) (*stores, *pgxpool.Pool) {
	t.Helper()
	db := testenv.DB(t)
	clock := fixedNow(now)
	cfg := usage.StoreConfig{Now: clock, Hooks: []usage.Hook{quota.NewIngest(db, quota.IngestConfig{})}}
	return &stores{Store: NewStore(db, clock), Ops: NewOps(db, clock), writer: usage.NewStore(db, cfg),
		reader: usage.NewReader(db, cfg)}, db
}
