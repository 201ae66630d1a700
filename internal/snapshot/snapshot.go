// Package snapshot keeps in memory everything a check needs from Postgres
// — plans with their compiled rules, tenants, API keys, service tokens —
// as immutable snapshots: it loads them, reloads only what changed when
// Postgres notifies a change (LISTEN tollgate_changes), and finds keys
// issued since the last load on demand.
package snapshot

import (
	"crypto/ed25519"
	"crypto/sha256"
	"slices"
	"strconv"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/tenants"
)

// Rule is a plan rule compiled for checks.
type Rule struct {
	plans.Rule
	Params limiter.Params
	// StateID names the rule's state in its keys (package statekey): from
	// the plan, rule name and algorithm (a new algorithm under the same
	// name starts from fresh state).
	StateID [3]byte
	// WindowS is the rule's window in whole seconds, rounded up (a day for
	// calendar days, 30 days for calendar months).
	WindowS int64
	// Quoted is the rule's name as a structured-field string; Policy its
	// RateLimit-Policy header value, e.g. "hourly";q=5000;w=3600.
	Quoted, Policy string
	// Tally is true for the monthly quota of an overage plan: its state
	// counts every unit the tenant is admitted in the month, past the
	// included units too (Params.Limit is TallyLimit, which no month
	// reaches), so that the count is the month's and a spend cap set at
	// any time, which shares the state, holds from the month's first
	// unit. Checks report it against Limit, the included units, as
	// Reported does.
	Tally bool
	// After is what a check does with the rule's decision beyond
	// reporting it.
	After After
}

// After is what a check does with a rule's decision beyond reporting it,
// compiled with the rule so that the checker asks the rule rather than
// knowing rules by name. The zero value does nothing more: a denial the
// rule governs is rate_limited.
type After struct {
	// Denial is the reason of a check whose denial the rule governs, when
	// not tollgate.ReasonRateLimited: tollgate.ReasonSpendCap for the
	// spend cap.
	Denial string
	// Crossings is true for the monthly quota: a check it admits reports
	// the tenant's quota points (Tenant.Points) its count went past.
	Crossings bool
}

// afterOf returns what a check does with the decision of the rule named
// name beyond reporting it.
func afterOf(name string) After {
	switch name {
	case plans.QuotaRuleName:
		return After{Crossings: true}
	case plans.SpendCapRuleName:
		return After{Denial: tollgate.ReasonSpendCap}
	}
	return After{}
}

// Money reports whether r's count is money that must survive the loss
// of a store server (limiter.Batch.Money): a tally, whose month's count
// is billed as overage, or a spend cap, which shares that count.
func (r *Rule) Money() bool {
	return r.Tally || r.Name == plans.SpendCapRuleName
}

// TallyLimit is the store limit of a tally (Rule.Tally): it never binds,
// and every count below it stays exact in the store's numbers (2^53).
const TallyLimit = 1 << 52

// Reported returns what a check of cost reports for r from the store's
// result res, and the rule's count after the check (before it, for a
// result that did not allow it). That is res itself, with a count from
// Limit − Remaining, except for a tally, which the store never denies:
// it is judged here against Limit as a shadow rule whose count stops
// at its limit is, while its count is the month's.
func (r *Rule) Reported(res limiter.Result, cost int64) (out limiter.Result, count int64) {
	if !r.Tally {
		return res, r.Limit - res.Remaining
	}
	before := r.Params.Limit - res.Remaining
	if res.Allowed {
		before -= cost
	}
	out = res
	switch {
	case before+cost <= r.Limit:
		out.Allowed, out.Remaining = true, r.Limit-before-cost
	default:
		out.Allowed, out.Remaining = false, max(0, r.Limit-before)
		if cost > r.Limit {
			out.RetryAfterUS = -1
		} else {
			out.RetryAfterUS = res.ResetAfterUS
		}
		if before == 0 {
			out.ResetAfterUS = 0
		}
	}
	if !res.Allowed {
		return out, before
	}
	return out, before + cost
}

// Plan is a plan as checks see it: its rules compiled, a monthly quota
// among them, and its routes compiled.
type Plan struct {
	ID    int64
	Name  string
	Rules []Rule
	// Routes name what usage records a check of this plan under.
	Routes plans.Routes
}

// Tenant is a tenant as checks see it.
type Tenant struct {
	ID     string
	Name   string
	Status string
	// Plan is the tenant's plan, or its own view of it when the tenant
	// overrides rules; nil only in an inconsistent snapshot.
	Plan *Plan
	// Tag and Short are the tenant's part of its state keys.
	Tag   byte
	Short statekey.Short
	// Points are the month-to-date counts at which the tenant's quota
	// thresholds are crossed, ascending (package quota); nil for none.
	Points []int64
	// Credits is the tenant's prepaid balance when its plan draws on
	// credits (package credits); nil otherwise.
	Credits *credits.Hot
}

