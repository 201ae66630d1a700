// Package plans holds plans: the rules (limits) they grant and their
// pricing. Money is integer minor units of the plan's currency.
package plans

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/region"
)

// ParseID reads a plan ID as it appears in a path: a positive number. Any
// other text names no plan: the error is tollgate.ENOTFOUND.
func ParseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, tollgate.Errorf(tollgate.ENOTFOUND, "plan %s not found", s)
	}
	return id, nil
}

// AnonymousPlan is the built-in plan of callers without a key.
const AnonymousPlan = "anonymous"

// Scope says whose allowance a rule counts against.
type Scope string

// Scopes.
const (
	ScopeKey    Scope = "key"
	ScopeTenant Scope = "tenant"
	ScopeIP     Scope = "ip"
)

// Mode says whether a rule denies (enforce) or only reports (shadow).
type Mode string

// Modes.
const (
	ModeEnforce Mode = "enforce"
	ModeShadow  Mode = "shadow"
)

// FailureMode decides a rule's verdict when its store cannot be reached.
type FailureMode string

// Failure modes.
const (
	FailOpen   FailureMode = "open"
	FailClosed FailureMode = "closed"
)

// Options are algorithm-specific rule settings.
type Options struct {
	// LeakyMode is "police" (default) or "shape" for leaky_bucket.
	LeakyMode string `json:"leaky_mode,omitempty"`
	// Calendar aligns fixed_window to UTC "day" or "month".
	Calendar string `json:"calendar,omitempty"`
	// Anchor "first_request" starts a fixed window at its first request.
	Anchor string `json:"anchor,omitempty"`
	// Hold asks callers to check with a hold (an estimate settled later):
	// the SDK's middleware takes one per request when a rule says so.
	Hold bool `json:"hold,omitempty"`
	// HoldTTLS is how long a hold on this rule stays open unsettled, in
	// seconds, 1 to 86 400; 0 means the default (300 s). A check matching
	// several rules takes the shortest.
	HoldTTLS int64 `json:"hold_ttl_s,omitempty"`
	// HoldExpiry is what an unsettled hold does when it expires:
	// "refund" (default) gives the estimate back, "charge" keeps it. A
	// check matching several rules charges when any of them says so.
	HoldExpiry string `json:"hold_expiry,omitempty"`
	// RefundOn lists the outcomes of a held request that the SDK's
	// middleware settles at 0: "5xx" (a response status of 500 or more,
	// whatever the handler reported) and "timeout" (the service's own
	// deadline passed before anything was served and the handler
	// reported no cost; a caller that hangs up is no timeout). The
	// check's answer carries the union over its rules (hold_refund_on).
	RefundOn []string `json:"refund_on,omitempty"`
}

// RefundOutcomes are the values of Options.RefundOn.
var RefundOutcomes = []string{"5xx", "timeout"}

// MaxHoldTTLS is the longest a hold stays open (24 h); DefaultHoldTTLS
// its default (5 min).
const (
	MaxHoldTTLS     = 86_400
	DefaultHoldTTLS = 300
)

// Rule is one limit of a plan.
type Rule struct {
	ID          int64             `json:"id"`
	Name        string            `json:"name"`
	Algorithm   limiter.Algorithm `json:"algorithm"`
	Limit       int64             `json:"limit"`
	PeriodUS    int64             `json:"period_us"`
	Burst       int64             `json:"burst"`
	Resource    string            `json:"resource"`
	Scope       Scope             `json:"scope"`
	Mode        Mode              `json:"mode"`
	FailureMode FailureMode       `json:"failure_mode"`
	Options     Options           `json:"options"`
	// RegionScope is the rule's consistency across the deployment's
	// regions (docs/regions.md): "" for regional (the default: each
	// region enforces the rule on its own), global_shared or
	// global_split. Only a deployment of several regions accepts a global
	// scope (Ops checks).
	RegionScope region.Scope `json:"region_scope,omitempty"`
	// MinShare is, for a global_split rule, the least allotment a region
	// keeps, in the rule's units; 0: the default, Limit / (4 × regions).
	MinShare int64 `json:"min_share,omitempty"`
}

// Params returns the rule's limiter parameters.
func (r Rule) Params() limiter.Params {
	return limiter.Params{
		Algorithm:          r.Algorithm,
		Limit:              r.Limit,
		PeriodUS:           r.PeriodUS,
		Burst:              r.Burst,
		Shape:              r.Options.LeakyMode == "shape",
		Calendar:           limiter.Calendar(r.Options.Calendar),
		AnchorFirstRequest: r.Options.Anchor == "first_request",
	}
}

