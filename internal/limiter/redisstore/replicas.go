package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
)

// Money confirmed on replicas. Redis replicates asynchronously: a write
// it has acknowledged may be missing from the replica a failover
// promotes. With Store.WaitReplicas set, a script call that carries money
// (pending.carriesMoney) is followed by WAIT numreplicas timeout in the
// same pipeline, on the same connection: Redis answers WAIT once that
// many replicas have acknowledged the connection's writes so far, or at
// the timeout with how many have. The call costs no extra round trip,
// only the replicas' acknowledgement; calls without money are sent as
// before. On a Cluster, WAIT applies to one node's replicas, so such
// calls go in a pipeline per master node, each ending with its WAIT.

// defaultWaitTimeout is WaitTimeout when it is not set.
const defaultWaitTimeout = 50 * time.Millisecond

// pipeliner is a client of one server that runs scripts and pipelines:
// a *redis.Client, or a Cluster's client of one node.
type pipeliner interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// carriesMoney reports whether p's writes are money that must survive a
// failover: a check that is not a dry run with a hold, or that costs
// something and draws on a prepaid balance or counts a rule that is money
// (limiter.Batch.Money); a settlement or expiry of a hold. Renewals and
// releases of leases are not.
func (p *pending) carriesMoney() bool {
	switch p.op {
	case 0:
		b := &p.batch
		return !b.DryRun && (b.Hold != nil || b.Cost > 0 && (b.Credits != nil || b.Money))
	case opSettle, opExpire:
		return true
	}
	return false
}

// waitsFor reports whether a call of ps waits for replicas.
func (s *Store) waitsFor(ps []*pending) bool {
	if s.WaitReplicas <= 0 {
		return false
	}
	for _, p := range ps {
		if p.carriesMoney() {
			return true
		}
	}
	return false
}

// waitTimeout returns WAIT's timeout: WaitTimeout, at least a
// millisecond (WAIT's unit; 0 would wait for ever).
func (s *Store) waitTimeout() time.Duration {
	d := s.WaitTimeout
	if d <= 0 {
		d = defaultWaitTimeout
	}
	return max(d, time.Millisecond)
}

// scriptCall is one script call in a pipeline that ends with WAIT.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
}

// runWaiting sends calls by EVALSHA, then WAIT, in one pipeline on one
// connection of client, and again by EVAL (then WAIT) those Redis did not
// know the script of. It returns nil once WaitReplicas replicas have
// acknowledged, else why not: an error wrapping limiter.ErrNotReplicated
// when fewer did within the timeout. The calls' own replies are in their
// cmd.
func (s *Store) runWaiting(ctx context.Context, client pipeliner, calls []*scriptCall) error {
	pipe := client.Pipeline()
	for _, c := range calls {
		c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	wait := s.queueWait(ctx, pipe)
	_, _ = pipe.Exec(ctx)
	var again []*scriptCall
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, c)
		}
	}
	waits := []*redis.IntCmd{wait}
	if len(again) > 0 {
		// The calls that ran the first time are confirmed by the first
		// WAIT, on their connection; these by a WAIT on theirs, which
		// may be another of the pool's.
		pipe = client.Pipeline()
		for _, c := range again {
			c.cmd = c.script.Eval(ctx, pipe, c.keys, c.args...)
		}
		waits = append(waits, s.queueWait(ctx, pipe))
		_, _ = pipe.Exec(ctx)
	}
	for _, wait := range waits {
		acked, err := wait.Result()
		if err != nil {
			return fmt.Errorf("wait for replicas: %w", err)
		}
		if acked < int64(s.WaitReplicas) {
			return fmt.Errorf("%d of %d replicas acknowledged within %v: %w", acked, s.WaitReplicas, s.waitTimeout(), limiter.ErrNotReplicated)
		}
	}
	return nil
}

// queueWait queues WAIT WaitReplicas timeout on pipe.
func (s *Store) queueWait(ctx context.Context, pipe redis.Pipeliner) *redis.IntCmd {
	cmd := redis.NewIntCmd(ctx, "wait", s.WaitReplicas, s.waitTimeout().Milliseconds())
	_ = pipe.Process(ctx, cmd)
	return cmd
}

// clientFor returns the client whose connections reach the server that
// holds key: the store's own, or on a Cluster the master of key's slot.
func (s *Store) clientFor(ctx context.Context, key string) (pipeliner, error) {
	if s.cluster != nil {
		node, err := s.cluster.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("master of %q: %w", key, err)
		}
		return node, nil
	}
	client, ok := s.client.(pipeliner)
	if !ok {
		return nil, fmt.Errorf("a %T cannot pipeline, so cannot wait for replicas", s.client)
	}
	return client, nil
}