// Key is an API key as checks see it.
type Key struct {
	ID string
	// tenant is the bytes of the key's tenant ID (tenantIDBytes), looked
	// up in the snapshot the key is read from; one copy per tenant
	// (Snapshot.tenantIDs), so that a key costs a pointer, not 16 bytes.
	tenant *[16]byte
	// ExpiresAtUS and RevokedAtUS are µs since the epoch, 0 for none.
	ExpiresAtUS, RevokedAtUS int64
	Short                    statekey.Short // the key's part of its state keys
}

// Snapshot is an immutable view of everything a check needs. A change
// builds the next snapshot, sharing with this one what did not change.
type Snapshot struct {
	// keys were read by the last full load; changed holds the keys
	// changed since (nil for a key removed), see changes.go. Only key
	// reads them.
	keys    map[tenants.KeyHash]*Key
	changed map[tenants.KeyHash]*Key
	tenants map[[16]byte]*Tenant // by tenantIDBytes
	// tenantIDs holds one copy of each tenant's ID bytes for keys read
	// into this snapshot to point to.
	tenantIDs   map[[16]byte]*[16]byte
	anonymous   *Plan
	signingKeys map[string]ed25519.PublicKey
	tokens      map[string]auth.ServiceToken
	loadedAt    time.Time
}

// Data is what a snapshot is built from.
type Data struct {
	Plans   []plans.Plan
	Tenants []tenants.Tenant
	// Overrides are tenants' own rules by tenant ID: each replaces the plan
	// rule of the same name or adds to the plan's rules (plans.MergeRules).
	Overrides map[string][]plans.Rule
	Keys      []tenants.Key
	// Quota is every plan's and tenant's quota settings: thresholds and
	// spend caps (a capped tenant gets plans.SpendCapRule).
	Quota quota.All
	// Credits is the balances of the tenants on credit plans.
	Credits       credits.All
	SigningKeys   map[string]ed25519.PublicKey
	ServiceTokens []auth.ServiceToken
}

// LoadedAt is when the snapshot's data was read.
func (s *Snapshot) LoadedAt() time.Time { return s.loadedAt }

// Anonymous returns the plan of callers without a key, or nil when there
// is none (no unarchived plan named plans.AnonymousPlan).
func (s *Snapshot) Anonymous() *Plan { return s.anonymous }

// SigningKeys returns the public keys that sign service tokens, by key ID.
// The map is shared: callers must not change it.
func (s *Snapshot) SigningKeys() map[string]ed25519.PublicKey { return s.signingKeys }

// ServiceToken returns the service token with id, if known.
func (s *Snapshot) ServiceToken(id string) (auth.ServiceToken, bool) {
	st, ok := s.tokens[id]
	return st, ok
}

// key returns the key with hash, and whether the snapshot knows of it: a
// key removed since the last full load is known, and nil.
func (s *Snapshot) key(hash tenants.KeyHash) (k *Key, known bool) {
	if k, ok := s.changed[hash]; ok {
		return k, true
	}
	k = s.keys[hash]
	return k, k != nil
}

// Tenant returns the tenant with id, or nil when s does not hold it.
func (s *Snapshot) Tenant(id string) *Tenant {
	if id == "" {
		return nil
	}
	return s.tenants[tenantIDBytes(id)]
}

// tenantOf returns k's tenant in s, or nil when the tenant is gone.
func (s *Snapshot) tenantOf(k *Key) *Tenant { return s.tenants[*k.tenant] }

