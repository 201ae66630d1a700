package envoyrls

import (
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// TestKeyEntrySchemes: the shipped ratelimit.yaml puts the Authorization
// header in the key entry; it is read as forward-auth reads it, so that
// only a Bearer credential (the scheme in any case) is an API key, and a
// caller sending another scheme is anonymous (limited per address), not
// refused as an invalid key.
func TestKeyEntrySchemes(t *testing.T) {
	s := &Service{cfg: Config{KeyEntry: "api_key", IPEntry: "remote_address", ResourceEntries: []string{"resource"}}}
	for _, tc := range []struct {
		name, value, wantKey string
	}{
		{"bare key (x-api-key)", "tg_key123", "tg_key123"},
		{"Bearer", "Bearer tg_key123", "tg_key123"},
		{"bearer in lower case", "bearer tg_key123", "tg_key123"},
		{"BEARER with spaces", "  BEARER   tg_key123 ", "tg_key123"},
		{"Basic", "Basic dXNlcjpwYXNz", ""},
		{"Digest", `Digest username="u", realm="r"`, ""},
		{"Bearer without credentials", "Bearer ", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			desc := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{
				{Key: "api_key", Value: tc.value}, {Key: "remote_address", Value: "203.0.113.9"}}}
			r, ok := s.request(desc, 1)
			if !ok {
				t.Fatalf("request(%q) refused, want a check", tc.value)
			}
			if r.Key != tc.wantKey || r.IP != "203.0.113.9" {
				t.Errorf("request(%q): key %q ip %q, want key %q ip 203.0.113.9", tc.value, r.Key, r.IP, tc.wantKey)
			}
		})
	}
}
