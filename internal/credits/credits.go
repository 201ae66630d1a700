// Package credits is Tollgate's prepaid credits: a tenant's balance made
// of grants (amount, optional expiry, priority), drawn on the hot path in
// the same script call as the rules (limiter.Credits), and the ledger,
// the append-only record in Postgres of every unit that moved — grants,
// consumption, expiries, refunds and adjustments, each with its cause.
//
// The balance is line − consumed. The line (grants and adjustments, less
// expiries) is the ledger's and reaches the check path through its
// snapshot (a change announces itself, so every API process sees a top-up
// within a second), with the expiries of its grants, which the check
// script applies at its own clock. Consumed is a counter the check script
// keeps in Redis beside the rules' state; each draw also appends an entry
// to the tenant's consumption log, a Redis stream in the same hash slot,
// so a draw is recorded by the script call that made it, not by the API
// process's memory. The Drainer writes the log into the ledger exactly
// once (by entry ID), draws each entry on the grants soonest-expiring
// first, expires grants, emits credits.low, credits.exhausted and
// credits.expiring, and measures and repairs the drift between the
// counter and the ledger. Only the Drainer makes a counter, from the
// ledger, once it has recorded every entry of the log: until then (a
// new balance, or one Redis lost) checks draw nothing on it (see
// limiter.Credits).
package credits

import (
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/statekey"
)

// Mode is what a plan does with usage past a tenant's balance.
type Mode string

// The modes.
const (
	// ModeDeny refuses a check whose cost would take the balance below
	// −overdraft (reason credits_exhausted).
	ModeDeny Mode = "deny"
	// ModeOverage admits it: the balance is drawn down to −overdraft and
	// the rest is billed as overage on the statement.
	ModeOverage Mode = "overage"
)

// PlanSettings are a plan's credit settings. A plan without them does not
// draw on credits.
type PlanSettings struct {
	PlanID int64 `json:"plan_id"`
	Mode   Mode  `json:"mode"`
	// Overdraft is how far below zero the balance may go (units).
	Overdraft int64 `json:"overdraft"`
	// LowThreshold is the balance at or under which credits.low is
	// emitted (0: never).
	LowThreshold int64 `json:"low_threshold"`
}

// Grant is units credited to a tenant.
type Grant struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	Amount   int64  `json:"amount"`
	// Remaining is what consumption has left of it (0 once expired).
	Remaining int64 `json:"remaining"`
	// Priority orders grants that expire at the same time (higher first).
	Priority  int        `json:"priority"`
	ExpiresAt *time.Time `json:"expires_at"`
	// ExpiredAt is when its remaining units were expired.
	ExpiredAt *time.Time `json:"expired_at"`
	Cause     string     `json:"cause"`
	CreatedAt time.Time  `json:"created_at"`
}

// Ledger row kinds.
const (
	KindGrant       = "grant"
	KindConsumption = "consumption"
	KindExpiry      = "expiry"
	KindRefund      = "refund"
	KindAdjustment  = "adjustment"
)

// Entry is one row of the ledger.
type Entry struct {
	ID       int64  `json:"id"`
	TenantID string `json:"tenant_id"`
	Kind     string `json:"kind"`
	// Units moved: positive adds to the balance.
	Units int64 `json:"units"`
	// Balance is the tenant's ledger balance after the row.
	Balance int64   `json:"balance"`
	GrantID *string `json:"grant_id"`
	Cause   string  `json:"cause"`
	// LogEntry is the consumption log entry a consumption or refund row
	// records.
	LogEntry *string   `json:"log_entry"`
	At       time.Time `json:"at"`
}

// Account is a tenant's balance as the ledger has it.
type Account struct {
	TenantID string `json:"tenant_id"`
	// Line is granted and adjusted units less expired ones; Consumed the
	// units consumed less refunds, as far as the ledger has recorded.
	Line     int64 `json:"line"`
	Consumed int64 `json:"consumed"`
	// Debt is consumed units no grant covered, paid by the next grants.
	Debt     int64  `json:"debt"`
	Position string `json:"-"`
}

// Balance is Line − Consumed.
func (a Account) Balance() int64 { return a.Line - a.Consumed }

// Hot is what the check path needs of a tenant's credits (the snapshot
// holds it).
type Hot struct {
	Mode      Mode
	Overdraft int64
	// Line and Consumed are the ledger's when the snapshot was read.
	Line, Consumed int64
	// Expiring are the live grants with an expiry, soonest first.
	Expiring []Expiring
	// expiries are Expiring as a check carries them (Prepare).
	expiries []limiter.CreditExpiry
}

// Expiring is a grant's expiry (µs) and the units it had left.
type Expiring struct {
	AtUS, Remaining int64
}

// Keys returns the state keys of a tenant's balance under prefix: its
// counter and its consumption log, with the tenant's hash tag (so they
// share the slot of its rules' state).
func Keys(prefix, tenantID string) (counter, log string) {
	tag, short := statekey.Compact(tenantID)
	return statekey.SplitCredits(string(statekey.AppendCredits(nil, prefix, tag, short)))
}

// Prepare makes the expiries a check carries from Expiring: the soonest
// ones as they are and, past limiter.MaxCreditExpiries, the rest as one
// expiry at the first of them (so they stop counting early rather than
// late, until the snapshot brings the next ones). LoadAll prepares what
// it returns; call it after changing Expiring.
func (h *Hot) Prepare() { h.expiries = h.wire() }

func (h *Hot) wire() []limiter.CreditExpiry {
	var out []limiter.CreditExpiry
	for i, e := range h.Expiring {
		if i == limiter.MaxCreditExpiries-1 && len(h.Expiring) > limiter.MaxCreditExpiries {
			rest := limiter.CreditExpiry{AtUS: e.AtUS}
			for _, r := range h.Expiring[i:] {
				rest.Units += r.Remaining
			}
			return append(out, rest)
		}
		out = append(out, limiter.CreditExpiry{AtUS: e.AtUS, Units: e.Remaining})
	}
	return out
}

// Limiter returns the limiter's view of h on a balance's keys (Keys): the
// line with its expiries, which the store applies at the decision's
// clock.
func (h *Hot) Limiter(counter, log string) limiter.Credits {
	expiries := h.expiries
	if expiries == nil && len(h.Expiring) > 0 {
		expiries = h.wire() // not prepared
	}
	return limiter.Credits{Key: counter, Log: log, Line: h.Line, Expiring: expiries,
		Overdraft: h.Overdraft, Overage: h.Mode == ModeOverage}
}
