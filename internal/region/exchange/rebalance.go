package exchange

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/statekey"
)

// SplitRule is what the rebalancer needs of a global_split window.
type SplitRule struct {
	// Name labels tollgate_region_share: "plan/rule".
	Name string
	// Limit is the rule's limit L, MinShare its min_share (0: the
	// default, L / (4 · regions)).
	Limit, MinShare int64
}

// demandReport is a region's demand and allotments at its last
// rebalance, on every global_split state it counted demand on or holds
// units moved to or from: what the other regions' rebalancers decide on.
//
// A report goes in as many parts as keep each message within
// messageBudget (parts), each in a message of its own; a receiver
// decides on a report once it has every part of it (assemble).
type demandReport struct {
	Keys []keyDemand `json:"keys"`
	// ID names the report: the sequence of the messages that carry it
	// (seq.lua's, kept in the sender's Redis, so it grows across the
	// region's workers; a worker before this one sent its clock, µs
	// since the epoch). A receiver orders reports by the message's
	// sequence alone (assemble). Part is this part's index of Parts
	// (Parts 0: a whole report of a worker that sent no parts).
	ID    int64 `json:"id,omitempty"`
	Part  int   `json:"part,omitempty"`
	Parts int   `json:"parts,omitempty"`
	// AtUS is the message's (set on arrival; of a report in parts, its
	// first part's): a report older than three rebalance intervals, one
	// redelivered after a partition say, is not decided on.
	AtUS int64 `json:"-"`
}

// parts returns r in parts whose JSON is about budget bytes at most (a
// part holds at least one state), numbered.
func (r *demandReport) parts(budget int) []*demandReport {
	var parts []*demandReport
	from, size := 0, 0
	for i, kd := range r.Keys {
		n := base64.StdEncoding.EncodedLen(len(kd.Key)) + 60
		if i > from && size+n > budget-128 {
			parts = append(parts, &demandReport{Keys: r.Keys[from:i], ID: r.ID})
			from, size = i, 0
		}
		size += n
	}
	parts = append(parts, &demandReport{Keys: r.Keys[from:], ID: r.ID})
	for i, p := range parts {
		p.Part, p.Parts = i, len(parts)
	}
	return parts
}

// partialReport is a report of another region of which some parts have
// arrived.
type partialReport struct {
	report *demandReport
	got    []bool // by part
	left   int
}

// assemble takes part, a part of source's report that arrived in a
// message of sequence seq and at (its AtUS), and returns the report once
// every part of it has arrived (nil until then). A report is named by
// its messages' sequence, not by the ID its sender wrote: the sequence
// grows across the region's workers, where a worker's clock may be
// behind the one before it (after a failover, every report would then
// be dropped as older until the clock caught up). A part of a report
// older than the one being put together, or than the last complete one,
// is dropped; so is a part that came twice (a report published again
// after a failed publication). x.mu must be held.
func (x *Exchanger) assemble(source string, part *demandReport, seq, at int64) *demandReport {
	part.ID = seq
	if last := x.reports[source]; last != nil && part.ID <= last.ID {
		return nil
	}
	if part.Parts <= 1 {
		part.AtUS = at
		return part
	}
	if x.partial == nil {
		x.partial = map[string]*partialReport{}
	}
	p := x.partial[source]
	if p != nil && part.ID < p.report.ID {
		return nil
	}
	if p == nil || p.report.ID != part.ID || len(p.got) != part.Parts {
		p = &partialReport{report: &demandReport{ID: part.ID, AtUS: at}, got: make([]bool, part.Parts), left: part.Parts}
		x.partial[source] = p
	}
	if part.Part < 0 || part.Part >= len(p.got) || p.got[part.Part] {
		return nil
	}
	p.got[part.Part] = true
	p.left--
	p.report.Keys = append(p.report.Keys, part.Keys...)
	if p.left > 0 {
		return nil
	}
	delete(x.partial, source)
	return p.report
}

// keyDemand is one state's line of a report: the units its checks asked
// for (admitted and denied) in the last rebalance interval, and the
// region's allotment of it then.
type keyDemand struct {
	Key       []byte `json:"k"`
	Demand    int64  `json:"d"`
	Allotment int64  `json:"a"`
}

// gift is units this region gave another region of a state's allotment:
// until that region's reports can show them, the rebalancer counts them
// in its allotment.
type gift struct {
	key   string
	to    string
	units int64
	at    time.Time
}

// rebalanceLoop rebalances every rebalance interval until ctx ends.
func (x *Exchanger) rebalanceLoop(ctx context.Context) {
	tick := time.NewTicker(x.cfg.Region.RebalanceInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := x.rebalance(ctx); err != nil && ctx.Err() == nil {
			x.log.Warn("region rebalance: allotments stay as they are until the next interval", "err", err)
		}
	}
}

