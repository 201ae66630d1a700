package tollgate

// Reasons a check decision gives (the check API's "reason").
const (
	ReasonOK          = "ok"
	ReasonRateLimited = "rate_limited"
	// ReasonSpendCap: the tenant's spend cap for the month is reached
	// (the rule plans.SpendCapRuleName denied); retry when the month ends.
	ReasonSpendCap = "spend_cap"
	// ReasonHoldExpired is the usage reason of a hold's expiry unsettled
	// (refunded or charged): statements list such holds apart.
	ReasonHoldExpired = "hold_expired"
	// ReasonCreditsExhausted: the tenant's prepaid balance cannot cover
	// the cost (its plan denies past the balance); retry after a top-up.
	ReasonCreditsExhausted = "credits_exhausted"
	ReasonInvalidKey       = "invalid_key"
	ReasonKeyRevoked       = "key_revoked"
	ReasonKeyExpired       = "key_expired"
	ReasonTenantSuspended  = "tenant_suspended"
	ReasonUnavailable      = "unavailable"
	// ReasonKeyRequired: an anonymous caller, and no active anonymous plan.
	ReasonKeyRequired = "key_required"
)

// Tiers of callers: with an API key, or anonymous (limited per IP).
const (
	TierAuthenticated = "authenticated"
	TierAnonymous     = "anonymous"
)

// Resources that usage records besides a plan's route templates.
const (
	// ResourceOther is what usage records for a check that matched none of
	// its plan's routes, and what a tenant's resources beyond its monthly
	// cap are folded into.
	ResourceOther = "(other)"
	// ResourceAny is a check that named no resource.
	ResourceAny = "*"
)

// UsageEvent is one check decision as the usage pipeline counts it. The
// check path (internal/enforce) produces it and internal/metering counts it;
// it lives here so that neither imports the other. AtUS is µs since the
// epoch, on the limiter store's clock.
type UsageEvent struct {
	AtUS     int64
	TenantID string
	KeyID    string
	Tier     string
	IP       string
	// Resource is the route the check matched (a template of the caller's
	// plan, see plans.Routes), ResourceOther when it matched none, or
	// ResourceAny when the check named no resource: never a raw path.
	Resource string
	Cost     int64
	Allowed  bool
	Reason   string
	// Denied names the rules that denied (none when allowed).
	Denied []string
	// Crossed are the tenant's quota thresholds (month-to-date counts)
	// this check took its monthly quota count past; nil for none.
	Crossed []int64
	// Hold is HoldOpened for an admitted check that opened a hold (a
	// decision whose units count at settlement: Cost is the estimate),
	// HoldSettled for a hold's settlement or expiry (units only, Cost the
	// units the hold finally counts, no decision), HoldNone otherwise.
	Hold int
	// Expired is set on a HoldSettled event of a hold that expired
	// unsettled.
	Expired bool
	// HoldHash names the hold of a HoldSettled event: 32 hex digits of a
	// hash of its ID (never the ID itself). A hold's settlement is handed
	// on at every final answer, a repeated one too (the first answer may
	// have been lost with its caller); the usage pipeline counts one hold
	// once, whichever event reaches it first. "" counts the event as is.
	HoldHash string
	// Recorded is set when the store already journaled the event's units
	// (and decision) in the step that decided it (limiter.Outcome.Recorded,
	// Settlement.Recorded): the usage worker applies them from there, and
	// a recorder counts only what the journal lacks (the anonymous
	// caller's address, the crossings).
	Recorded bool
}

// Kinds of UsageEvent.Hold.
const (
	HoldNone    = 0
	HoldOpened  = 1
	HoldSettled = 2
)

// CreditsDecision is a check decision's part about the tenant's prepaid
// balance, in units of its plan (the check API's schema of that name).
type CreditsDecision struct {
	// Balance after the check (before it, when nothing was drawn).
	Balance int64 `json:"balance"`
	// Drawn is the units the check took from the balance; Overage the
	// units admitted past it (billed).
	Drawn   int64 `json:"drawn"`
	Overage int64 `json:"overage"`
}

// Settlement is the check API's answer to a settlement of a hold (the
// body of a 200 from /v1/settle).
type Settlement struct {
	HoldID   string `json:"hold_id"`
	Estimate int64  `json:"estimate"`
	// Cost is the units the hold counts (and bills): the settled cost, 0
	// once refunded on expiry, the estimate once charged on expiry.
	Cost int64 `json:"cost"`
	// Status is "settled", or "refunded" / "charged" for a hold that
	// expired unsettled.
	Status string `json:"status"`
	// Repeated is true when the settlement repeats an earlier one.
	Repeated bool `json:"repeated"`
}

// Standing is where an API key stands now with every rule of its plan,
// whatever the resource: the check API's answer of GET /v1/me.
type Standing struct {
	TenantID string `json:"tenant_id"`
	// Tenant is the tenant's name.
	Tenant string         `json:"tenant"`
	KeyID  string         `json:"key_id"`
	Plan   string         `json:"plan"`
	Rules  []RuleStanding `json:"rules"`
	// Quota is the month's units against the plan's included units when
	// the plan has a monthly quota; nil when its quota_mode is none.
	Quota *QuotaStanding `json:"quota,omitempty"`
	// Credits is the tenant's prepaid balance when its plan draws on
	// credits; nil otherwise.
	Credits *CreditsStanding `json:"credits,omitempty"`
}

// RuleStanding is one rule of the plan and what it has left now.
// Durations are ms, rounded up.
type RuleStanding struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	// Mode is "enforce" or "shadow" (reported, never denies).
	Mode string `json:"mode"`
	// Resource is the rule's resource pattern; Scope what it counts per:
	// "key", "tenant" or "ip" (the caller's address as the server sees it).
	Resource     string `json:"resource"`
	Scope        string `json:"scope"`
	Limit        int64  `json:"limit"`
	WindowS      int64  `json:"window_s"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
}

// QuotaStanding is the calendar month's units counted by the plan's
// monthly quota rule against its included units. Mode "shadow" is an
// overage quota: Used counts every unit of the month, past IncludedUnits
// too, and the units beyond are billed (they are in the usage and the
// statement).
type QuotaStanding struct {
	Mode          string `json:"mode"`
	IncludedUnits int64  `json:"included_units"`
	Used          int64  `json:"used"`
	Remaining     int64  `json:"remaining"`
	ResetAfterMS  int64  `json:"reset_after_ms"`
}

// CreditsStanding is a tenant's prepaid balance now (units of its plan):
// what it may still draw before its plan denies (Mode "deny") or bills
// overage (Mode "overage") is Balance + Overdraft.
type CreditsStanding struct {
	Mode      string `json:"mode"`
	Balance   int64  `json:"balance"`
	Overdraft int64  `json:"overdraft"`
	// Unknown is true while the limiter store has no counter of the
	// balance (it lost it, or the balance is new): until the credits
	// drainer makes it from the ledger (within a second) checks draw
	// nothing, and Balance is the ledger's as the api process's snapshot
	// has it.
	Unknown bool `json:"unknown,omitempty"`
}