// withMeta builds a snapshot of d without keys.
func withMeta(d Data, now time.Time) *Snapshot {
	s := &Snapshot{
		tenants:     make(map[[16]byte]*Tenant, len(d.Tenants)),
		tenantIDs:   make(map[[16]byte]*[16]byte, len(d.Tenants)),
		signingKeys: d.SigningKeys,
		tokens:      make(map[string]auth.ServiceToken, len(d.ServiceTokens)),
		loadedAt:    now,
	}
	byID := map[int64]*Plan{}
	planByID := map[int64]plans.Plan{}
	for _, p := range d.Plans {
		v := compilePlan(p, nil)
		byID[p.ID] = v
		planByID[p.ID] = p
		if p.Name == plans.AnonymousPlan && p.ArchivedAt == nil {
			s.anonymous = v
		}
	}
	for _, t := range d.Tenants {
		plan := byID[t.PlanID]
		limits := quota.Resolve(planByID[t.PlanID], d.Quota.Plans[t.PlanID], d.Quota.Tenants[t.ID], d.Quota.PlanSince[t.ID], now)
		if over := d.Overrides[t.ID]; (len(over) > 0 || limits.Capped) && plan != nil {
			// A tenant with overrides or a spend cap gets a plan view of its
			// own. Its rules keep the plan's state keys by name, so an
			// override of a plan rule continues from the usage counted so
			// far.
			p := planByID[t.PlanID]
			p.Rules = plans.MergeRules(p.Rules, over)
			if limits.Capped {
				p.Rules = append(p.Rules[:len(p.Rules):len(p.Rules)], plans.SpendCapRule(limits.CapUnits))
			}
			plan = compilePlan(p, plan)
		}
		tv := &Tenant{ID: t.ID, Name: t.Name, Status: t.Status, Plan: plan, Points: limits.Points, Credits: d.Credits[t.ID]}
		tv.Tag, tv.Short = statekey.Compact(t.ID)
		id := tenantIDBytes(t.ID)
		s.tenants[id] = tv
		s.tenantIDs[id] = &id
	}
	for _, st := range d.ServiceTokens {
		s.tokens[st.ID] = st
	}
	return s
}

// CompileRules returns p's rules compiled as every check of a tenant
// without overrides runs them: their state IDs are those of the keys
// the checks write (the region rebalancer finds a state's rule by it).
func CompileRules(p plans.Plan) []Rule { return compilePlan(p, nil).Rules }

// sameSplit reports whether a tenant's rule o may keep the plan's rule
// b's state: always, unless either is a global_split window whose split
// differs (scope, limit, period or least share). The regions' rebalancer
// moves a split state's units by the plan's rule (CompileRules); an
// override of it with another limit, on the same state, would be judged
// on its own share plus units moved for the plan's, and the regions
// together could admit past its limit. On a state of its own it keeps
// equal shares, never moved.
func sameSplit(b, o plans.Rule) bool {
	if b.RegionScope != region.GlobalSplit && o.RegionScope != region.GlobalSplit || !region.Rebalanced(b.Algorithm) {
		return true // nothing is moved for it
	}
	return b.RegionScope == o.RegionScope && b.Limit == o.Limit && b.PeriodUS == o.PeriodUS && b.MinShare == o.MinShare
}

// compilePlan compiles p's rules and routes. A tenant's own view of its
// plan (with overrides) passes the plan's view as base, so that its rules
// keep the plan's state IDs by name and algorithm.
func compilePlan(p plans.Plan, base *Plan) *Plan {
	v := &Plan{ID: p.ID, Name: p.Name, Routes: plans.CompileRoutes(p.Routes)}
	rules := p.Rules
	if quota, ok := p.QuotaRule(); ok { // a monthly quota is one more rule
		rules = append(rules[:len(rules):len(rules)], quota)
	}
	// The rules that count a tenant's month have the same state ID on every
	// plan: the count is the tenant's, and survives a change of plan.
	taken := map[[3]byte]bool{tenantMonthStateID: true}
	monthShared := false
	for _, r := range rules {
		// In a deployment of regions the tenant's month is global_shared
		// (docs/regions.md, "Money"): its count is exchanged, so a hard
		// quota and a spend cap hold across the regions within the
		// bound of a shared window. The first rule counting it carries
		// the exchange; a spend cap beside the quota counts the same
		// units on the same state, and must not send them twice.
		if slices.Contains(tenantMonthRules, r.Name) && !monthShared {
			r.RegionScope, monthShared = region.GlobalShared, true
		}
		params := r.Params()
		window := params.PeriodUS
		switch params.Calendar {
		case limiter.CalendarDay:
			window = limiter.DayUS
		case limiter.CalendarMonth:
			window = 30 * limiter.DayUS
		}
		id, found := [3]byte{}, false
		if slices.Contains(tenantMonthRules, r.Name) {
			id, found = tenantMonthStateID, true
		} else if base != nil {
			for _, b := range base.Rules {
				switch {
				case b.Name != r.Name || b.Algorithm != r.Algorithm:
				case sameSplit(b.Rule, r):
					id, found = b.StateID, true
				default:
					taken[b.StateID] = true // a state of its own
				}
			}
		}
		for salt := 0; !found || (taken[id] && !slices.Contains(tenantMonthRules, r.Name)); salt++ {
			id, found = statekey.RuleID(p.ID, r.Name, r.Algorithm, salt), true
		}
		taken[id] = true
		windowS := (window + limiter.SecondUS - 1) / limiter.SecondUS
		quoted := strconv.Quote(r.Name)
		tally := r.Name == plans.QuotaRuleName && p.QuotaMode == plans.QuotaOverage
		if tally {
			params.Limit, params.Burst = TallyLimit, TallyLimit
		}
		if slices.Contains(tenantMonthRules, r.Name) && p.Name != plans.AnonymousPlan {
			params.Seed = seedMode(r)
		}
		v.Rules = append(v.Rules, Rule{
			Rule:    r,
			Params:  params,
			StateID: id,
			WindowS: windowS,
			Quoted:  quoted,
			Policy:  quoted + ";q=" + strconv.FormatInt(r.Limit, 10) + ";w=" + strconv.FormatInt(windowS, 10),
			Tally:   tally,
			After:   afterOf(r.Name),
		})
	}
	return v
}

