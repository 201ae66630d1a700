package limiter

import (
	"context"
	"errors"
	"strconv"
)

// Credits asks a Batch to draw its cost on a prepaid balance in the same
// atomic step as its rules: an admitted check that is not a dry run adds
// the units it drew to the counter at Key and appends what it drew to the
// consumption log at Log, from which the ledger is written (exactly once,
// by the entry's ID). Balance is the line at the store's time (LineAt)
// less the counter.
//
// The store never makes the counter: the ledger's writer does (see
// CreditLogs.RebuildCredits), from the ledger. A check that finds it
// missing — the store lost it, or the writer has not made it yet — draws
// nothing (CreditResult.Unknown): in deny mode a check that costs
// something is not admitted; in overage mode it is admitted (without a
// hold: a hold is refused) and its units are logged deferred, for the
// writer to draw what the ledger's balance allows of them.
type Credits struct {
	// Key holds the units consumed (consumption less refunds); Log is the
	// consumption log, an append-only list of CreditEntry. Both must share
	// the batch's hash tag.
	Key, Log string
	// Line is the units credited (grants and adjustments, less expiries);
	// it comes from the caller (the ledger), not from the store.
	Line int64
	// Expiring are grants within Line that expire, soonest first: from
	// its time on (the store's clock, as the decision's) each one's units
	// no longer count (LineAt). At most MaxCreditExpiries.
	Expiring []CreditExpiry
	// Overdraft is how far below zero the balance may go (≥ 0).
	Overdraft int64
	// Overage admits a check past the balance: it draws what the balance
	// has down to −Overdraft and the rest counts as overage. Otherwise a
	// check whose cost would take the balance below −Overdraft is denied.
	Overage bool
}

// CreditExpiry is units of a line that stop counting at AtUS (µs).
type CreditExpiry struct {
	AtUS, Units int64
}

// MaxCreditExpiries bounds Credits.Expiring: what one check carries.
const MaxCreditExpiries = 5

// LineAt returns c's line at nowUS: Line less the units of the expiries
// at or before nowUS.
func (c *Credits) LineAt(nowUS int64) int64 {
	line := c.Line
	for _, e := range c.Expiring {
		if e.AtUS > nowUS {
			break
		}
		line -= e.Units
	}
	return line
}

// CreditResult is what a check did to its balance (Outcome.Credits).
type CreditResult struct {
	// Allowed is false when the balance refused the check (deny mode).
	Allowed bool
	// Unknown is true when the balance's counter was missing: nothing was
	// drawn and Balance is 0 (see Credits).
	Unknown bool
	// Balance is the balance after the check (before it, when nothing
	// was drawn).
	Balance int64
	// Drawn is the units the check took from the balance; Overage the
	// units it was admitted for past it.
	Drawn, Overage int64
}

// Deferred says what the ledger's writer does with the units of a log
// entry written while the balance's counter was missing: it draws what
// the ledger's balance allows of them, down to −overdraft, and counts the
// rest as overage or as unpaid.
type Deferred int

// The ways of a deferred entry.
const (
	// NotDeferred: the entry's units were drawn by the store.
	NotDeferred Deferred = 0
	// DeferredOverage: the rest is overage (a balance in overage mode).
	DeferredOverage Deferred = 1
	// DeferredUnpaid: the rest is unpaid (a hold settled on a balance in
	// deny mode).
	DeferredUnpaid Deferred = 2
)

// CreditEntry is one entry of a consumption log.
type CreditEntry struct {
	// ID orders entries in their log; the ledger records each once.
	ID string
	// Units drawn from the balance (negative: given back by a settlement);
	// Overage the units admitted past it (negative: given back).
	Units, Overage int64
	// Unpaid is units a hold was settled for past −overdraft on a balance
	// in deny mode: used, never drawn, never billed.
	Unpaid int64
	// Deferred, when set, says Units (> 0) were admitted or settled
	// without the balance known, for the ledger to split.
	Deferred Deferred
	// AtUS is the store's time of the draw (µs).
	AtUS int64
	// OpenedUS, for the entry of a hold's settlement or expiry, is the
	// store's time of the check that opened the hold (µs): its units are
	// billed then, as its draw at the check and its usage are; 0 for
	// other entries (and a settlement of a hold an earlier version kept).
	OpenedUS int64
	// HoldOverage, for the entry of a hold's settlement that gives
	// overage back (Overage < 0), is the overage the store had counted
	// for the hold before it: the drainer gives back first what of it
	// was billed, then what it drew on the balance itself; 0 otherwise.
	HoldOverage int64
	// HoldID names the hold the entry is of ("" for a plain check).
	HoldID string
}

// ErrBadCredits is returned for credits without keys, with a negative
// overdraft, or with expiries out of order, negative or too many.
var ErrBadCredits = errors.New("limiter: credits need a key, a log, an overdraft ≥ 0 and at most 5 expiries in time order")

func (c *Credits) validate() error {
	if c == nil {
		return nil
	}
	if c.Log == "" {
		return ErrBadCredits
	}
	return c.validTerms()
}

// validTerms is validate without the log, which a settlement's terms
// (Settle.Credits) need not name.
func (c *Credits) validTerms() error {
	if c.Key == "" || c.Overdraft < 0 || len(c.Expiring) > MaxCreditExpiries {
		return ErrBadCredits
	}
	for i, e := range c.Expiring {
		if e.Units < 0 || i > 0 && e.AtUS < c.Expiring[i-1].AtUS {
			return ErrBadCredits
		}
	}
	return nil
}

