// Package redisstore keeps limiter state in Redis, a single server or a
// Cluster: each check's rules run in one call of check.lua, the Lua twin of
// the limiter package's algorithms, with time from Redis's TIME.
package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
)

func flags(r limiter.Request) int {
	f := 0
	if r.Shadow {
		f |= 1
	}
	if r.Params.Shape {
		f |= 2
	}
	switch r.Params.Calendar {
	case limiter.CalendarDay:
		f |= 4
	case limiter.CalendarMonth:
		f |= 8
	}
	if r.Params.AnchorFirstRequest {
		f |= 16
	}
	return f
}

//go:embed check.lua
var checkLua string

// checkScript is loaded once per Redis server; go-redis falls back from
// EVALSHA to EVAL on NOSCRIPT (after SCRIPT FLUSH or a restart).
var checkScript = redis.NewScript(checkLua)

// Store keeps limiter state in Redis (single server or Cluster).
type Store struct {
	client redis.Scripter
	// ExtraTTL is added to every key's time to live. Tests that inject a
	// clock running slower than Redis's set it so that keys do not expire
	// in real time before they would in the test's time; production
	// leaves it 0.
	ExtraTTL time.Duration
}

// New returns a store on client (a *redis.Client, *redis.ClusterClient or
// anything else that runs scripts).
func New(client redis.Scripter) *Store {
	return &Store{client: client}
}

// Check runs the batch in one script call: one round trip. It returns
// ErrEmptyBatch or ErrNegativeCost for such batches.
func (s *Store) Check(ctx context.Context, b limiter.Batch) (limiter.Outcome, error) {
	if err := b.Validate(); err != nil {
		return limiter.Outcome{}, err
	}
	keys := make([]string, len(b.Requests))
	args := make([]any, 0, 4+6*len(b.Requests))
	dry := 0
	if b.DryRun {
		dry = 1
	}
	args = append(args, b.NowUS, b.Cost, dry, s.ExtraTTL.Milliseconds())
	for i, r := range b.Requests {
		keys[i] = r.Key
		args = append(args, r.Params.Algorithm.Code(), r.Params.Limit, r.Params.PeriodUS,
			r.Params.EffectiveBurst(), flags(r), 0)
	}
	raw, err := checkScript.Run(ctx, s.client, keys, args...).Int64Slice()
	if err != nil {
		return limiter.Outcome{}, fmt.Errorf("redisstore: check: %w", err)
	}
	return decodeOutcome(raw, len(b.Requests))
}

func decodeOutcome(raw []int64, n int) (limiter.Outcome, error) {
	if len(raw) != 2+5*n {
		return limiter.Outcome{}, fmt.Errorf("redisstore: check: %d values for %d rules", len(raw), n)
	}
	out := limiter.Outcome{NowUS: raw[0], Admitted: raw[1] == 1, Results: make([]limiter.Result, n)}
	for i := range n {
		v := raw[2+5*i:]
		out.Results[i] = limiter.Result{Allowed: v[0] == 1, Remaining: v[1], ResetAfterUS: v[2], RetryAfterUS: v[3], DelayUS: v[4]}
	}
	return out, nil
}

// LoadScript loads the check script into every server the client knows, so
// that the first checks do not pay for EVAL.
func LoadScript(ctx context.Context, client redis.Scripter) error {
	if err := checkScript.Load(ctx, client).Err(); err != nil {
		return fmt.Errorf("redisstore: load script: %w", err)
	}
	return nil
}

// ScriptHash is the SHA1 under which Redis caches check.lua.
func ScriptHash() string { return checkScript.Hash() }
