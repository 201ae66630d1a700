package usage

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/metering"
)

// Hook is what a feature does with usage as it is applied, so that the
// apply path names no feature: the programs (`admin serve`, `admin
// worker`, the api in single-process mode) and the tests wire the hooks
// into StoreConfig.Hooks, as enforce's Recorder is wired into the
// checker. quota.Ingest is one: it records threshold crossings, the first
// denials by a spend cap or a hard quota, and sustained rate limiting,
// each exactly once.
type Hook interface {
	// Applied runs in the transaction that applies batches, after their
	// rows and rollups are written: batches are those applied for the
	// first time (duplicates left out), each with the settlements of
	// holds counted now among its Rows (and none in Settlements), now the
	// store's clock. An error
	// rolls the whole apply back; the worker retries it.
	Applied(ctx context.Context, tx pgx.Tx, batches []metering.Batch, now time.Time) error
	// Sweep runs every SweepInterval (Store.Sweep), busy or idle, in
	// transactions of its own: for what no usage comes to show, such as
	// an alert whose callers stopped altogether. It should bound the
	// time it takes, since the worker applies no batch meanwhile.
	Sweep(ctx context.Context, now time.Time) error
}
