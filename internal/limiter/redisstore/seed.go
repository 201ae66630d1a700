package redisstore

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
)

//go:embed seed.lua
var seedLua string

var seedScript = redis.NewScript(splice(splice(seedLua, "--[[check.lua prelude]]", checkPrelude()), "--[[calendar.lua]]", calendarLua))

// MissingSeeds returns those of markers (limiter.SeedKeyOf) Redis does
// not hold, reading them in one pipeline (on a Cluster, one per node).
func (s *Store) MissingSeeds(ctx context.Context, markers []string) ([]string, error) {
	client, ok := s.client.(redis.Cmdable)
	if !ok {
		return nil, fmt.Errorf("redisstore: missing seeds: the client cannot pipeline")
	}
	cmds := make([]*redis.IntCmd, len(markers))
	_, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, m := range markers {
			cmds[i] = p.Exists(ctx, m)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redisstore: missing seeds: %w", err)
	}
	var missing []string
	for i, c := range cmds {
		if c.Val() == 0 {
			missing = append(missing, markers[i])
		}
	}
	return missing, nil
}

// SeedTallies is limiter.TallySeeder's: one seed.lua call on the marker's
// slot.
func (s *Store) SeedTallies(ctx context.Context, marker string, monthStartUS int64, tallies []limiter.TallySeed, last bool) (bool, error) {
	keys := make([]string, 1, 1+len(tallies))
	keys[0] = marker
	args := make([]any, 0, 3+len(tallies))
	lastArg := 0
	if last {
		lastArg = 1
	}
	args = append(args, monthStartUS, s.ExtraTTL.Milliseconds(), lastArg)
	for _, t := range tallies {
		keys = append(keys, t.Key)
		args = append(args, t.Count)
	}
	n, err := seedScript.Run(ctx, s.client, keys, args...).Int64()
	if err != nil {
		return false, fmt.Errorf("redisstore: seed tallies: %w", err)
	}
	return n == 1, nil
}