// WithDefaults fills unset fields: burst = limit, resource "*", scope key,
// mode enforce, failure mode open, and for a calendar window without a
// period the calendar unit's (a day; a month counts as 31 days), which
// the limiter ignores in favour of the calendar.
func (r Rule) WithDefaults() Rule {
	if r.PeriodUS == 0 {
		switch limiter.Calendar(r.Options.Calendar) {
		case limiter.CalendarDay:
			r.PeriodUS = limiter.DayUS
		case limiter.CalendarMonth:
			r.PeriodUS = 31 * limiter.DayUS
		}
	}
	if r.Algorithm == "" {
		r.Algorithm = limiter.GCRA
	}
	if r.Burst == 0 {
		r.Burst = r.Limit
	}
	if r.Resource == "" {
		r.Resource = "*"
	}
	if r.Scope == "" {
		r.Scope = ScopeKey
	}
	if r.Mode == "" {
		r.Mode = ModeEnforce
	}
	if r.FailureMode == "" {
		r.FailureMode = FailOpen
	}
	if r.RegionScope == region.Regional {
		r.RegionScope = "" // stored as the default, so read back equal
	}
	return r
}

var ruleName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// Validate returns field → problem for every invalid field (prefix is
// prepended to field names, e.g. "rules[0].").
func (r Rule) Validate(prefix string, f map[string]string) {
	if !ruleName.MatchString(r.Name) {
		f[prefix+"name"] = "must be 1–63 letters, digits, '_', '.', '-', starting with a letter or digit"
	}
	if r.Burst < 1 && r.Limit > 0 {
		f[prefix+"burst"] = "must be ≥ 1"
	}
	for k, v := range r.Params().Validate() {
		// Params names its fields; rules name them as in their JSON.
		switch k {
		case "mode":
			k = "options.leaky_mode"
		case "calendar", "anchor":
			k = "options." + k
		case "period":
			k = "period_us"
		}
		f[prefix+k] = v
	}
	if m := r.Options.LeakyMode; m != "" && m != "police" && m != "shape" {
		f[prefix+"options.leaky_mode"] = "must be police or shape"
	}
	if a := r.Options.Anchor; a != "" && a != "first_request" {
		f[prefix+"options.anchor"] = "must be first_request"
	}
	if t := r.Options.HoldTTLS; t < 0 || t > MaxHoldTTLS {
		f[prefix+"options.hold_ttl_s"] = "must be between 1 and 86400 (0: the default, 300)"
	}
	if e := r.Options.HoldExpiry; e != "" && e != "refund" && e != "charge" {
		f[prefix+"options.hold_expiry"] = "must be refund or charge"
	}
	for i, o := range r.Options.RefundOn {
		if !slices.Contains(RefundOutcomes, o) || slices.Index(r.Options.RefundOn, o) != i {
			f[prefix+"options.refund_on"] = "must list distinct outcomes of 5xx and timeout"
		}
	}
	if err := ValidatePattern(r.Resource); err != "" {
		f[prefix+"resource"] = err
	}
	switch r.Scope {
	case ScopeKey, ScopeTenant, ScopeIP:
	default:
		f[prefix+"scope"] = "must be key, tenant or ip"
	}
	switch r.Mode {
	case ModeEnforce, ModeShadow:
	default:
		f[prefix+"mode"] = "must be enforce or shadow"
	}
	switch r.FailureMode {
	case FailOpen, FailClosed:
	default:
		f[prefix+"failure_mode"] = "must be open or closed"
	}
	r.validateRegionScope(prefix, f)
}

// validateRegionScope checks the rule's region scope and min share on
// their own; whether the deployment has regions is Ops's to check
// (ValidateRegions).
func (r Rule) validateRegionScope(prefix string, f map[string]string) {
	switch r.RegionScope {
	case "", region.Regional:
	case region.GlobalShared, region.GlobalSplit:
		if r.Algorithm == limiter.Concurrency {
			f[prefix+"region_scope"] = "a concurrency rule is regional: leases are taken and released in one region"
		}
		if r.RegionScope == region.GlobalSplit && r.Scope == ScopeIP {
			f[prefix+"region_scope"] = "only rules scoped by key or tenant are split between regions"
		}
	default:
		f[prefix+"region_scope"] = "must be regional, global_shared or global_split"
		return
	}
	switch {
	case r.MinShare < 0:
		f[prefix+"min_share"] = "must be a non-negative integer"
	case r.MinShare > 0 && r.RegionScope != region.GlobalSplit:
		f[prefix+"min_share"] = "is only for global_split rules"
	case r.MinShare > r.Limit:
		f[prefix+"min_share"] = "must be at most the limit"
	}
}

