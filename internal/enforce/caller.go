package enforce

import (
	"context"
	"net/netip"
	"strings"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/tenants"
)

// caller is who a check is for: a key of a tenant, or an anonymous caller
// (key and tenant nil), and the plan that limits it.
type caller struct {
	key    *snapshot.Key
	tenant *snapshot.Tenant
	plan   *snapshot.Plan
}

// route returns what usage records a check of resource by who under: the
// route of who's plan it matches, or tollgate.ResourceOther (or
// tollgate.ResourceAny) when there is no plan or no route matches.
func (who caller) route(resource string) string {
	if who.plan == nil {
		return plans.Routes{}.Match(resource)
	}
	return who.plan.Routes.Match(resource)
}

// identify finds r's caller in s and fills in d's tier, tenant, key and
// plan; refused is the reason when the check is refused before any rule
// (an unknown, revoked or expired key, a suspended tenant, no key where
// the anonymous plan is missing). A refused caller has only its plan,
// when known, for its usage to name the route.
func (c *Checker) identify(ctx context.Context, s *snapshot.Snapshot, r Request, d *Decision) (who caller, refused string) {
	if r.Key == "" {
		if s.Anonymous() == nil {
			return caller{}, tollgate.ReasonKeyRequired
		}
		d.Plan = s.Anonymous().Name
		return caller{plan: s.Anonymous()}, ""
	}
	d.Tier = tollgate.TierAuthenticated
	if !tenants.WellFormed(r.Key) {
		return caller{}, tollgate.ReasonInvalidKey
	}
	key, tenant := c.holder.FindKey(ctx, s, tenants.HashKey(r.Key))
	if tenant == nil { // unknown, or its tenant is gone
		return caller{}, tollgate.ReasonInvalidKey
	}
	d.TenantID, d.KeyID = tenant.ID, key.ID
	if tenant.Plan != nil {
		d.Plan = tenant.Plan.Name
	}
	if refused := c.refusal(key, tenant); refused != "" {
		return caller{plan: tenant.Plan}, refused
	}
	if tenant.Plan == nil {
		// Cannot happen with a consistent snapshot (every tenant has a
		// plan); if it does, fail closed rather than admit unlimited.
		d.Degraded = true
		c.log.ErrorContext(ctx, "tenant without a plan in the snapshot", "tenant_id", d.TenantID)
		return caller{}, tollgate.ReasonUnavailable
	}
	return caller{key: key, tenant: tenant, plan: tenant.Plan}, ""
}

// refusal returns why key of tenant may not be used now, or "".
func (c *Checker) refusal(key *snapshot.Key, tenant *snapshot.Tenant) string {
	nowUS := c.now().UnixMicro()
	switch {
	case key.RevokedAtUS != 0 && key.RevokedAtUS <= nowUS:
		return tollgate.ReasonKeyRevoked
	case key.ExpiresAtUS != 0 && key.ExpiresAtUS <= nowUS:
		return tollgate.ReasonKeyExpired
	case tenant.Status != tenants.StatusActive:
		return tollgate.ReasonTenantSuspended
	}
	return ""
}

// Network returns what per-IP limits count ip as: an IPv4 address (or an
// IPv4-mapped IPv6 one) as it is, an IPv6 address as its network of
// ipv6Bits bits ("2001:db8:1:2::/64"; the address itself at 128).
// Anything that is not an IP address is returned as it is.
func Network(ip string, ipv6Bits int) string {
	if !strings.Contains(ip, ":") {
		return ip
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	addr = addr.WithZone("").Unmap()
	if addr.Is4() || ipv6Bits >= 128 {
		return addr.String()
	}
	p, _ := addr.Prefix(ipv6Bits)
	return p.String()
}

// NormalizeIP returns the canonical text of an IP address (IPv4-mapped
// IPv6 addresses become IPv4), or false.
func NormalizeIP(s string) (string, bool) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return "", false
	}
	return a.Unmap().WithZone("").String(), true
}
