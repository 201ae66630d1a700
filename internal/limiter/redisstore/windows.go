package redisstore

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
)

// ReadWindows returns the fixed-window state at each of keys (HMGET
// window count), read in one pipeline without a script: on a Cluster,
// go-redis sends each node the keys of its slots, so the keys may belong
// to any tenants. The client must pipeline (a *redis.Client,
// *redis.ClusterClient or redis.UniversalClient). A key whose fields are
// missing or not numbers reads as not Present.
func (s *Store) ReadWindows(ctx context.Context, keys []string) ([]limiter.Window, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	client, ok := s.client.(interface{ Pipeline() redis.Pipeliner })
	if !ok {
		return nil, fmt.Errorf("redisstore: read windows: a %T cannot pipeline", s.client)
	}
	pipe := client.Pipeline()
	cmds := make([]*redis.SliceCmd, len(keys))
	for i, key := range keys {
		cmds[i] = pipe.HMGet(ctx, key, "window", "count")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisstore: read windows: %w", err)
	}
	out := make([]limiter.Window, len(keys))
	for i, cmd := range cmds {
		vals := cmd.Val()
		if len(vals) != 2 {
			continue
		}
		start, okStart := number(vals[0])
		count, okCount := number(vals[1])
		if okStart && okCount {
			out[i] = limiter.Window{StartUS: start, Count: count, Present: true}
		}
	}
	return out, nil
}

// number reads a hash field the scripts wrote from a Lua number: an
// integer, or (had it grown past 17 digits) a float.
func number(v any) (int64, bool) {
	s, ok := v.(string)
	if !ok {
		return 0, false
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f < -(1<<63) || f >= 1<<63 {
		return 0, false
	}
	return int64(f), true
}
