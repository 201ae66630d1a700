package enforce

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/tenants"
)

// Refused is the error of Look for a key that may not be used: Reason is
// a check's reason (invalid_key, key_revoked, key_expired,
// tenant_suspended).
type Refused struct{ Reason string }

func (e *Refused) Error() string { return "enforce: key refused: " + e.Reason }

// Identity is an API key that may be used now, found by Identify.
type Identity struct {
	KeyID  string
	key    *snapshot.Key
	tenant *snapshot.Tenant
}

// Identify finds key in the snapshot (and among the keys looked up
// already), never in Postgres, so that it costs no query however often it
// is asked. Errors: ErrNotReady before the first snapshot, *Refused for a
// key that is unknown or may not be used now.
func (c *Checker) Identify(key string) (Identity, error) {
	s := c.holder.Current()
	if s == nil {
		return Identity{}, ErrNotReady
	}
	if !tenants.WellFormed(key) {
		return Identity{}, &Refused{tollgate.ReasonInvalidKey}
	}
	k, tenant := c.holder.KnownKey(s, tenants.HashKey(key))
	if tenant == nil || tenant.Plan == nil {
		return Identity{}, &Refused{tollgate.ReasonInvalidKey}
	}
	if refused := c.refusal(k, tenant); refused != "" {
		return Identity{}, &Refused{refused}
	}
	return Identity{KeyID: k.ID, key: k, tenant: tenant}, nil
}

// Look returns who's standing now (who from Identify), read with one cost-0 dry run of all
// its plan's rules: one store call (none when the plan has no rules),
// which changes no state, records no usage and counts no decision. ip is
// the caller's address, for the rules limited per address. A failed store
// call (or an open circuit) is an error: there is no failure mode to
// decide a look.
func (c *Checker) Look(ctx context.Context, who Identity, ip string) (tollgate.Standing, error) {
	plan := who.tenant.Plan
	st := tollgate.Standing{TenantID: who.tenant.ID, Tenant: who.tenant.Name, KeyID: who.KeyID, Plan: plan.Name,
		Rules: make([]tollgate.RuleStanding, 0, len(plan.Rules))}
	hot := who.tenant.Credits
	if len(plan.Rules) == 0 && hot == nil {
		return st, nil
	}
	rules := make([]*snapshot.Rule, len(plan.Rules))
	for i := range plan.Rules {
		rules[i] = &plan.Rules[i]
	}
	reqs, creditKeys, err := c.requests(rules, caller{key: who.key, tenant: who.tenant, plan: plan}, Network(ip, c.ipv6Prefix))
	if err != nil {
		return tollgate.Standing{}, err
	}
	batch := limiter.Batch{Requests: reqs, Cost: 0, DryRun: true}
	if hot != nil {
		batch.Credits = c.creditsFor(hot, creditKeys)
	}
	storeCtx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	out, err := c.store.Check(storeCtx, batch)
	if err != nil {
		return tollgate.Standing{}, fmt.Errorf("enforce: look at key %s: %w", who.KeyID, err)
	}
	for i, rule := range rules {
		res, count := rule.Reported(out.Results[i], 0)
		st.Rules = append(st.Rules, ruleStanding(rule, res))
		if rule.Name == plans.QuotaRuleName {
			st.Quota = quotaStanding(rule, res, count)
		}
	}
	if hot != nil {
		st.Credits = &tollgate.CreditsStanding{Mode: string(hot.Mode), Balance: out.Credits.Balance, Overdraft: hot.Overdraft}
		if out.Credits.Unknown {
			lc := batch.Credits
			st.Credits.Unknown, st.Credits.Balance = true, lc.LineAt(out.NowUS)-hot.Consumed
		}
	}
	return st, nil
}

func ruleStanding(rule *snapshot.Rule, res limiter.Result) tollgate.RuleStanding {
	return tollgate.RuleStanding{Name: rule.Name, Algorithm: string(rule.Algorithm), Mode: string(rule.Mode), Resource: rule.Resource,
		Scope: string(rule.Scope), Limit: rule.Limit, WindowS: rule.WindowS, Remaining: res.Remaining,
		ResetAfterMS: msCeil(res.ResetAfterUS)}
}

// quotaStanding is the monthly quota's standing from its result and count
// (snapshot.Rule.Reported): used is the month's units, past the included
// ones too on an overage plan.
func quotaStanding(rule *snapshot.Rule, res limiter.Result, count int64) *tollgate.QuotaStanding {
	return &tollgate.QuotaStanding{Mode: string(rule.Mode), IncludedUnits: rule.Limit, Used: max(count, 0),
		Remaining: res.Remaining, ResetAfterMS: msCeil(res.ResetAfterUS)}
}
