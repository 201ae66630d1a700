package checkapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestOriginalRequest(t *testing.T) {
	cases := []struct {
		name, method, target string
		headers              map[string]string
		wantMethod, wantURI  string
		wantErr              string
	}{
		{"nginx", "GET", "/v1/forward-auth", map[string]string{"X-Original-Method": "post", "X-Original-URI": "/v1/search?q=1"},
			"POST", "/v1/search?q=1", ""},
		{"nginx without a method", "GET", "/v1/forward-auth", map[string]string{"X-Original-URI": "/x"}, "GET", "/x", ""},
		{"traefik", "GET", "/v1/forward-auth", map[string]string{"X-Forwarded-Method": "DELETE", "X-Forwarded-Uri": "/repos/1"},
			"DELETE", "/repos/1", ""},
		{"envoy", "PATCH", "/v1/forward-auth/repos/1?x=y", nil, "PATCH", "/repos/1?x=y", ""},
		{"envoy at the root", "GET", "/v1/forward-auth", nil, "GET", "/", ""},
		{"envoy with a query only", "GET", "/v1/forward-auth?x=y", nil, "GET", "/?x=y", ""},
		{"absolute URI", "GET", "/v1/forward-auth", map[string]string{"X-Original-URI": "http://example.com/a?b=c"}, "GET", "/a?b=c", ""},
		{"both ways: refused", "GET", "/v1/forward-auth", map[string]string{"X-Original-URI": "/a", "X-Forwarded-Uri": "/b"},
			"", "", "X-Original-URI"},
		{"bad method", "GET", "/v1/forward-auth", map[string]string{"X-Original-Method": "GET /", "X-Original-URI": "/a"},
			"", "", "X-Original-Method"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, c.target, nil)
			for k, v := range c.headers {
				r.Header.Set(k, v)
			}
			method, uri, err := originalRequest(r)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), "malformed") {
					t.Fatalf("err = %v, want a malformed request naming %s", err, c.wantErr)
				}
				return
			}
			if err != nil || method != c.wantMethod || uri != c.wantURI {
				t.Errorf("got %q %q %v, want %q %q", method, uri, err, c.wantMethod, c.wantURI)
			}
		})
	}
}

func TestForwardedKey(t *testing.T) {
	cfg := ForwardConfig{KeyHeaders: DefaultKeyHeaders, KeyQuery: "api_key"}
	cases := []struct {
		name    string
		headers map[string]string
		query   string
		want    string
	}{
		{"bearer", map[string]string{"Authorization": "Bearer tg_a"}, "", "tg_a"},
		{"bearer, any case", map[string]string{"Authorization": "bearer  tg_a "}, "", "tg_a"},
		{"basic is not a key", map[string]string{"Authorization": "Basic dXNlcjpwYXNz"}, "", ""},
		{"basic, then X-API-Key", map[string]string{"Authorization": "Basic x", "X-API-Key": "tg_b"}, "", "tg_b"},
		{"Authorization first", map[string]string{"Authorization": "Bearer tg_a", "X-API-Key": "tg_b"}, "", "tg_a"},
		{"query", nil, "page=2&api_key=tg_c", "tg_c"},
		{"headers before the query", map[string]string{"X-API-Key": "tg_b"}, "api_key=tg_c", "tg_b"},
		{"none", nil, "page=2", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range c.headers {
				h.Set(k, v)
			}
			if got := cfg.key(h, c.query); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
	if got := (ForwardConfig{KeyHeaders: DefaultKeyHeaders}).key(http.Header{}, "api_key=tg_c"); got != "" {
		t.Errorf("query without KeyQuery: %q, want none", got)
	}
}
