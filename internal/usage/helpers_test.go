package usage

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/metering/meteringtest"
	"github.com/tollgate/tollgate/internal/testenv"
)

// Shorthands for the fixtures of package meteringtest.
var (
	at, fixedNow, sums, row = meteringtest.At, meteringtest.FixedNow, meteringtest.Sums, meteringtest.Row
	testID                  = meteringtest.ID
	mustTime                = meteringtest.Time
	tA, tB                  = meteringtest.ID(1), meteringtest.ID(2)
	kA, kB                  = meteringtest.ID(11), meteringtest.ID(12)
)

// stores is a test's Store, which writes usage, and the Reader that reads
// it, on one database with one clock.
type stores struct {
	*Store
	*Reader
}

func newStore(t *testing.T, now string) (*stores, *pgxpool.Pool) {
	t.Helper()
	db := testenv.DB(t)
	cfg := StoreConfig{Now: fixedNow(now)}
	return &stores{Store: NewStore(db, cfg), Reader: NewReader(db, cfg)}, db
}
