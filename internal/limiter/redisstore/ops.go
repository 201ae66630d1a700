package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
)

// The operations that follow checks, on the holds and leases they opened:
// ops.lua runs any number of them in one call, each in one step
// (settle.lua's settle, lease.lua's lease), one after the other. A
// batching store with BatchConfig.Operations queues them with its checks
// and sends those queued together in one call after the checks'; other
// stores send each alone, and so does ExpireDue.

//go:embed ops.lua
var opsLua string

// opsScript is ops.lua after check.lua's wire constants and helpers and
// release.lua's release_lease, with settle.lua and lease.lua in it.
var opsScript = redis.NewScript(splice(splice(checkPrelude()+releaseLua+opsLua,
	"--[[settle.lua]]", settleLua), "--[[lease.lua]]", leaseLua))

// ops.lua's op codes.
const (
	opSettle  = 1
	opExpire  = 2
	opRenew   = 3
	opRelease = 4
)

// opReplyLen is the values ops.lua returns per operation (ops.lua
// declares it with this name; TestOpCodesMatchGo keeps the two equal).
const opReplyLen = 8

// runOp runs one operation on the record at key and returns its reply:
// in the batcher's next call when it queues operations, or in a call of
// its own. credits are a settlement's current credit terms (nil: none).
func (s *Store) runOp(ctx context.Context, op int, key string, cost, nowUS int64, credits *limiter.Credits) ([]any, error) {
	if s.batcher != nil && s.batcher.ops {
		return s.batcher.op(ctx, op, key, cost, nowUS, credits)
	}
	p := pending{op: op, opKey: key, opCost: cost, opNowUS: nowUS, opCredits: credits}
	one := [1]*pending{&p}
	s.runOps(ctx, one[:])
	return p.reply, p.err
}

// splitOps returns the checks of run and its operations apart; run
// itself when it holds no operation.
func splitOps(run []*pending) (checks, ops []*pending) {
	n := 0
	for _, p := range run {
		if p.op != 0 {
			n++
		}
	}
	if n == 0 {
		return run, nil
	}
	checks = make([]*pending, 0, len(run)-n)
	ops = make([]*pending, 0, n)
	for _, p := range run {
		if p.op != 0 {
			ops = append(ops, p)
		} else {
			checks = append(checks, p)
		}
	}
	return checks, ops
}

// runOps runs ps in one ops.lua call, or on a Cluster in one call per
// hash slot of their records, sent in one pipeline.
func (s *Store) runOps(ctx context.Context, ps []*pending) {
	if s.waitsFor(ps) {
		s.runOpsConfirmed(ctx, ps)
		return
	}
	if s.cluster == nil || len(ps) == 1 {
		keys, args := s.opArgs(ps)
		values, err := opsScript.Run(ctx, s.client, keys, args...).Slice()
		decodeOps(ps, values, err)
		return
	}
	order, groups := bySlot(ps, func(p *pending) string { return p.opKey })
	cmds := make([]*redis.Cmd, len(order))
	_, _ = s.cluster.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, sl := range order {
			keys, args := s.opArgs(groups[sl])
			cmds[i] = opsScript.EvalSha(ctx, pipe, keys, args...)
		}
		return nil
	})
	for i, sl := range order {
		values, err := cmds[i].Slice()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			keys, args := s.opArgs(groups[sl])
			values, err = opsScript.Run(ctx, s.client, keys, args...).Slice()
		}
		decodeOps(groups[sl], values, err)
	}
}

// runOpsConfirmed is runOps for operations among which some carry money,
// on a store that waits for replicas: the call (on a Cluster, one per
// hash slot, in one pipeline per master node) ends with WAIT
// (replicas.go).
func (s *Store) runOpsConfirmed(ctx context.Context, ps []*pending) {
	order, groups := []int{0}, map[int][]*pending{0: ps}
	if s.cluster != nil {
		order, groups = bySlot(ps, func(p *pending) string { return p.opKey })
	}
	gs := make([]*slotGroup, len(order))
	for i, sl := range order {
		keys, args := s.opArgs(groups[sl])
		gs[i] = &slotGroup{call: scriptCall{script: opsScript, keys: keys, args: args}, pending: groups[sl]}
	}
	s.runByNode(ctx, gs)
	for _, g := range gs {
		g.decodeOps()
	}
}

// opArgs returns ops.lua's KEYS and ARGV for ps.
func (s *Store) opArgs(ps []*pending) (keys []string, args []any) {
	keys = make([]string, len(ps))
	args = make([]any, 1, 1+4*len(ps))
	args[0] = strconv.FormatInt(s.ExtraTTL.Milliseconds(), 10)
	for i, p := range ps {
		keys[i] = p.opKey
		args = append(args, p.op, strconv.FormatInt(p.opNowUS, 10), strconv.FormatInt(p.opCost, 10))
		c := p.opCredits
		if c == nil {
			args = append(args, 0)
			continue
		}
		overage := 0
		if c.Overage {
			overage = 1
		}
		args = append(args, 4+2*len(c.Expiring), c.Key, strconv.FormatInt(c.Line, 10), strconv.FormatInt(c.Overdraft, 10), overage)
		for _, e := range c.Expiring {
			args = append(args, strconv.FormatInt(e.AtUS, 10), strconv.FormatInt(e.Units, 10))
		}
	}
	return keys, args
}

// decodeOps gives each of ps its reply from ops.lua's (opReplyLen values
// each), or err.
func decodeOps(ps []*pending, values []any, err error) {
	if err == nil && len(values) != opReplyLen*len(ps) {
		err = fmt.Errorf("reply of %d values for %d operations", len(values), len(ps))
	}
	for i, p := range ps {
		if err != nil {
			p.err = fmt.Errorf("redisstore: %s: %w", p.what(), err)
			continue
		}
		p.reply = values[opReplyLen*i : opReplyLen*(i+1)]
	}
}

// what names what p is, for errors.
func (p *pending) what() string {
	switch p.op {
	case opSettle, opExpire:
		return "settle"
	case opRenew, opRelease:
		return "lease"
	}
	return "check"
}
