package usage

import "github.com/tollgate/tollgate/internal/metering/meteringtest"

// Shorthands for the fixtures of package meteringtest.
var (
	at, fixedNow, sums, row = meteringtest.At, meteringtest.FixedNow, meteringtest.Sums, meteringtest.Row
	testID                  = meteringtest.ID
	tA, tB                  = meteringtest.ID(1), meteringtest.ID(2)
	kA, kB                  = meteringtest.ID(11), meteringtest.ID(12)
)