// ValidateRegions names under prefix (e.g. "rules") every rule whose
// region scope the deployment c cannot serve: a global scope without
// regions, or a split whose floors together exceed the limit.
func ValidateRegions(c region.Config, prefix string, rules []Rule, f map[string]string) {
	for i, r := range rules {
		k := fmt.Sprintf("%s[%d].", prefix, i)
		c.ValidateScope(k+"region_scope", r.RegionScope, f)
		if r.RegionScope == region.GlobalSplit && c.Enabled() && r.MinShare*int64(len(c.Names)) > r.Limit {
			f[k+"min_share"] = fmt.Sprintf("must be at most the limit / %d regions (%d)", len(c.Names), r.Limit/int64(len(c.Names)))
		}
	}
}

var (
	methodPattern = regexp.MustCompile(`^(\*|[A-Z]{1,16})$`)
	pathPattern   = regexp.MustCompile(`^/[A-Za-z0-9._~!$&'()+,;=:@%/{}-]*\*?$`)
)

// ValidatePattern returns a problem with a resource pattern, or "". A
// pattern is "*" (everything), or "METHOD PATH" where METHOD is an
// upper-case HTTP method or "*", and PATH starts with "/" and may end with
// "*" to match every path with that prefix.
func ValidatePattern(p string) string {
	if p == "*" {
		return ""
	}
	method, path, ok := strings.Cut(p, " ")
	if !ok || !methodPattern.MatchString(method) || !pathPattern.MatchString(path) {
		return `must be "*" or "METHOD /path" (METHOD upper-case or "*"; a trailing "*" matches a prefix)`
	}
	return ""
}

// MatchResource reports whether resource matches pattern (see
// ValidatePattern).
func MatchResource(pattern, resource string) bool {
	if pattern == "*" {
		return true
	}
	pm, pp, _ := strings.Cut(pattern, " ")
	rm, rp, ok := strings.Cut(resource, " ")
	if !ok {
		rm, rp = "", resource
	}
	if pm != "*" && pm != rm {
		return false
	}
	if prefix, ok := strings.CutSuffix(pp, "*"); ok {
		return strings.HasPrefix(rp, prefix)
	}
	return pp == rp
}

// MergeRules returns the rules a tenant with overrides gets: the plan's
// rules in their order, each replaced by the override of the same name if
// there is one, followed by the overrides that name no plan rule. Neither
// argument is modified.
func MergeRules(planRules, overrides []Rule) []Rule {
	if len(overrides) == 0 {
		return planRules
	}
	byName := make(map[string]Rule, len(overrides))
	for _, o := range overrides {
		byName[o.Name] = o
	}
	out := make([]Rule, 0, len(planRules)+len(overrides))
	used := map[string]bool{}
	for _, r := range planRules {
		if o, ok := byName[r.Name]; ok {
			r = o
			used[r.Name] = true
		}
		out = append(out, r)
	}
	for _, o := range overrides {
		if !used[o.Name] {
			out = append(out, o)
		}
	}
	return out
}

// RulesWithDefaults returns a copy of rules with their defaults filled.
func RulesWithDefaults(rules []Rule) []Rule {
	if rules == nil {
		return nil
	}
	out := make([]Rule, len(rules))
	for i, r := range rules {
		out[i] = r.WithDefaults()
	}
	return out
}

// ValidateRules validates the rules as they will be stored (with their
// defaults), naming each bad field under prefix (e.g. "rules"): names must
// be unique. It changes nothing.
func ValidateRules(prefix string, rules []Rule, f map[string]string) {
	seen := map[string]bool{}
	for i := range rules {
		r := rules[i].WithDefaults()
		k := fmt.Sprintf("%s[%d].", prefix, i)
		r.Validate(k, f)
		if r.Name == QuotaRuleName {
			f[k+"name"] = QuotaRuleName + " is reserved for the plan's monthly quota (quota_mode)"
		}
		if r.Name == SpendCapRuleName {
			f[k+"name"] = SpendCapRuleName + " is reserved for the tenant's spend cap"
		}
		if seen[r.Name] {
			f[k+"name"] = "must be unique"
		}
		seen[r.Name] = true
	}
}

