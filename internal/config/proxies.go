package config

import (
	"net/netip"
	"strings"
)

// TrustedProxies reads TOLLGATE_TRUSTED_PROXIES: comma-separated networks
// (CIDR, e.g. 10.0.0.0/8) or single addresses of the proxies in front of
// a server, whose X-Forwarded-For and X-Real-IP are believed. Unset, no
// proxy is trusted and a client is its peer address.
func (e *Env) TrustedProxies() []netip.Prefix {
	const name = "TOLLGATE_TRUSTED_PROXIES"
	var out []netip.Prefix
	for _, s := range e.List(name) {
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				e.Fail(name, "\""+s+"\" is neither an IP address nor a CIDR network such as 10.0.0.0/8")
				continue
			}
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			e.Fail(name, "\""+s+"\" is not a CIDR network such as 10.0.0.0/8 or 2001:db8::/32")
			continue
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		out = append(out, p.Masked())
	}
	return out
}
