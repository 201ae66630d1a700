package httpx

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// TrustedProxies says whose forwarding headers are believed, and which
// header names the client: load balancers and gateways in front of a
// server. The zero value trusts nobody, so the client is always the peer
// address.
type TrustedProxies struct {
	// Networks are the proxies' addresses.
	Networks []netip.Prefix
	// RealIP says the proxies write the client to X-Real-IP, overwriting
	// whatever the client sent, rather than append it to
	// X-Forwarded-For: a trusted peer's X-Real-IP is then the client and
	// X-Forwarded-For, which such a proxy passes on as the client wrote
	// it, is not read at all.
	RealIP bool
}

// Contains reports whether a belongs to a trusted network.
func (t TrustedProxies) Contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t.Networks {
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
// client is the peer, whatever the headers say. When it is and RealIP is
// set, the client is the peer's X-Real-IP (the peer when that is missing
// or unparsable). Otherwise it is ForwardedClient's answer.
func (t TrustedProxies) ClientAddr(peer netip.Addr, h http.Header, peerTrusted bool) netip.Addr {
	peer = peer.Unmap().WithZone("")
	if !peerTrusted {
		return peer
	}
	if t.RealIP {
		if a, ok := parseHop(h.Get("X-Real-IP")); ok {
			return a
		}
		return peer
	}
	return t.ForwardedClient(peer, h)
}

// ForwardedClient is the client a trusted peer names in h's
// X-Forwarded-For: the rightmost address that is not a trusted proxy.
// Every hop appends the address it saw, so everything to the left of the
// first untrusted hop could have been written by the client itself. If
// every address is trusted, the leftmost is the client; without
// X-Forwarded-For, X-Real-IP is (set by a proxy that overwrites rather
// than appends), else the peer. Unparsable entries end the walk: the last
// trusted address seen before one is the client.
func (t TrustedProxies) ForwardedClient(peer netip.Addr, h http.Header) netip.Addr {
	peer = peer.Unmap().WithZone("")
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

type (
	clientIPKey struct{}
	httpsKey    struct{}
)

// Middleware resolves each request's client address (ClientIP) and
// whether it came over HTTPS (HTTPS) once, and keeps both in the
// request's context for the package functions of the same names.
func (t TrustedProxies) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), clientIPKey{}, t.ClientIP(r))
		ctx = context.WithValue(ctx, httpsKey{}, t.HTTPS(r))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// HTTPS reports whether the client reached us over HTTPS: r came over
// TLS, or from a trusted proxy that says "X-Forwarded-Proto: https".
// Anyone else's X-Forwarded-Proto is ignored.
func (t TrustedProxies) HTTPS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	peer, ok := PeerAddr(r)
	return ok && t.Contains(peer) && strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https")
}

// ClientIP returns the client address that TrustedProxies.Middleware
// resolved for r, or r's peer address when no middleware did.
func ClientIP(r *http.Request) string {
	if ip, ok := r.Context().Value(clientIPKey{}).(string); ok {
		return ip
	}
	return TrustedProxies{}.ClientIP(r)
}

// HTTPS reports what TrustedProxies.Middleware found for r (see
// TrustedProxies.HTTPS), or, when no middleware did, whether r came over
// TLS.
func HTTPS(r *http.Request) bool {
	if https, ok := r.Context().Value(httpsKey{}).(bool); ok {
		return https
	}
	return r.TLS != nil
}
