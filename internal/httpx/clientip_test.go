package httpx

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestClientIP(t *testing.T) {
	trusted := TrustedProxies{Networks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("2001:db8:ffff::/48"), netip.MustParsePrefix("127.0.0.1/32")}}
	realIP := trusted
	realIP.RealIP = true
	cases := []struct {
		name    string
		proxies TrustedProxies
		peer    string
		xff     []string
		realIP  string
		want    string
	}{
		{"direct client", trusted, "203.0.113.7:5000", nil, "", "203.0.113.7"},
		{"untrusted peer's X-Forwarded-For is ignored", trusted, "203.0.113.7:5000", []string{"198.51.100.1"}, "", "203.0.113.7"},
		{"untrusted peer's X-Real-IP is ignored", trusted, "203.0.113.7:5000", nil, "198.51.100.1", "203.0.113.7"},
		{"nobody trusted by default", TrustedProxies{}, "10.0.0.1:5000", []string{"198.51.100.1"}, "", "10.0.0.1"},
		{"one trusted proxy", trusted, "10.0.0.1:5000", []string{"198.51.100.1"}, "", "198.51.100.1"},
		{"spoofed entries left of the real client", trusted, "10.0.0.1:5000",
			[]string{"1.1.1.1, 2.2.2.2, 198.51.100.1"}, "", "198.51.100.1"},
		{"a spoofed trusted address does not hide the client", trusted, "10.0.0.1:5000",
			[]string{"10.9.9.9, 198.51.100.1"}, "", "198.51.100.1"},
		{"a chain of trusted proxies", trusted, "10.0.0.1:5000",
			[]string{"6.6.6.6, 198.51.100.1, 10.0.0.3, 10.0.0.2"}, "", "198.51.100.1"},
		{"several headers are one list", trusted, "10.0.0.1:5000",
			[]string{"6.6.6.6", "198.51.100.1, 10.0.0.2"}, "", "198.51.100.1"},
		{"every hop trusted: the leftmost", trusted, "10.0.0.1:5000", []string{"10.0.0.5, 10.0.0.2"}, "", "10.0.0.5"},
		{"garbage ends the walk at the last trusted hop", trusted, "10.0.0.1:5000",
			[]string{"198.51.100.1, not-an-ip, 10.0.0.2"}, "", "10.0.0.2"},
		{"garbage as the only entry: the peer", trusted, "10.0.0.1:5000", []string{"<script>"}, "", "10.0.0.1"},
		{"X-Real-IP from a trusted proxy", trusted, "10.0.0.1:5000", nil, "198.51.100.1", "198.51.100.1"},
		{"X-Forwarded-For wins over X-Real-IP", trusted, "10.0.0.1:5000", []string{"198.51.100.2"}, "198.51.100.1", "198.51.100.2"},
		{"a trusted X-Real-IP proxy's X-Real-IP is not overridden by a client's X-Forwarded-For", realIP, "10.0.0.1:5000",
			[]string{"6.6.6.6"}, "198.51.100.1", "198.51.100.1"},
		{"X-Real-IP mode: an untrusted peer's X-Real-IP is ignored", realIP, "203.0.113.7:5000", nil, "198.51.100.1", "203.0.113.7"},
		{"X-Real-IP mode without X-Real-IP: the peer", realIP, "10.0.0.1:5000", []string{"6.6.6.6"}, "", "10.0.0.1"},
		{"bad X-Real-IP: the peer", trusted, "10.0.0.1:5000", nil, "nope", "10.0.0.1"},
		{"entries with ports", trusted, "10.0.0.1:5000", []string{"198.51.100.1:4711"}, "", "198.51.100.1"},
		{"IPv6 with port", trusted, "10.0.0.1:5000", []string{"[2001:db8::7]:4711"}, "", "2001:db8::7"},
		{"IPv6 proxies", trusted, "[2001:db8:ffff::1]:443", []string{"2001:db8::7, 2001:db8:ffff::2"}, "", "2001:db8::7"},
		{"IPv4-mapped addresses are IPv4", trusted, "[::ffff:10.0.0.1]:443", []string{"::ffff:198.51.100.1"}, "", "198.51.100.1"},
		{"zones are dropped", trusted, "[fe80::1%eth0]:443", nil, "", "fe80::1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = c.peer
			for _, v := range c.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if c.realIP != "" {
				r.Header.Set("X-Real-IP", c.realIP)
			}
			if got := c.proxies.ClientIP(r); got != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
}

// TestClientAddrTrustedPeer: a peer trusted for another reason (a gateway
// that authenticated itself) is a trusted hop though no network lists it.
func TestClientAddrTrustedPeer(t *testing.T) {
	h := http.Header{}
	h.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.1")
	gateway := netip.MustParseAddr("192.0.2.10")
	if got := (TrustedProxies{}).ClientAddr(gateway, h, true); got.String() != "198.51.100.1" {
		t.Errorf("got %s, want 198.51.100.1", got)
	}
	if got := (TrustedProxies{}).ClientAddr(gateway, h, false); got != gateway {
		t.Errorf("untrusted: got %s, want the peer", got)
	}
}

func TestClientIPMiddleware(t *testing.T) {
	var got string
	h := TrustedProxies{Networks: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = ClientIP(r)
	}))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "127.0.0.1:1234"
	r.Header.Set("X-Forwarded-For", "198.51.100.9")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if got != "198.51.100.9" {
		t.Errorf("behind the middleware: %s, want 198.51.100.9", got)
	}
	if got := ClientIP(r); got != "127.0.0.1" {
		t.Errorf("without the middleware: %s, want the peer 127.0.0.1", got)
	}
}

// TestHTTPS believes X-Forwarded-Proto from trusted proxies only.
func TestHTTPS(t *testing.T) {
	proxies := TrustedProxies{Networks: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	for _, tc := range []struct {
		peer, proto string
		tls, want   bool
	}{
		{"127.0.0.1:1234", "https", false, true},
		{"127.0.0.1:1234", "HTTPS", false, true},
		{"127.0.0.1:1234", "http", false, false},
		{"127.0.0.1:1234", "", false, false},
		{"192.0.2.1:1234", "https", false, false},
		{"192.0.2.1:1234", "", true, true},
	} {
		var got bool
		h := proxies.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = HTTPS(r) }))
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.peer
		if tc.proto != "" {
			r.Header.Set("X-Forwarded-Proto", tc.proto)
		}
		if tc.tls {
			r.TLS = &tls.ConnectionState{}
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		if got != tc.want {
			t.Errorf("HTTPS from %s with X-Forwarded-Proto %q (TLS %v) = %v, want %v", tc.peer, tc.proto, tc.tls, got, tc.want)
		}
	}
}
