package quota

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/statekey"
)

// tallyChunk bounds the tallies one script call writes.
const tallyChunk = 500

// RebuildTallies rebuilds the tenants' month counts (the monthly quota's
// and the spend cap's state, statekey.TenantMonthKey under prefix) that
// the limiter store lost, from the month's rollups (usage_month, which
// the usage worker applies exactly once), and sets each rebuilt hash
// tag's seed marker (statekey.SeedKey). Checks decide those counts only
// while their tag's marker exists (limiter.Params.Seed): a Redis that
// comes back empty has no marker, so until a rebuild its spend caps
// refuse checks that cost something (unavailable, degraded) and its
// quotas are decided by their failure mode, and it never restarts a
// month's money from zero. A new Redis, and a new tenant or month on a
// Redis that lost nothing, need no rebuild beyond the first: the marker
// says the store counted every unit admitted since.
//
// One pass reads the 254 markers; only when some are missing does it
// query Postgres: the month's units of every tenant whose plan keeps a
// month count (quota_mode hard or overage), written to the missing tags
// only, never below a count the store holds for the month. It returns
// the number of tags it seeded. Several processes may run it at once:
// a tag is written only while its marker is missing, and the marker is
// set last.
func RebuildTallies(ctx context.Context, db postgres.Conn, seeder limiter.TallySeeder, prefix string, now time.Time) (int, error) {
	missing, err := seeder.MissingSeeds(ctx, statekey.SeedKeys(prefix))
	if err != nil || len(missing) == 0 {
		return 0, err
	}
	month := monthOf(now)
	rows, err := db.Query(ctx, `SELECT u.tenant_id::text, sum(u.allowed_units)::bigint
		FROM usage_month u JOIN tenants t ON t.id = u.tenant_id JOIN plans p ON p.id = t.plan_id
		WHERE u.bucket_start = $1 AND p.quota_mode IN ($2, $3)
		GROUP BY u.tenant_id`, month, plans.QuotaHard, plans.QuotaOverage)
	if err != nil {
		return 0, fmt.Errorf("quota: rebuild tallies: %w", err)
	}
	byMarker := make(map[string][]limiter.TallySeed, len(missing))
	for _, m := range missing {
		byMarker[m] = nil
	}
	for rows.Next() {
		var id string
		var units int64
		if err := rows.Scan(&id, &units); err != nil {
			rows.Close()
			return 0, fmt.Errorf("quota: rebuild tallies: %w", err)
		}
		key := statekey.TenantMonthKey(prefix, id, plans.QuotaRuleName)
		m := limiter.SeedKeyOf(key)
		if seeds, ok := byMarker[m]; ok && units > 0 {
			byMarker[m] = append(seeds, limiter.TallySeed{Key: key, Count: units})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("quota: rebuild tallies: %w", err)
	}
	seeded := 0
	for _, m := range missing {
		seeds := byMarker[m]
		for len(seeds) > tallyChunk {
			wrote, err := seeder.SeedTallies(ctx, m, month.UnixMicro(), seeds[:tallyChunk], false)
			if err != nil {
				return seeded, fmt.Errorf("quota: rebuild tallies: %w", err)
			}
			if !wrote {
				break
			}
			seeds = seeds[tallyChunk:]
		}
		if len(seeds) > tallyChunk {
			continue // seeded meanwhile, or another month: the next pass looks again
		}
		wrote, err := seeder.SeedTallies(ctx, m, month.UnixMicro(), seeds, true)
		if err != nil {
			return seeded, fmt.Errorf("quota: rebuild tallies: %w", err)
		}
		if wrote {
			seeded++
		}
	}
	return seeded, nil
}

// RunTallyRebuild runs RebuildTallies every interval until ctx ends; a
// store or database that fails is logged when it starts failing and
// every 10 s while it does, and when a pass succeeds again.
func RunTallyRebuild(ctx context.Context, db postgres.Conn, seeder limiter.TallySeeder, prefix string, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var failingSince, lastLog time.Time
	for {
		n, err := RebuildTallies(ctx, db, seeder, prefix, time.Now())
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			if time.Since(lastLog) >= 10*time.Second {
				lastLog = time.Now()
				log.WarnContext(ctx, "quota: tally rebuild failed; lost tallies stay unknown", "err", err,
					"failing_for", time.Since(failingSince).Round(time.Second))
			}
		default:
			if !failingSince.IsZero() {
				log.InfoContext(ctx, "quota: tally rebuild works again", "failed_for", time.Since(failingSince).Round(time.Second))
				failingSince, lastLog = time.Time{}, time.Time{}
			}
			if n > 0 {
				log.InfoContext(ctx, "quota: tallies rebuilt from the rollups", "hash_tags", n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