// decideCredits returns what a check of cost at nowUS does to a balance
// whose counter is consumed (present false: missing): whether it may, and
// the units it draws and takes as overage. hold says the check opens a
// hold. The Redis script decides the same way (check.lua).
func decideCredits(c *Credits, consumed int64, present bool, cost int64, dry, hold bool, nowUS int64) CreditResult {
	if !present {
		// Unknown: nothing is drawn. Deny mode (and a hold, which needs to
		// know what it drew) refuses a cost; overage mode admits, deferred.
		return CreditResult{Unknown: true, Allowed: cost == 0 || dry || c.Overage && !hold}
	}
	balance := c.LineAt(nowUS) - consumed
	r := CreditResult{Allowed: true, Balance: balance, Drawn: cost}
	if c.Overage {
		room := max(0, balance+c.Overdraft)
		r.Drawn = min(cost, room)
		r.Overage = cost - r.Drawn
		return r
	}
	if cost > 0 && balance-cost < -c.Overdraft {
		r.Allowed, r.Drawn = false, 0
	}
	return r
}

// creditMove is what a settlement does to a hold's balance: the units
// drawn (negative: given back), the overage (negative: given back), the
// unpaid units, and whether the units are deferred (the counter was
// missing).
type creditMove struct {
	units, overage, unpaid int64
	deferred               Deferred
}

// settleCredits returns the move a settlement of delta units (the actual
// cost less the estimate) makes on a hold's balance, whose counter is
// consumed (present false: missing), the hold having drawn drawn units
// and over units of overage. line, overdraft and overage (the mode) are
// the balance's terms at the settlement: those it has now
// (Settle.Credits) where the caller sent them, else those the hold's
// check carried, with line as of the settlement's time. Units given back
// leave the overage first, then the balance (at most what the hold
// drew); units taken come from the balance while it stays at or above
// −overdraft, and the rest is overage (overage mode) or unpaid (deny
// mode): the balance never goes below −overdraft. On a missing counter
// units taken are deferred to the ledger's writer, which splits them the
// same way.
func settleCredits(line, overdraft int64, overage bool, consumed int64, present bool, drawn, over, delta int64) creditMove {
	var m creditMove
	if delta < 0 {
		back := -delta
		m.overage = -min(back, over)
		m.units = -min(back+m.overage, drawn)
		return m
	}
	if !present {
		m.units, m.deferred = delta, DeferredUnpaid
		if overage {
			m.deferred = DeferredOverage
		}
		return m
	}
	room := max(0, line-consumed+overdraft)
	m.units = min(delta, room)
	if overage {
		m.overage = delta - m.units
	} else {
		m.unpaid = delta - m.units
	}
	return m
}

// nextEntryID returns the log entry ID after last ("ms-seq", as Redis
// streams name entries) for an entry at nowUS.
func nextEntryID(last string, nowUS int64) string {
	ms := nowUS / 1000
	lastMS, lastSeq := splitEntryID(last)
	if ms <= lastMS {
		return strconv.FormatInt(lastMS, 10) + "-" + strconv.FormatInt(lastSeq+1, 10)
	}
	return strconv.FormatInt(ms, 10) + "-0"
}

func splitEntryID(id string) (ms, seq int64) {
	for i := 0; i < len(id); i++ {
		if id[i] == '-' {
			ms, _ = strconv.ParseInt(id[:i], 10, 64)
			seq, _ = strconv.ParseInt(id[i+1:], 10, 64)
			return ms, seq
		}
	}
	return 0, 0
}

// EntryAfter reports whether log entry ID a comes after b.
func EntryAfter(a, b string) bool {
	am, as := splitEntryID(a)
	bm, bs := splitEntryID(b)
	return am > bm || am == bm && as > bs
}

// CreditRead is a balance's counter and log as one ReadCredits found them.
type CreditRead struct {
	// Consumed is the counter; Present is false when it is missing.
	Consumed int64
	Present  bool
	Entries  []CreditEntry
	// NowUS is the store's clock at the read (the clock checks are decided
	// at): a draw at or before it that is not among Entries was read
	// before.
	NowUS int64
}

// CreditLogs is what the ledger's writer needs of a store that keeps
// balances: each balance's counter and consumption log read together, the
// log trimmed once recorded, and the counter repaired or made.
// MemoryStore and the Redis store implement it.
type CreditLogs interface {
	// ReadCredits returns the counter at key and up to max entries of the
	// log after the entry after, with the store's clock, in one atomic
	// read.
	ReadCredits(ctx context.Context, key, log, after string, max int) (CreditRead, error)
	// TrimCredits drops the log's entries up to and including through.
	TrimCredits(ctx context.Context, log, through string) error
	// AdjustCredits adds delta to the counter at key when it exists.
	AdjustCredits(ctx context.Context, key string, delta int64) error
	// RebuildCredits sets the missing counter at key to consumed, when the
	// log holds no entry after the entry after (nothing the caller has not
	// recorded), in one atomic step; made is false when it did not (the
	// counter exists, or entries came since the caller's read).
	RebuildCredits(ctx context.Context, key, log, after string, consumed int64) (made bool, err error)
	// ReclaimCredits takes back up to want units of what a counter below
	// zero leaves to draw (a region's escrow: its counter stands at
	// counted − escrow), in one atomic step, and returns the units taken:
	// at most −counter, 0 when the counter is missing or not below zero.
	ReclaimCredits(ctx context.Context, key string, want int64) (taken int64, err error)
}