// seedMode returns how the store treats the tenant's month counted by r
// while it may have lost it (limiter.Params.Seed, until the tallies are
// rebuilt from the rollups): as r's failure mode says, for an enforcing
// rule; a shadow rule never stops a check.
func seedMode(r plans.Rule) limiter.SeedMode {
	if r.FailureMode == plans.FailClosed && r.Mode == plans.ModeEnforce {
		return limiter.SeedClosed
	}
	return limiter.SeedOpen
}

// tenantMonthRules name the rules whose state is the tenant's month, not a
// plan's: the monthly quota and the spend cap.
var tenantMonthRules = []string{plans.QuotaRuleName, plans.SpendCapRuleName}

// tenantMonthStateID is the state ID of both tenantMonthRules: the same
// on every plan (statekey.TenantMonthID), and the same for both, so that
// a spend cap counts the month the quota's tally counted (Rule.Tally),
// from its first unit, whenever the cap was set.
var tenantMonthStateID = statekey.TenantMonthID(plans.QuotaRuleName)

// addKey indexes k among the snapshot's keys while it is being built.
func (s *Snapshot) addKey(k tenants.SnapshotKey) {
	s.keys[k.Hash] = s.newKey(k)
}

// newKey returns the Key of k, pointing to its tenant's ID bytes in
// s.tenantIDs (or to a copy of its own for a tenant s does not know).
func (s *Snapshot) newKey(k tenants.SnapshotKey) *Key {
	tenant := s.tenantIDs[k.TenantUUID]
	if tenant == nil {
		tenant = &k.TenantUUID
	}
	v := &Key{ID: k.ID, tenant: tenant, ExpiresAtUS: k.ExpiresAtUS, RevokedAtUS: k.RevokedAtUS}
	_, v.Short = statekey.Compact(k.ID)
	return v
}

func snapshotKey(k tenants.Key) tenants.SnapshotKey {
	sk := tenants.SnapshotKey{ID: k.ID, Hash: k.Hash, TenantUUID: tenantIDBytes(k.TenantID)}
	if k.ExpiresAt != nil {
		sk.ExpiresAtUS = k.ExpiresAt.UnixMicro()
	}
	if k.RevokedAt != nil {
		sk.RevokedAtUS = k.RevokedAt.UnixMicro()
	}
	return sk
}

// tenantIDBytes returns the bytes of a tenant ID, a UUID; other IDs (as
// tests use) are hashed into as many bytes.
func tenantIDBytes(id string) [16]byte {
	if u, ok := tenants.ParseUUID(id); ok {
		return u
	}
	sum := sha256.Sum256([]byte(id))
	return [16]byte(sum[:16])
}

// withMetaOf returns the snapshot of d's plans, tenants, signing keys and
// service tokens with s's keys: the next snapshot after a change to
// anything but keys.
func (s *Snapshot) withMetaOf(d Data, now time.Time) *Snapshot {
	next := withMeta(d, now)
	next.keys, next.changed = s.keys, s.changed
	return next
}

// withKeys returns the next snapshot after keys were read again and keys
// removed: s's maps are shared, but for changed, copied with the changes.
func (s *Snapshot) withKeys(read []tenants.SnapshotKey, removed []tenants.KeyHash, now time.Time) *Snapshot {
	next := *s
	next.loadedAt = now
	next.changed = make(map[tenants.KeyHash]*Key, len(s.changed)+len(read)+len(removed))
	for h, v := range s.changed {
		next.changed[h] = v
	}
	for _, h := range removed {
		next.changed[h] = nil
	}
	for _, k := range read {
		next.changed[k.Hash] = next.newKey(k)
	}
	return &next
}