// view is one state's allotments and demands as this region sees them.
type view struct {
	rule      SplitRule
	allotment map[string]int64
	demand    map[string]int64
	// counting: the state counts something here (demand.lua), so the
	// units moved to this region stay while no region has demand on it
	// (give).
	counting bool
}

// rebalance reads (and empties) this region's demand tables and its
// allotment tables, reports them to the other regions (the next message
// carries the report), and gives units of its allotments to the regions
// whose demand calls for more (docs/regions.md, "global_split"). It
// decides alone, on the last reports of the regions heard from within
// three intervals: a region cut off is left out, so it keeps its
// allotment and receives nothing.
//
// It reports only once this worker reads every other region's stream
// (receive made each reader): a region that another gives units to must
// read the release, and a region's first consumer of a stream starts at
// its end, so until then no region hears from this one and none gives
// to it.
func (x *Exchanger) rebalance(ctx context.Context) error {
	rules, err := x.cfg.SplitRules(ctx)
	if err != nil {
		return fmt.Errorf("split rules: %w", err)
	}
	prefix, me, rc := x.cfg.Prefix, x.cfg.Region.Name, x.cfg.Region
	tags := statekey.Tags()
	pipe := x.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(tags))
	for i, tag := range tags {
		cmds[i] = demandScript.EvalSha(ctx, pipe, []string{statekey.DemandKey(prefix, tag), statekey.AllotmentKey(prefix, tag)})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read demand: %w", err)
	}
	views := map[string]*view{}
	look := func(key string) *view {
		if v, ok := views[key]; ok {
			return v
		}
		if len(key) < len(prefix)+6 {
			return nil
		}
		rule, ok := rules[[3]byte([]byte(key[len(prefix)+3:len(prefix)+6]))]
		if !ok || rule.Limit <= 0 {
			return nil
		}
		v := &view{rule: rule, allotment: map[string]int64{}, demand: map[string]int64{}}
		v.allotment[me], _ = rc.Allotment(rule.Limit, rule.Limit)
		views[key] = v
		return v
	}
	for _, cmd := range cmds {
		vals, _ := cmd.Slice()
		if len(vals) != 3 {
			continue
		}
		demand, _ := vals[0].([]any)
		moved, _ := vals[1].([]any)
		counting, _ := vals[2].([]any)
		for _, key := range counting {
			if v := look(str(key)); v != nil {
				v.counting = true
			}
		}
		for j := 0; j+1 < len(moved); j += 2 {
			if v := look(str(moved[j])); v != nil {
				n, _ := strconv.ParseInt(str(moved[j+1]), 10, 64)
				v.allotment[me] += n
			}
		}
		for j := 0; j+1 < len(demand); j += 2 {
			if v := look(str(demand[j])); v != nil {
				n, _ := strconv.ParseInt(str(demand[j+1]), 10, 64)
				v.demand[me] += n
			}
		}
	}
	now := time.Now()
	report := &demandReport{Keys: []keyDemand{}, ID: now.UnixMicro()}
	for key, v := range views {
		report.Keys = append(report.Keys, keyDemand{Key: []byte(key), Demand: v.demand[me], Allotment: v.allotment[me]})
	}

	// The other regions' last reports, and this region's gifts they may
	// not show yet.
	fresh := 3 * rc.RebalanceInterval
	x.mu.Lock()
	if len(x.reading) == len(x.sources) {
		x.report = report
	}
	heard := []string{}
	for _, name := range rc.Names {
		r := x.reports[name]
		if name == me || r == nil || now.Sub(time.UnixMicro(r.AtUS)) > fresh {
			continue
		}
		heard = append(heard, name)
		for _, kd := range r.Keys {
			if v := look(string(kd.Key)); v != nil {
				v.allotment[name], v.demand[name] = kd.Allotment, kd.Demand
			}
		}
	}
	gifts := x.gifts[:0]
	for _, g := range x.gifts {
		if now.Sub(g.at) < 2*rc.RebalanceInterval+time.Second {
			gifts = append(gifts, g)
		}
	}
	x.gifts = gifts
	x.mu.Unlock()
	for key, v := range views {
		for _, name := range heard {
			if _, ok := v.allotment[name]; !ok {
				v.allotment[name], _ = rc.AllotmentOf(name, v.rule.Limit, v.rule.Limit)
			}
		}
		for _, g := range gifts {
			if g.key == key {
				v.allotment[g.to] += g.units
			}
		}
	}

	for key, v := range views {
		given, err := x.give(ctx, key, v, append(heard, me))
		if err != nil {
			return err
		}
		v.allotment[me] -= given
	}
	x.reportShares(rules, views)
	return nil
}

