package enforce

import (
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/snapshot"
)

// regionParams returns the parameters rule is decided with in this
// region (docs/regions.md): a global_shared rule's admissions also go
// to the region's outbox, a global_split rule is decided on this
// region's allotment of its limit; in a deployment of one region, or for
// a regional rule, the rule's own.
func (c *Checker) regionParams(rule *snapshot.Rule) limiter.Params {
	p := rule.Params
	if rule.RegionScope == "" || !c.region.Enabled() {
		return p
	}
	switch rule.RegionScope {
	case region.GlobalShared:
		p.Exchange = true
	case region.GlobalSplit:
		p.Limit, p.Burst = c.region.Allotment(p.Limit, p.EffectiveBurst())
		// A window's allotment follows demand (the rebalancer moves units
		// between the regions' allotment tables); a bucket's stays equal.
		p.Split = region.Rebalanced(p.Algorithm)
	}
	return p
}
