package events

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
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
	// Resolver looks host names up (net.DefaultResolver when nil).
	Resolver *net.Resolver
}

// blockedNets are refused beside what netip classifies: shared address
// space (carrier-grade NAT) and the IPv4 "this network" block.
var blockedNets = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("0.0.0.0/8"),
}

// allowedIP returns an error naming ip when the guard refuses it.
func (g Guard) allowedIP(ip netip.Addr) error {
	if g.AllowPrivate {
		return nil
	}
	ip = ip.Unmap()
	blocked := ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified()
	for _, n := range blockedNets {
		blocked = blocked || n.Contains(ip)
	}
	if blocked {
		return fmt.Errorf("%s is a loopback, private or link-local address", ip)
	}
	return nil
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
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := g.allowedIP(ip); err != nil {
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
		if err := g.allowedIP(ip); err != nil {
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
		if err := g.allowedIP(ap.Addr()); err != nil {
			return fmt.Errorf("events: refused to connect: %w", err)
		}
		return nil
	}}
}
