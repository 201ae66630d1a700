package billing

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/metering/meteringtest"
	"github.com/tollgate/tollgate/internal/metering/pgstore"
	"github.com/tollgate/tollgate/internal/testenv"
)

// Shorthands for the fixtures of package meteringtest.
var (
	at, fixedNow, sums, row = meteringtest.At, meteringtest.FixedNow, meteringtest.Sums, meteringtest.Row
	testID                  = meteringtest.ID
	tA, tB                  = testID(1), testID(2)
	kA, kB                  = testID(11), testID(12)
)

// stores is a test's billing Store and the pgstore.Store that writes the
// usage it reads, on one database with one clock.
type stores struct {
	*Store
	*writer
}

// writer names pgstore.Store as a field of stores beside Store.
type writer = pgstore.Store

func newStore(t *testing.T, now string) (*stores, *pgxpool.Pool) {
	t.Helper()
	db := testenv.DB(t)
	cfg := pgstore.StoreConfig{Now: fixedNow(now)}
	return &stores{Store: NewStore(db, cfg), writer: pgstore.NewStore(db, cfg)}, db
}
