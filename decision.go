package tollgate

// Reasons a check decision gives (the check API's "reason").
const (
	ReasonOK              = "ok"
	ReasonRateLimited     = "rate_limited"
	ReasonInvalidKey      = "invalid_key"
	ReasonKeyRevoked      = "key_revoked"
	ReasonKeyExpired      = "key_expired"
	ReasonTenantSuspended = "tenant_suspended"
	ReasonUnavailable     = "unavailable"
	// ReasonKeyRequired: an anonymous caller, and no active anonymous plan.
	ReasonKeyRequired = "key_required"
)

// Tiers of callers: with an API key, or anonymous (limited per IP).
const (
	TierAuthenticated = "authenticated"
	TierAnonymous     = "anonymous"
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
	Resource string
	Cost     int64
	Allowed  bool
	Reason   string
	// Denied names the rules that denied (none when allowed).
	Denied []string
	// Hold is HoldOpened for an admitted check that opened a hold (a
	// decision whose units count at settlement: Cost is the estimate),
	// HoldSettled for a hold's settlement or expiry (units only, Cost the
	// units the hold finally counts, no decision), HoldNone otherwise.
	Hold int
	// Expired is set on a HoldSettled event of a hold that expired
	// unsettled.
	Expired bool
}

// Kinds of UsageEvent.Hold.
const (
	HoldNone    = 0
	HoldOpened  = 1
	HoldSettled = 2
)
