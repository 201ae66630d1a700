package redisstore

import (
	_ "embed"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/statekey"
)

// The lean path. lean.lua decides the common shapes of checks — GCRA,
// leaky and token bucket rules, and the calendar-month fixed windows of
// the monthly quota and the spend cap, without holds, global_shared
// (their admissions written to the region's outbox) or not — exactly as
// check.lua does (the same state, outbox, answers and reply), from plain
// numeric arguments: a check that goes out alone costs Redis no MessagePack
// decoding, no table per rule and no rule-parameter table. A call of at
// most maxLeanChecks checks, all of those shapes, runs lean.lua (or
// lean1.lua, its tightest form, for one check of one GCRA or bucket
// rule); any other call runs check.lua, which remains the one script for
// every shape.

var (
	//go:embed lean.lua
	leanLua string
	//go:embed lean1.lua
	lean1Lua string
	// rateLua decides one GCRA or bucket rule, for every check script.
	//go:embed rate.lua
	rateLua string
	// calendarLua is the calendar arithmetic of check.lua and lean.lua.
	//go:embed calendar.lua
	calendarLua string

	leanScript  = redis.NewScript(splice(leanSource(leanLua), "--[[calendar.lua]]", calendarLua))
	lean1Script = redis.NewScript(leanSource(lean1Lua))
)

// leanSource returns a lean script's source: src with check.lua's prelude
// (its wire constants and helpers, as settle.lua has them) and rate.lua
// in place of the marks that name them.
func leanSource(src string) string {
	return splice(splice(src, "--[[check.lua prelude]]", checkPrelude()), "--[[rate.lua]]", rateLua)
}

// splice returns src with text in place of mark, which src must hold
// once.
func splice(src, mark, text string) string {
	if strings.Count(src, mark) != 1 {
		panic("redisstore: a script must say " + mark + " once")
	}
	return strings.Replace(src, mark, text, 1)
}

// prepare lays out checks as the arguments of the script that decides
// them, and returns that script and its ARGV (KEYS are c.keys).
func (s *Store) prepare(c *call, checks []*pending) (*redis.Script, []any) {
	if !s.NoLean && len(checks) <= maxLeanChecks && leanChecks(checks) {
		c.encodeLean(checks, s.ExtraTTL.Milliseconds())
		if len(checks) == 1 && len(checks[0].batch.Requests) == 1 && checks[0].batch.Requests[0].Params.Algorithm != limiter.FixedWindow {
			return lean1Script, c.args // the lone check of one rule
		}
		return leanScript, c.args
	}
	c.encode(checks, s.ExtraTTL.Milliseconds())
	return checkScript, s.scriptArgs(c, checks)
}

// maxLeanChecks bounds the checks of a call lean.lua decides. A larger
// batch goes to check.lua, whose one MessagePack argument costs Redis
// less than hundreds of arguments would, and the store no boxing of each
// number: batching pays the per-call cost lean.lua saves.
const maxLeanChecks = 4

// leanChecks reports whether lean.lua can decide every one of checks.
func leanChecks(checks []*pending) bool {
	for _, p := range checks {
		if !leanBatch(&p.batch) {
			return false
		}
	}
	return true
}

// leanBatch reports whether lean.lua can decide b: no hold, no prepaid
// balance (Credits), no global_split rule (Split: its allotment and
// demand tables are check.lua's; a global_shared rule's outbox the lean
// scripts write), and every rule a GCRA, leaky or token bucket, or a
// fixed window aligned to calendar months (so no concurrency rule, and
// b.Lease plays no part). TestLeanKnowsEveryField fails when
// limiter.Batch, Request or Params gain a field this function has not
// been taught.
func leanBatch(b *limiter.Batch) bool {
	if b.Hold != nil || b.Credits != nil { // a balance is drawn by check.lua only
		return false
	}
	for i := range b.Requests {
		p := &b.Requests[i].Params
		if p.Split { // a region's allotments are check.lua's
			return false
		}
		switch p.Algorithm {
		case limiter.GCRA, limiter.LeakyBucket, limiter.TokenBucket:
		case limiter.FixedWindow:
			if p.Calendar != limiter.CalendarMonth || p.AnchorFirstRequest {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// encodeLean lays out checks as lean.lua's KEYS and ARGV.
func (c *call) encodeLean(checks []*pending, extraTTLMS int64) {
	report := int64(0)
	for _, p := range checks {
		if p.batch.ReportState {
			report = 1
		}
	}
	c.args = append(c.args[:0], extraTTLMS, report)
	for _, p := range checks {
		b := &p.batch
		dry := int64(0)
		if b.DryRun {
			dry = 1
		}
		usage := ""
		if journals(b) {
			usage = b.Usage
		}
		c.args = append(c.args, b.NowUS, b.Cost, dry, int64(len(b.Requests)), usage)
		for i := range b.Requests {
			r := &b.Requests[i]
			c.keys = append(c.keys, r.Key)
			c.args = append(c.args, leanKind(r))
			if r.Params.Algorithm == limiter.FixedWindow {
				start, end := monthBounds(b.NowUS)
				c.args = append(c.args, r.Params.Limit, start, end)
			} else {
				a, b, c3 := defNumbers(r.Params)
				c.args = append(c.args, a, b, c3)
			}
			if r.Params.Exchange {
				c.args = append(c.args, outboxHead(r.Params))
			}
		}
	}
	c.appendJournal(checks)
}

// appendJournal appends to c.keys the journal key of the call of checks,
// when one of them journals its usage: the journal of its first such
// check's hash tag (on a Cluster every check of a call shares the slot).
func (c *call) appendJournal(checks []*pending) {
	for _, p := range checks {
		if journals(&p.batch) {
			c.keys = append(c.keys, statekey.JournalKeyOf(firstKey(p.batch)))
			return
		}
	}
}

// journals reports whether a check of b journals its usage (statekey.go):
// it names a row and is not a dry run.
func journals(b *limiter.Batch) bool { return b.Usage != "" && !b.DryRun }

// defNumbers returns the three numbers check.lua reads of p, by
// algorithm: gcra and leaky_bucket the emission interval T, the burst and
// T × burst (the tolerance); token_bucket its unit (T, or 1 when it never
// refills), the burst and 1 when it refills (else 0); the windows the
// limit, the period (µs) and 0.
func defNumbers(p limiter.Params) (a, b, c int64) {
	switch p.Algorithm {
	case limiter.GCRA, limiter.LeakyBucket:
		interval, burst := p.EmissionInterval(), p.EffectiveBurst()
		return interval, burst, interval * burst
	case limiter.TokenBucket:
		if unit := p.EmissionInterval(); unit > 0 {
			return unit, p.EffectiveBurst(), 1
		}
		return 1, p.EffectiveBurst(), 0
	}
	return p.Limit, p.PeriodUS, 0
}

// monthBounds is monthOf; tests replace it to give lean.lua another
// month's bounds.
var monthBounds = monthOf

// monthOf returns the start and end (µs) of the UTC calendar month of
// nowUS, or of this process's clock when nowUS is 0 (Redis's clock decides;
// lean.lua works the month out itself when its time falls outside).
func monthOf(nowUS int64) (start, end int64) {
	t := time.Now().UTC()
	if nowUS != 0 {
		t = time.UnixMicro(nowUS).UTC()
	}
	first := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	return first.UnixMicro(), first.AddDate(0, 1, 0).UnixMicro()
}
