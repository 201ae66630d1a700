package checkapi

import (
	"testing"

	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
)

// BenchmarkCheckTally measures allowed checks of the pro plan with its
// monthly quota counted on the check path (quota_mode overage) on Redis:
// the lean script decides the rate rule and the tally, whose seed marker
// (limiter.Params.Seed) it reads too.
//
//	scripts/services.sh test -- go test ./internal/checkapi/ -run '^$' -bench CheckTally -benchmem -count 5
func BenchmarkCheckTally(b *testing.B) {
	c, prefix := testenv.Redis(b)
	store := redisstore.New(c)
	fixture.SeedAll(b, store, prefix)
	h, token, keys := benchSetupQuota(b, store, prefix, 1000, plans.QuotaOverage, nil)
	benchChecksOfKeys(b, h, token, keys)
}
