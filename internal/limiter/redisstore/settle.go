package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
)

// settleLua is settle.lua, which ops.lua runs.
//
//go:embed settle.lua
var settleLua string

// checkPrelude returns check.lua's lines from its first wire constant to
// its calendar helpers: the constants, flags and arithmetic helpers.
func checkPrelude() string {
	start := strings.Index(checkLua, "local algGCRA")
	end := strings.Index(checkLua, "--[[calendar.lua]]")
	if start < 0 || end < start {
		panic("redisstore: check.lua lost its wire constants")
	}
	return checkLua[start:end]
}

// Reply codes of settle.lua's settle.
const (
	settleDone     = 0
	settleNotFound = 1
	settleConflict = 2
	settleNotDue   = 3
)

// Settle sets a hold's actual cost, or expires it, in one step that
// changes the hold's record and the states it took from together (an
// ops.lua call; on a batching store with BatchConfig.Operations, the one
// that goes out with the next checks, shared with the other operations
// queued then). It returns
// limiter.ErrHoldNotFound, ErrHoldConflict, ErrHoldNotDue or
// ErrSettleCost as limiter.Settler says, and wrapped store errors.
func (s *Store) Settle(ctx context.Context, req limiter.Settle) (limiter.Settlement, error) {
	if err := req.Validate(); err != nil {
		return limiter.Settlement{}, err
	}
	out, _, err := s.settle(ctx, req)
	return out, err
}

// settle is Settle, also returning the hold's ID.
func (s *Store) settle(ctx context.Context, req limiter.Settle) (limiter.Settlement, string, error) {
	op, cost, credits := opSettle, req.Cost, req.Credits
	if req.Expire {
		// An expiry gives the estimate back or keeps it, never takes more:
		// it needs no terms of the balance.
		op, cost, credits = opExpire, 0, nil
	}
	values, err := s.runOp(ctx, op, req.Key, cost, req.NowUS, credits)
	if err != nil {
		return limiter.Settlement{}, "", err
	}
	return decodeSettlement(values)
}

// expire expires the due hold at key in a call of its own (ExpireDue's
// holds come one after the other, and none should wait for checks).
func (s *Store) expire(ctx context.Context, key string) (limiter.Settlement, string, error) {
	p := pending{op: opExpire, opKey: key}
	one := [1]*pending{&p}
	s.runOps(ctx, one[:])
	if p.err != nil {
		return limiter.Settlement{}, "", p.err
	}
	return decodeSettlement(p.reply)
}

// decodeSettlement reads a settlement's reply from ops.lua: code, now,
// estimate, cost, status, repeated (+ 2 when journaled), the hold's ID,
// the time of the hold's check.
func decodeSettlement(values []any) (limiter.Settlement, string, error) {
	var reply [8]int64
	var id string
	for i, v := range values {
		switch v := v.(type) {
		case int64:
			if i < len(reply) {
				reply[i] = v
			}
		case string:
			id = v
		}
	}
	out := limiter.Settlement{NowUS: reply[1], OpenedUS: reply[7], Estimate: reply[2], Cost: reply[3], Status: limiter.HoldStatus(reply[4]),
		Repeated: reply[5]%2 == 1, Recorded: reply[5] >= 2}
	switch reply[0] {
	case settleDone:
		return out, id, nil
	case settleNotFound:
		return limiter.Settlement{}, "", limiter.ErrHoldNotFound
	case settleConflict:
		return out, id, limiter.ErrHoldConflict
	case settleNotDue:
		return out, id, limiter.ErrHoldNotDue
	}
	return limiter.Settlement{}, "", fmt.Errorf("redisstore: settle: reply code %d", reply[0])
}

// The hold index's scripts: each one call on the index's own key.
var (
	indexAddScript = redis.NewScript(`return redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])`)
	indexDueScript = redis.NewScript(`local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now), 'LIMIT', 0, tonumber(ARGV[1]))`)
	indexRemoveScript = redis.NewScript(`return redis.call('ZREM', KEYS[1], ARGV[1])`)
)

func (s *Store) holdIndex() string {
	if s.HoldIndex == "" {
		return "tg:holds"
	}
	return s.HoldIndex
}

// indexHold lists hold h, expiring at expireUS, for ExpireDue. It is a
// call of its own after the check's: if it fails, the check's error says
// so and the hold, never expired, keeps its estimate until settled.
func (s *Store) indexHold(ctx context.Context, h *limiter.Hold, expireUS int64) error {
	member := h.Key
	keys, args := []string{s.holdIndex()}, []any{strconv.FormatInt(expireUS, 10), member}
	if s.WaitReplicas > 0 {
		// A hold whose listing a failover lost would never expire.
		client, err := s.clientFor(ctx, keys[0])
		if err == nil {
			c := scriptCall{script: indexAddScript, keys: keys, args: args}
			one := [1]*scriptCall{&c}
			if err = s.runWaiting(ctx, client, one[:]); c.cmd.Err() != nil {
				err = c.cmd.Err()
			}
		}
		if err != nil {
			return fmt.Errorf("redisstore: index hold: %w", err)
		}
		return nil
	}
	if err := indexAddScript.Run(ctx, s.client, keys, args...).Err(); err != nil {
		return fmt.Errorf("redisstore: index hold: %w", err)
	}
	return nil
}

// ExpireDue expires up to max holds past their expiry at Redis's clock,
// each in an ops.lua call of its own, and drops them from the index.
func (s *Store) ExpireDue(ctx context.Context, max int) ([]limiter.Expired, error) {
	due, err := indexDueScript.Run(ctx, s.client, []string{s.holdIndex()}, max).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: due holds: %w", err)
	}
	var out []limiter.Expired
	for _, member := range due {
		st, id, err := s.expire(ctx, member)
		switch {
		case errors.Is(err, limiter.ErrHoldNotDue):
			continue // clocks of Redis calls a µs apart; next round
		case err == nil:
			// A repeated expiry too: the one before may have lost its
			// answer, and its usage counts once per hold whichever
			// event reaches the pipeline.
			out = append(out, limiter.Expired{ID: id, Settlement: st})
		case err != nil && !errors.Is(err, limiter.ErrHoldNotFound) && !errors.Is(err, limiter.ErrHoldConflict):
			return out, err
		}
		if err := indexRemoveScript.Run(ctx, s.client, []string{s.holdIndex()}, member).Err(); err != nil {
			return out, fmt.Errorf("redisstore: unindex hold: %w", err)
		}
	}
	return out, nil
}
