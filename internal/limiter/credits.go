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
// by the entry's ID). Balance is Line − the counter.
type Credits struct {
	// Key holds the units consumed (consumption less refunds); Log is the
	// consumption log, an append-only list of CreditEntry. Both must share
	// the batch's hash tag.
	Key, Log string
	// Line is the units credited (grants and adjustments, less expiries);
	// it comes from the caller (the ledger), not from the store.
	Line int64
	// Seed is what the counter starts from when Key is missing (after the
	// store lost it): the consumption the ledger recorded.
	Seed int64
	// Overdraft is how far below zero the balance may go (≥ 0).
	Overdraft int64
	// Overage admits a check past the balance: it draws what the balance
	// has down to −Overdraft and the rest counts as overage. Otherwise a
	// check whose cost would take the balance below −Overdraft is denied.
	Overage bool
}

// CreditResult is what a check did to its balance (Outcome.Credits).
type CreditResult struct {
	// Allowed is false when the balance refused the check (deny mode).
	Allowed bool
	// Balance is the balance after the check (before it, when nothing
	// was drawn).
	Balance int64
	// Drawn is the units the check took from the balance; Overage the
	// units it was admitted for past it.
	Drawn, Overage int64
}

// CreditEntry is one entry of a consumption log.
type CreditEntry struct {
	// ID orders entries in their log; the ledger records each once.
	ID string
	// Units drawn from the balance (negative: given back by a settlement);
	// Overage the units admitted past it (negative: given back).
	Units, Overage int64
	// AtUS is the store's time of the draw (µs).
	AtUS int64
	// HoldID names the hold the entry is of ("" for a plain check).
	HoldID string
}

// ErrBadCredits is returned for credits without keys or with a negative
// overdraft.
var ErrBadCredits = errors.New("limiter: credits need a key, a log and an overdraft ≥ 0")

func (c *Credits) validate() error {
	if c != nil && (c.Key == "" || c.Log == "" || c.Overdraft < 0) {
		return ErrBadCredits
	}
	return nil
}

// decideCredits returns what a check of cost does to a balance of line −
// consumed: whether it may, and the units it draws and takes as overage.
// The Redis script decides the same way (check.lua).
func decideCredits(c *Credits, consumed, cost int64) CreditResult {
	balance := c.Line - consumed
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

// settleCredits returns the units a settlement moves delta units (the
// actual cost less the estimate) between a hold's balance and overage:
// units given back leave the overage first, then the balance (at most what
// the hold drew); units taken come from the balance while it stays at or
// above −overdraft, and the rest is overage.
func settleCredits(line, overdraft, consumed, drawn, overage, delta int64) (units, over int64) {
	if delta < 0 {
		back := -delta
		over = -min(back, overage)
		units = -min(back+over, drawn)
		return units, over
	}
	room := max(0, line-consumed+overdraft)
	units = min(delta, room)
	return units, delta - units
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

// CreditLogs is what the ledger's writer needs of a store that keeps
// balances: each balance's counter and consumption log read together, the
// log trimmed once recorded, and the counter repaired or rebuilt.
// MemoryStore and the Redis store implement it.
type CreditLogs interface {
	// ReadCredits returns the counter at key (present false when it is
	// missing) and up to max entries of the log after the entry after,
	// in one atomic read.
	ReadCredits(ctx context.Context, key, log, after string, max int) (consumed int64, present bool, entries []CreditEntry, err error)
	// TrimCredits drops the log's entries up to and including through.
	TrimCredits(ctx context.Context, log, through string) error
	// AdjustCredits adds delta to the counter at key, or sets it to seed
	// when it is missing.
	AdjustCredits(ctx context.Context, key string, delta, seed int64) error
}
