package tollgate

import "time"

// The records below are the admin API's schemas of the same names in
// openapi.yaml, defined once: the feature packages (internal/tenants,
// internal/metering, internal/billing) keep, count and price with them,
// and the Go SDK (package client) decodes the API's answers into them.

// Tenant is a customer organisation subscribed to one plan; its API keys
// share the plan.
type Tenant struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	PlanID int64  `json:"plan_id"`
	// Status is active or suspended.
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Counts are decisions and units, split by outcome. Units are the checks'
// costs: allowed units are what gets billed.
type Counts struct {
	Allowed      int64 `json:"allowed"`
	Denied       int64 `json:"denied"`
	AllowedUnits int64 `json:"allowed_units"`
	DeniedUnits  int64 `json:"denied_units"`
	// ExpiredHolds counts holds that expired unsettled (their units, 0
	// when refunded, are in AllowedUnits under the reason hold_expired);
	// kept in the tenant rollups and statements, not in the totals or
	// late usage.
	ExpiredHolds int64 `json:"expired_holds,omitempty"`
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Allowed += o.Allowed
	c.Denied += o.Denied
	c.AllowedUnits += o.AllowedUnits
	c.DeniedUnits += o.DeniedUnits
	c.ExpiredHolds += o.ExpiredHolds
}

// Decisions returns allowed + denied.
func (c Counts) Decisions() int64 { return c.Allowed + c.Denied }

// TenantTotal is one tenant's Counts; TenantID "" sums decisions without
// a tenant (anonymous callers, unknown keys).
type TenantTotal struct {
	TenantID   string `json:"tenant_id"`
	TenantName string `json:"tenant_name,omitempty"`
	Counts
}

// Totals are Counts overall in a range, by tenant (most allowed units
// first) and by tier (authenticated, anonymous).
type Totals struct {
	Counts
	ByTenant []TenantTotal     `json:"by_tenant"`
	ByTier   map[string]Counts `json:"by_tier"`
}

// UsageLine is a month's usage by one key of one resource. KeyID is ""
// for decisions without a key.
type UsageLine struct {
	KeyID     string `json:"key_id"`
	KeyPrefix string `json:"key_prefix,omitempty"`
	KeyName   string `json:"key_name,omitempty"`
	Resource  string `json:"resource"`
	Counts
	// ExpiredHoldUnits are the units of AllowedUnits that holds expired
	// unsettled kept (charged on expiry; a refunded one keeps 0).
	ExpiredHoldUnits int64 `json:"expired_hold_units,omitempty"`
}

// PlanPeriod is the charge of one span of a statement's month on one
// plan. Money is integer minor units of the plan's currency.
type PlanPeriod struct {
	Plan   string    `json:"plan"`
	PlanID int64     `json:"plan_id"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	// SpanUS and MonthUS are the proration fraction's numerator and
	// denominator.
	SpanUS            int64 `json:"span_us"`
	MonthUS           int64 `json:"month_us"`
	PlanBaseFeeMinor  int64 `json:"plan_base_fee_minor"`
	BaseFeeMinor      int64 `json:"base_fee_minor"`
	PlanIncludedUnits int64 `json:"plan_included_units"`
	IncludedUnits     int64 `json:"included_units"`
	// UsedUnits is the allowed units of the span's hours; CreditUnits
	// those of them that drew on the tenant's prepaid balance (drawn,
	// admitted past it, settled past it), which the included units do not
	// cover; CreditOverageUnits those admitted past the balance.
	UsedUnits          int64 `json:"used_units"`
	CreditUnits        int64 `json:"credit_units"`
	CreditOverageUnits int64 `json:"credit_overage_units"`
	// OverageUnits is max(0, UsedUnits − CreditUnits − IncludedUnits) +
	// CreditOverageUnits, priced in Overage.
	OverageUnits int64         `json:"overage_units"`
	Overage      []OverageLine `json:"overage"`
	OverageMinor int64         `json:"overage_minor"`
	TotalMinor   int64         `json:"total_minor"`
}

// OverageLine prices overage units FromUnit..ToUnit (1-based, inclusive)
// at UnitMinor each.
type OverageLine struct {
	FromUnit    int64 `json:"from_unit"`
	ToUnit      int64 `json:"to_unit"`
	Units       int64 `json:"units"`
	UnitMinor   int64 `json:"unit_minor"`
	AmountMinor int64 `json:"amount_minor"`
}
