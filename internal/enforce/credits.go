package enforce

import (
	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/statekey"
)

// CreditsResult is a decision's part about the tenant's prepaid balance
// (units of its plan).
type CreditsResult = tollgate.CreditsDecision

// credits returns who's prepaid balance, nil when its plan does not draw
// on credits (or who is anonymous).
func (who caller) credits() *credits.Hot {
	if who.tenant == nil {
		return nil
	}
	return who.tenant.Credits
}

// creditsFor returns the limiter's view of hot on its two keys (as
// requests lays them out: the counter, then the log, of equal length).
// The store applies the line's expiries at its own clock, the one it
// decides the check at: an api process's clock does not matter.
func (c *Checker) creditsFor(hot *credits.Hot, keys string) *limiter.Credits {
	lc := hot.Limiter(statekey.SplitCredits(keys))
	return &lc
}

// balanceDecided completes d with what the store did to tenant's prepaid
// balance (tenant nil, or without credits: nothing), and returns the
// reason of a denial the balance made and no enforce rule did, else "".
// The top-level fields of such a denial describe no rule.
func balanceDecided(d *Decision, balance limiter.CreditResult, tenant *snapshot.Tenant) (refused string) {
	if tenant == nil || tenant.Credits == nil {
		return ""
	}
	if balance.Unknown {
		// The store has no counter of the balance (it lost it, or the
		// credits drainer has not made it from the ledger yet): nothing
		// was drawn, as when the store is down.
		d.Degraded = true
	} else {
		d.Credits = &CreditsResult{Balance: balance.Balance, Drawn: balance.Drawn, Overage: balance.Overage}
	}
	if d.Allowed || balance.Allowed || ruleDenied(d.Rules) {
		return ""
	}
	d.governing = -1
	if balance.Unknown {
		d.RetryAfterMS = outageRetryMS
		return tollgate.ReasonUnavailable
	}
	d.RetryAfterMS = -1 // until a top-up
	return tollgate.ReasonCreditsExhausted
}

// ruleDenied reports whether an enforce rule denied.
func ruleDenied(rules []RuleResult) bool {
	for i := range rules {
		if !rules[i].Allowed && rules[i].Mode == plans.ModeEnforce {
			return true
		}
	}
	return false
}