// runConfirmed runs script on the server that holds keys, followed by
// WAIT, and returns its reply (or err) and why the WAIT did not confirm
// its writes (nil when it did).
func (s *Store) runConfirmed(ctx context.Context, script *redis.Script, keys []string, args []any) (reply string, err, unconfirmed error) {
	client, err := s.clientFor(ctx, keys[0])
	if err != nil {
		return "", err, nil
	}
	c := scriptCall{script: script, keys: keys, args: args}
	one := [1]*scriptCall{&c}
	unconfirmed = s.runWaiting(ctx, client, one[:])
	reply, err = c.cmd.Text()
	return reply, err, unconfirmed
}

// failMoney gives err to those of ps that carry money, were answered and
// wrote: their writes stand on the server but may not survive a
// failover. A check keeps its outcome beside the error (its caller
// answers what the server decided, marked degraded, rather than refuse
// units it has taken); a refused check wrote nothing and keeps its plain
// answer. The others keep their answers.
func failMoney(ps []*pending, err error) {
	if err == nil {
		return
	}
	for _, p := range ps {
		if !p.carriesMoney() || p.err != nil {
			continue
		}
		if p.op == 0 && !p.out.Admitted {
			continue
		}
		if p.op != 0 {
			p.reply = nil
		}
		p.err = fmt.Errorf("redisstore: %s: %w", p.what(), err)
	}
}

// slotGroup is the script call of one hash slot's checks or operations in
// a call that waits for replicas on a Cluster.
type slotGroup struct {
	call    scriptCall
	pending []*pending
	// unsent is why the group's call could not be sent; unconfirmed
	// why its node's WAIT did not confirm it.
	unsent, unconfirmed error
}

// runByNode sends groups on a Cluster, one pipeline per master node
// (each on one connection, ending with WAIT when its groups carry money),
// the nodes' pipelines at once; it sets each group's call.cmd, or
// unsent, and unconfirmed.
func (s *Store) runByNode(ctx context.Context, groups []*slotGroup) {
	var nodes []pipeliner
	byNode := map[pipeliner][]*slotGroup{}
	for _, g := range groups {
		node, err := s.clientFor(ctx, g.call.keys[0])
		if err != nil {
			g.unsent = err
			continue
		}
		if _, ok := byNode[node]; !ok {
			nodes = append(nodes, node)
		}
		byNode[node] = append(byNode[node], g)
	}
	send := func(node pipeliner) {
		gs := byNode[node]
		var ps []*pending
		calls := make([]*scriptCall, len(gs))
		for i, g := range gs {
			calls[i] = &g.call
			ps = append(ps, g.pending...)
		}
		if !s.waitsFor(ps) {
			runPlain(ctx, node, calls)
			return
		}
		err := s.runWaiting(ctx, node, calls)
		for _, g := range gs {
			g.unconfirmed = err
		}
	}
	if len(nodes) == 1 {
		send(nodes[0])
		return
	}
	var wg sync.WaitGroup
	for _, node := range nodes {
		wg.Go(func() { send(node) })
	}
	wg.Wait()
}

// runPlain sends calls in one pipeline on client, without WAIT, again by
// EVAL those Redis did not know the script of.
func runPlain(ctx context.Context, client pipeliner, calls []*scriptCall) {
	pipe := client.Pipeline()
	for _, c := range calls {
		c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			c.cmd = c.script.Eval(ctx, client, c.keys, c.args...)
		}
	}
}

// decodeChecks hands g's checks their outcomes from g's call c, then
// fails those that carry money when the WAIT did not confirm them.
func (g *slotGroup) decodeChecks(c *call) {
	if g.unsent != nil {
		c.decode(g.pending, "", g.unsent)
		return
	}
	reply, err := g.call.cmd.Text()
	c.decode(g.pending, reply, err)
	failMoney(g.pending, g.unconfirmed)
}

// decodeOps hands g's operations their replies, then fails those that
// carry money when the WAIT did not confirm them.
func (g *slotGroup) decodeOps() {
	if g.unsent != nil {
		decodeOps(g.pending, nil, g.unsent)
		return
	}
	values, err := g.call.cmd.Slice()
	decodeOps(g.pending, values, err)
	failMoney(g.pending, g.unconfirmed)
}