// give gives units of this region's allotment of state key to the
// regions of among whose share of the demand is above their allotment.
// Each region's target is the floor plus its part, by demand, of what
// the regions of among hold above their floors; a region above its
// target gives each region below its own the region's shortfall times
// this region's part of the surplus above the targets, so that the
// regions, each deciding alone on the same reports, give about the
// shortfall in all. A region whose surplus is under a fiftieth of the
// limit gives nothing; past that, it skips only a gift under half of
// that (docs/regions.md).
//
// When no region of among has demand on the state, each region's
// target is its equal share, and this region gives back what it holds
// above its own, to the regions below theirs, once its state counts
// nothing (its window ended with nothing admitted since; donate.lua):
// the allotment tables' fields go back to 0, which deletes them, so the
// tables (and the reports) hold only the states whose allotments moved
// recently, not every state that ever had a move. A state that still
// counts (v.counting, as demand.lua read it) is not asked: donate.lua
// would give nothing, and a split month's quiet states would otherwise
// cost a call each every interval until their window ended.
func (x *Exchanger) give(ctx context.Context, key string, v *view, among []string) (int64, error) {
	me, rc := x.cfg.Region.Name, x.cfg.Region
	floor := rc.MinShare(v.rule.Limit, v.rule.MinShare)
	var pool, demand int64
	for _, name := range among {
		pool += v.allotment[name]
		demand += max(0, v.demand[name])
	}
	n := int64(len(among))
	idle := demand == 0
	if n < 2 || (!idle && pool < n*floor) || (idle && v.counting) {
		return 0, nil
	}
	target := map[string]int64{}
	var surplus int64
	for _, name := range among {
		if idle {
			target[name], _ = rc.AllotmentOf(name, v.rule.Limit, v.rule.Limit)
		} else {
			target[name] = floor + mulDiv(pool-n*floor, max(0, v.demand[name]), demand)
		}
		surplus += max(0, v.allotment[name]-target[name])
	}
	deadband := max(1, v.rule.Limit/50)
	if idle {
		deadband = 1 // every unit back, or the field stays
	}
	mine := v.allotment[me] - target[me]
	if mine < deadband {
		return 0, nil
	}
	onlyIdle := 0
	if idle {
		onlyIdle = 1
	}
	share, _ := rc.Allotment(v.rule.Limit, v.rule.Limit)
	tag := statekey.Tag(x.cfg.Prefix, key)
	keys := []string{statekey.AllotmentKey(x.cfg.Prefix, tag), statekey.OutboxKey(x.cfg.Prefix, tag), key}
	var given int64
	for _, name := range among {
		short := target[name] - v.allotment[name]
		if name == me || short <= 0 {
			continue
		}
		// Never more than this region holds above its target in all
		// (reports of regions that disagree could otherwise ask more).
		want := min(mulDiv(short, mine, surplus), mine-given)
		if want < deadband/2 || want <= 0 {
			continue
		}
		got, err := donateScript.Run(ctx, x.rdb, keys, share, floor, want, name, onlyIdle).Int64()
		if err != nil {
			return given, fmt.Errorf("give %d to %s: %w", want, name, err)
		}
		if got > 0 {
			given += got
			x.mu.Lock()
			x.gifts = append(x.gifts, gift{key: key, to: name, units: got, at: time.Now()})
			x.mu.Unlock()
		}
	}
	return given, nil
}

// reportShares sets tollgate_region_share of every split rule: this
// region's allotment as a fraction of the limit, averaged over the
// rule's states it counted demand on or holds moved units of (none:
// the equal share).
func (x *Exchanger) reportShares(rules map[[3]byte]SplitRule, views map[string]*view) {
	sum, count := map[string]float64{}, map[string]int{}
	for _, v := range views {
		sum[v.rule.Name] += float64(v.allotment[x.cfg.Region.Name]) / float64(v.rule.Limit)
		count[v.rule.Name]++
	}
	x.metrics.share.Reset()
	for _, r := range rules {
		if r.Limit <= 0 {
			continue
		}
		if count[r.Name] > 0 {
			x.metrics.share.WithLabelValues(r.Name).Set(sum[r.Name] / float64(count[r.Name]))
			continue
		}
		share, _ := x.cfg.Region.Allotment(r.Limit, r.Limit)
		x.metrics.share.WithLabelValues(r.Name).Set(float64(share) / float64(r.Limit))
	}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// mulDiv returns a×b/c rounded down, for a, b ≥ 0 and b ≤ c, c > 0 (a
// part of a, so the quotient is at most a), without the product
// overflowing: a split window's limit may be billions (a month's tokens)
// and demand as large.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(q)
}
