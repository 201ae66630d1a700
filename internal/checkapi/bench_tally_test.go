package checkapi

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/testenv"
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
	seedAll(b, store, prefix)
	h, token, keys := benchSetupQuota(b, store, prefix, 1000, plans.QuotaOverage, nil)
	benchChecksOfKeys(b, h, token, keys)
}

// seedAll sets every hash tag's seed marker under prefix, as the api
// processes' tally rebuild does on a new store.
func seedAll(b *testing.B, seeder limiter.TallySeeder, prefix string) {
	now := time.Now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for _, m := range statekey.SeedKeys(prefix) {
		if _, err := seeder.SeedTallies(context.Background(), m, month, nil, true); err != nil {
			b.Fatal(err)
		}
	}
}
