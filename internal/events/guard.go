package events

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Guard keeps webhooks off the provider's own network: a URL whose host
// is, or resolves to, a loopback, private, link-local, unspecified or
// multicast address is refused when an endpoint is made, and every
// connection is checked again when it is dialled (Dialer), so that a
// name that resolves elsewhere later (DNS rebinding) is refused too.
type Guard struct {
	// AllowPrivate lets such addresses through
	// (TOLLGATE_WEBHOOK_ALLOW_PRIVATE: tests, and receivers on the same
	// network on purpose).
	AllowPrivate bool
	// AllowAddrs lets these addresses through, and no other refused one
	// (TOLLGATE_WEBHOOK_ALLOW_ADDRS: a receiver on this machine, as the
	// demo's, without opening the whole private network): an entry with
	// a port that port only, one with port 0 every port of its address.
	AllowAddrs []netip.AddrPort
	// Resolver looks host names up (net.DefaultResolver when nil).
	Resolver *net.Resolver
}

// blockedNets are refused beside what netip classifies: shared address
// space (carrier-grade NAT) and the IPv4 "this network" block.
var blockedNets = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("0.0.0.0/8"),
}

// allowedIP returns an error naming ip and port when the guard refuses
// it, port being the one dialled, and the setting that would allow it:
// its text follows "must not point to", "resolves to" or "refused to
// connect to".
func (g Guard) allowedIP(ip netip.Addr, port uint16) error {
	ip = ip.Unmap()
	if g.AllowPrivate || slices.ContainsFunc(g.AllowAddrs, func(a netip.AddrPort) bool {
		return a.Addr() == ip && (a.Port() == 0 || a.Port() == port)
	}) {
		return nil
	}
	if refused(ip) {
		return fmt.Errorf("%s, a loopback, private or link-local address that TOLLGATE_WEBHOOK_ALLOW_ADDRS does not list",
			netip.AddrPortFrom(ip, port))
	}
	return nil
}

// Prefixes of IPv6 addresses that carry an IPv4 address, which is where
// a connection to them ends up: NAT64's well-known prefix (RFC 6052, the
// IPv4 address in the last 32 bits), 6to4 (RFC 3056, in bits 16-47) and
// Teredo (RFC 4380: the server's in bits 32-63, the client's inverted in
// the last 32). Local-use NAT64 (RFC 8215) translates to whatever the
// operator's network chose, so it is refused whole.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	nat64Use  = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour = netip.MustParsePrefix("2002::/16")
	teredo    = netip.MustParsePrefix("2001::/32")
)

// refused reports whether the guard refuses ip (unmapped) unless allowed:
// its kind, or the kind of an IPv4 address it embeds.
func refused(ip netip.Addr) bool {
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return true
	}
	for _, n := range blockedNets {
		if n.Contains(ip) {
			return true
		}
	}
	if !ip.Is6() {
		return false
	}
	b := ip.As16()
	v4 := func(a [4]byte) bool { return refused(netip.AddrFrom4(a)) }
	switch {
	case nat64.Contains(ip):
		return v4([4]byte{b[12], b[13], b[14], b[15]})
	case nat64Use.Contains(ip):
		return true
	case sixToFour.Contains(ip):
		return v4([4]byte{b[2], b[3], b[4], b[5]})
	case teredo.Contains(ip):
		return v4([4]byte{b[4], b[5], b[6], b[7]}) || v4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
	}
	return false
}

// CheckURL returns why an endpoint may not have raw as its URL, or "": it
// must be an absolute http or https URL without credentials, and its
// host must not be, or resolve to, an address the guard refuses. A name
// that does not resolve now is accepted: its deliveries fail until it
// does.
func (g Guard) CheckURL(ctx context.Context, raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil || len(raw) > 2048:
		return "must be a URL of at most 2048 characters"
	case u.Scheme != "https" && u.Scheme != "http":
		return "must start with https:// or http://"
	case u.Host == "" || u.Hostname() == "":
		return "must name a host"
	case u.User != nil:
		return "must not hold a user name or password"
	}
	host := u.Hostname()
	port := uint16(80)
	if u.Scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return "must have a port from 1 to 65535"
		}
		port = uint16(n)
	}
	if ip, ok := parseHostIP(host); ok {
		if err := g.allowedIP(ip, port); err != nil {
			return "must not point to " + err.Error()
		}
		return ""
	}
	if g.AllowPrivate {
		return ""
	}
	if h := strings.ToLower(strings.TrimSuffix(host, ".")); h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return "must not point to this machine"
	}
	r := g.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return ""
	}
	for _, ip := range ips {
		if err := g.allowedIP(ip, port); err != nil {
			return "resolves to " + err.Error()
		}
	}
	return ""
}

// Dialer returns a dialer that refuses, at connect time, every address
// the guard refuses: the address actually dialled, after resolution.
func (g Guard) Dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, Control: func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("events: dial %s: %w", address, err)
		}
		if err := g.allowedIP(ap.Addr(), ap.Port()); err != nil {
			return fmt.Errorf("events: refused to connect to %w", err)
		}
		return nil
	}}
}

// parseHostIP returns the address a URL's host stands for when it is an
// address rather than a name, read as the system's resolver reads it:
// besides the usual forms, an IPv4 address in any form inet_aton accepts
// (127.1, 2130706433, 0x7f.0.0.1, 0177.0.0.1) and any of them with the
// trailing dot of a fully qualified name (127.0.0.1.). A dialler may
// connect to such a host without any DNS lookup, so the create-time check
// must see the address the dial-time one will.
func parseHostIP(host string) (netip.Addr, bool) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip, true
	}
	return parseInetAton(strings.TrimSuffix(host, "."))
}

// parseInetAton parses s as inet_aton does: one to four parts separated
// by dots, each decimal, octal (a leading 0) or hexadecimal (0x); the
// last part fills all the bytes the parts before it left (a.b.c.d,
// a.b.c with c 16 bits, a.b with b 24 bits, a alone 32 bits).
func parseInetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var ip uint64
	for i, p := range parts {
		base := 10
		switch {
		case len(p) > 2 && (p[:2] == "0x" || p[:2] == "0X"):
			base, p = 16, p[2:]
		case len(p) > 1 && p[0] == '0':
			base, p = 8, p[1:]
		}
		if p == "" || p[0] == '+' || p[0] == '-' {
			return netip.Addr{}, false
		}
		n, err := strconv.ParseUint(p, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 0xff {
				return netip.Addr{}, false
			}
			ip |= n << (8 * (3 - i))
			continue
		}
		if bits := 8 * (4 - i); n >= 1<<bits {
			return netip.Addr{}, false
		}
		ip |= n
	}
	return netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)}), true
}