// PriceTier prices overage units up to UpTo (nil: and beyond) at
// UnitMinor each.
type PriceTier struct {
	UpTo      *int64 `json:"up_to"`
	UnitMinor int64  `json:"unit_minor"`
}

// Plan is a named tier with rules and pricing.
type Plan struct {
	ID               int64       `json:"id"`
	Name             string      `json:"name"`
	DisplayName      string      `json:"display_name"`
	Currency         string      `json:"currency"`
	BaseFeeMinor     int64       `json:"base_fee_minor"`
	IncludedUnits    int64       `json:"included_units"`
	OverageUnitMinor int64       `json:"overage_unit_minor"`
	Tiers            []PriceTier `json:"tiers"`
	QuotaMode        QuotaMode   `json:"quota_mode"` // see QuotaRule
	Rules            []Rule      `json:"rules"`
	// Routes are the route templates usage records checks under, in the
	// order they are tried (see Routes); never nil in a stored plan.
	Routes     []string   `json:"routes"`
	ArchivedAt *time.Time `json:"archived_at,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	// PriceHistory is the plan's prices by month, oldest first, for
	// billing (see In); only Store.ListPriced loads it.
	PriceHistory []PriceChange `json:"-"`
}

// PlanAudit describes a change to a plan for the audit log.
func PlanAudit(action string, before, after *Plan) audit.Change {
	p := audit.Subject(before, after)
	return audit.Change{Action: action, TargetType: "plan", TargetID: strconv.FormatInt(p.ID, 10),
		Before: before, After: after}
}

var (
	planName     = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	currencyCode = regexp.MustCompile(`^[A-Z]{3}$`)
)

// WithDefaults returns the plan with unset fields filled: currency USD,
// quota_mode none, no routes, and each rule's (Rule.WithDefaults), in a
// new slice.
func (p Plan) WithDefaults() Plan {
	p.Rules = RulesWithDefaults(p.Rules)
	if p.Routes == nil {
		p.Routes = []string{}
	}
	if p.Currency == "" {
		p.Currency = "USD"
	}
	if p.QuotaMode == "" {
		p.QuotaMode = QuotaNone
	}
	return p
}

// Validate checks the plan's fields and rules, naming each bad field. It
// changes nothing: call WithDefaults first for a plan from a request.
func (p Plan) Validate() error {
	f := map[string]string{}
	if !planName.MatchString(p.Name) {
		f["name"] = "must be 1–63 lower-case letters, digits, '_' or '-'"
	}
	if len(p.DisplayName) > 200 {
		f["display_name"] = "must be at most 200 characters"
	}
	if !currencyCode.MatchString(p.Currency) {
		f["currency"] = "must be an ISO 4217 code such as USD"
	}
	for name, v := range map[string]int64{"base_fee_minor": p.BaseFeeMinor, "included_units": p.IncludedUnits, "overage_unit_minor": p.OverageUnitMinor} {
		if v < 0 {
			f[name] = "must be a non-negative integer"
		}
	}
	var last int64
	for i, t := range p.Tiers {
		k := fmt.Sprintf("tiers[%d].", i)
		if t.UnitMinor < 0 {
			f[k+"unit_minor"] = "must be a non-negative integer"
		}
		switch {
		case t.UpTo == nil && i != len(p.Tiers)-1:
			f[k+"up_to"] = "only the last tier may be open-ended"
		case t.UpTo != nil && *t.UpTo <= last:
			f[k+"up_to"] = "must be greater than the previous tier's"
		case t.UpTo != nil:
			last = *t.UpTo
		}
	}
	switch p.QuotaMode {
	case QuotaNone:
	case QuotaHard, QuotaOverage:
		if p.IncludedUnits < 1 {
			f["included_units"] = "must be ≥ 1 when quota_mode is hard or overage (it is the monthly quota)"
		} else if p.IncludedUnits > limiter.MaxUnits {
			f["included_units"] = "must be at most 2^53 (9007199254740992) when quota_mode is hard or overage (it is the monthly quota)"
		}
	default:
		f["quota_mode"] = "must be none, hard or overage"
	}
	ValidateRules("rules", p.Rules, f)
	ValidateRoutes("routes", p.Routes, f)
	return tollgate.Invalid(f)
}
