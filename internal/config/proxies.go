package config

import (
	"net/netip"
	"strings"

	"github.com/tollgate/tollgate/internal/httpx"
)

// TrustedProxies reads TOLLGATE_TRUSTED_PROXIES, the proxies in front of
// a server whose forwarding headers are believed, and
// TOLLGATE_CLIENT_IP_HEADER, the header they name the client in:
// X-Forwarded-For (the default; proxies that append) or X-Real-IP
// (proxies that overwrite it and pass X-Forwarded-For on untouched).
// Unset, no proxy is trusted and a client is its peer address.
func (e *Env) TrustedProxies() httpx.TrustedProxies {
	t := httpx.TrustedProxies{Networks: e.proxyNetworks()}
	const header = "TOLLGATE_CLIENT_IP_HEADER"
	switch v := e.String(header, "X-Forwarded-For"); {
	case strings.EqualFold(v, "X-Forwarded-For"):
	case strings.EqualFold(v, "X-Real-IP"):
		t.RealIP = true
	default:
		e.Fail(header, "\""+v+"\" is neither X-Forwarded-For nor X-Real-IP")
	}
	return t
}

// proxyNetworks reads TOLLGATE_TRUSTED_PROXIES: comma-separated networks
// (CIDR, e.g. 10.0.0.0/8) or single addresses.
func (e *Env) proxyNetworks() []netip.Prefix {
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
