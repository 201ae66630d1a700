package enforce

import (
	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/statekey"
)

// Request is one check, validated.
type Request struct {
	Key      string
	IP       string
	Resource string
	Cost     int64
	DryRun   bool

	// route is what usage records as the resource: the plan's route that
	// Resource matched (see plans.Routes.Match).
	route string
	// Hold makes Cost an estimate: an admitted check opens a hold, to be
	// settled at the actual cost (Checker.Settle). HoldTTLS is how long it
	// stays open unsettled, 0 for the rules' (or the default).
	Hold     bool
	HoldTTLS int64
	// AutoHold opens a hold when a matching rule asks for one (its option
	// hold), as Hold does; it changes nothing otherwise.
	AutoHold bool
}

// matchingRules appends to matched the rules of plan whose resource
// pattern matches resource.
func matchingRules(matched []*snapshot.Rule, plan *snapshot.Plan, resource string) []*snapshot.Rule {
	for i := range plan.Rules {
		if plans.MatchResource(plan.Rules[i].Resource, resource) {
			matched = append(matched, &plan.Rules[i])
		}
	}
	return matched
}

// requests returns the limiter requests of the matched rules for who
// (from ip), their state keys laid out as package statekey describes, and
// when who draws on credits the two keys of its balance, all in one
// string.
func (c *Checker) requests(matched []*snapshot.Rule, who caller, ip string) ([]limiter.Request, string, error) {
	var addrBuf [24]byte
	addr := statekey.AppendAddr(addrBuf[:0], ip)
	var stack [256]byte
	b := stack[:0]
	var endStack [8]int
	ends := endStack[:0]
	for _, rule := range matched {
		if who.key == nil {
			b = statekey.AppendAnonymousKey(b, c.prefix, rule.StateID, addr)
			ends = append(ends, len(b))
			continue
		}
		var scope, scopeAddr []byte
		switch rule.Scope {
		case plans.ScopeKey:
			scope = who.key.Short[:]
		case plans.ScopeTenant:
			scope = who.tenant.Short[:]
		case plans.ScopeIP:
			if ip == "" {
				return nil, "", tollgate.Invalid(map[string]string{"ip": "is required: rule " + rule.Name + " limits per IP address"})
			}
			scope, scopeAddr = who.tenant.Short[:], addr
		}
		b = statekey.AppendKey(b, c.prefix, who.tenant.Tag, rule.StateID, scope, scopeAddr)
		ends = append(ends, len(b))
	}
	rulesEnd := len(b)
	if who.credits() != nil {
		b = statekey.AppendCredits(b, c.prefix, who.tenant.Tag, who.tenant.Short)
	}
	keys := string(b)
	reqs := make([]limiter.Request, len(matched))
	from := 0
	for i, rule := range matched {
		reqs[i] = limiter.Request{Key: keys[from:ends[i]], Params: c.regionParams(rule), Shadow: rule.Mode == plans.ModeShadow}
		from = ends[i]
	}
	return reqs, keys[rulesEnd:], nil
}
