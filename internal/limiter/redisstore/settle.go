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

//go:embed settle.lua
var settleLua string

// settleScript is settle.lua after check.lua's wire constants and
// helpers, so that both scripts declare them once, and release.lua's
// release_lease.
var settleScript = redis.NewScript(checkPrelude() + releaseLua + settleLua)

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

// Reply codes of settle.lua.
const (
	settleDone     = 0
	settleNotFound = 1
	settleConflict = 2
	settleNotDue   = 3
)

// Settle sets a hold's actual cost, or expires it, in one script call
// that changes the hold's record and the states it took from together:
// on a batching store, the call of settle.lua that goes out with the
// next checks, shared with the other settlements waiting then. It
// returns limiter.ErrHoldNotFound, ErrHoldConflict, ErrHoldNotDue or
// ErrSettleCost as limiter.Settler says, and wrapped store errors.
func (s *Store) Settle(ctx context.Context, req limiter.Settle) (limiter.Settlement, error) {
	if err := req.Validate(); err != nil {
		return limiter.Settlement{}, err
	}
	if s.batcher != nil {
		out, _, err := s.batcher.settle(ctx, req)
		return out, err
	}
	out, _, err := s.settle(ctx, req)
	return out, err
}

// settle is Settle in a call of its own, also returning the hold's ID.
func (s *Store) settle(ctx context.Context, req limiter.Settle) (limiter.Settlement, string, error) {
	p := pending{settling: true, settle: req}
	one := [1]*pending{&p}
	s.runSettles(ctx, one[:])
	return p.settled, p.holdID, p.err
}

// splitSettles returns the checks of run and its settlements apart; run
// itself when it holds no settlement.
func splitSettles(run []*pending) (checks, settles []*pending) {
	n := 0
	for _, p := range run {
		if p.settling {
			n++
		}
	}
	if n == 0 {
		return run, nil
	}
	checks = make([]*pending, 0, len(run)-n)
	settles = make([]*pending, 0, n)
	for _, p := range run {
		if p.settling {
			settles = append(settles, p)
		} else {
			checks = append(checks, p)
		}
	}
	return checks, settles
}

// runSettles settles ps in one settle.lua call, or on a Cluster in one
// call per hash slot of their holds, sent in one pipeline.
func (s *Store) runSettles(ctx context.Context, ps []*pending) {
	if s.cluster == nil || len(ps) == 1 {
		keys, args := s.settleArgs(ps)
		values, err := settleScript.Run(ctx, s.client, keys, args...).Slice()
		decodeSettles(ps, values, err)
		return
	}
	groups := map[int][]*pending{}
	var order []int
	for _, p := range ps {
		sl := slot(p.settle.Key)
		if _, ok := groups[sl]; !ok {
			order = append(order, sl)
		}
		groups[sl] = append(groups[sl], p)
	}
	cmds := make([]*redis.Cmd, len(order))
	_, _ = s.cluster.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, sl := range order {
			keys, args := s.settleArgs(groups[sl])
			cmds[i] = settleScript.EvalSha(ctx, pipe, keys, args...)
		}
		return nil
	})
	for i, sl := range order {
		values, err := cmds[i].Slice()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			keys, args := s.settleArgs(groups[sl])
			values, err = settleScript.Run(ctx, s.client, keys, args...).Slice()
		}
		decodeSettles(groups[sl], values, err)
	}
}

// settleArgs returns settle.lua's KEYS and ARGV for ps.
func (s *Store) settleArgs(ps []*pending) (keys []string, args []any) {
	keys = make([]string, len(ps))
	args = make([]any, 1, 1+3*len(ps))
	args[0] = strconv.FormatInt(s.ExtraTTL.Milliseconds(), 10)
	for i, p := range ps {
		expire := "0"
		if p.settle.Expire {
			expire = "1"
		}
		keys[i] = p.settle.Key
		args = append(args, strconv.FormatInt(p.settle.Cost, 10), strconv.FormatInt(p.settle.NowUS, 10), expire)
	}
	return keys, args
}

// decodeSettles sets each of ps's settlement from settle.lua's reply
// (seven values each), or err.
func decodeSettles(ps []*pending, values []any, err error) {
	if err == nil && len(values) != 7*len(ps) {
		err = fmt.Errorf("reply of %d values for %d settlements", len(values), len(ps))
	}
	if err != nil {
		for _, p := range ps {
			p.err = fmt.Errorf("redisstore: settle: %w", err)
		}
		return
	}
	for i, p := range ps {
		p.settled, p.holdID, p.err = decodeSettle(values[7*i : 7*i+7])
	}
}

// decodeSettle reads one settlement's reply: code, now, estimate, cost,
// status, repeated, ID.
func decodeSettle(values []any) (limiter.Settlement, string, error) {
	var reply [6]int64
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
	out := limiter.Settlement{NowUS: reply[1], Estimate: reply[2], Cost: reply[3], Status: limiter.HoldStatus(reply[4]), Repeated: reply[5] == 1}
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
	if err := indexAddScript.Run(ctx, s.client, []string{s.holdIndex()}, strconv.FormatInt(expireUS, 10), member).Err(); err != nil {
		return fmt.Errorf("redisstore: index hold: %w", err)
	}
	return nil
}

// ExpireDue expires up to max holds past their expiry at Redis's clock,
// each in its own settle.lua call, and drops them from the index.
func (s *Store) ExpireDue(ctx context.Context, max int) ([]limiter.Expired, error) {
	due, err := indexDueScript.Run(ctx, s.client, []string{s.holdIndex()}, max).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: due holds: %w", err)
	}
	var out []limiter.Expired
	for _, member := range due {
		st, id, err := s.settle(ctx, limiter.Settle{Key: member, Expire: true})
		switch {
		case errors.Is(err, limiter.ErrHoldNotDue):
			continue // clocks of Redis calls a µs apart; next round
		case err == nil && !st.Repeated:
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
