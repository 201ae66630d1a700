package httpx

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// TrustedProxies lists the networks whose forwarding headers
// (X-Forwarded-For, X-Real-IP) are believed: load balancers and gateways
// in front of a server. The zero value trusts nobody, so the client is
// always the peer address.
type TrustedProxies []netip.Prefix

// Contains reports whether a belongs to a trusted network.
func (t TrustedProxies) Contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientIP returns the address of the client that sent r: the peer
// address, unless the peer is a trusted proxy (see ClientAddr).
func (t TrustedProxies) ClientIP(r *http.Request) string {
	peer, ok := PeerAddr(r)
	if !ok {
		return r.RemoteAddr
	}
	return t.ClientAddr(peer, r.Header, t.Contains(peer)).String()
}

// ClientAddr resolves the client behind a request that came from peer
// with headers h. When the peer is not trusted (peerTrusted false) the
// client is the peer, whatever the headers say. When it is, the client is
// the rightmost address of X-Forwarded-For that is not a trusted proxy:
// every hop appends the address it saw, so everything to the left of the
// first untrusted hop could have been written by the client itself. If
// every address in X-Forwarded-For is trusted, the leftmost is the client;
// without X-Forwarded-For, X-Real-IP is (set by a proxy that overwrites
// rather than appends). Unparsable entries end the walk: the last trusted
// address seen before one is the client.
func (t TrustedProxies) ClientAddr(peer netip.Addr, h http.Header, peerTrusted bool) netip.Addr {
	peer = peer.Unmap().WithZone("")
	if !peerTrusted {
		return peer
	}
	hops := forwardedFor(h)
	if len(hops) == 0 {
		if a, ok := parseHop(h.Get("X-Real-IP")); ok {
			return a
		}
		return peer
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			break
		}
		client = a
		if !t.Contains(a) {
			break
		}
	}
	return client
}

// forwardedFor returns the entries of every X-Forwarded-For header, in
// order (several headers count as one comma-separated list).
func forwardedFor(h http.Header) []string {
	var hops []string
	for _, v := range h.Values("X-Forwarded-For") {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				hops = append(hops, s)
			}
		}
	}
	return hops
}

// parseHop parses one forwarded address: an IP, possibly with a port
// ("192.0.2.1:4711", "[2001:db8::1]:4711"), as some proxies write them.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.Addr{}, false
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}

// PeerAddr returns the address of the connection r came on.
func PeerAddr(r *http.Request) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

type clientIPKey struct{}

// Middleware resolves each request's client address once (ClientIP) and
// keeps it in the request's context for the package function ClientIP.
func (t TrustedProxies) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), clientIPKey{}, t.ClientIP(r))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// ClientIP returns the client address that TrustedProxies.Middleware
// resolved for r, or r's peer address when no middleware did.
func ClientIP(r *http.Request) string {
	if ip, ok := r.Context().Value(clientIPKey{}).(string); ok {
		return ip
	}
	return TrustedProxies(nil).ClientIP(r)
}
