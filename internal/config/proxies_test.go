package config

import (
	"strings"
	"testing"
)

// envWith is an environment with one setting, name = v.
func envWith(name, v string) *Env {
	return New(func(k string) string {
		if k == name {
			return v
		}
		return ""
	})
}

func TestTrustedProxies(t *testing.T) {
	env := func(v string) *Env { return envWith("TOLLGATE_TRUSTED_PROXIES", v) }
	e := env(" 10.0.0.0/8, 192.0.2.7 ,2001:db8::/32, ::1, 172.16.5.9/12, ::ffff:192.0.2.0/120")
	got := e.TrustedProxies().Networks
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32", "::1/128", "172.16.0.0/12", "192.0.2.0/24"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("entry %d: got %s, want %s", i, got[i], want[i])
		}
	}
	if got := env("").TrustedProxies(); got.Networks != nil || got.RealIP {
		t.Errorf("unset: %v, want none", got)
	}
	for _, bad := range []string{"10.0.0.0/33", "proxy.example", "10.0.0.1/8/2"} {
		e := env(bad)
		e.TrustedProxies()
		if err := e.Err(); err == nil || !strings.Contains(err.Error(), "TOLLGATE_TRUSTED_PROXIES") {
			t.Errorf("%q: error %v does not name the setting", bad, err)
		}
	}
}

func TestClientIPHeader(t *testing.T) {
	env := func(v string) *Env { return envWith("TOLLGATE_CLIENT_IP_HEADER", v) }
	for v, realIP := range map[string]bool{"": false, "X-Forwarded-For": false, "x-real-ip": true, "X-Real-IP": true} {
		e := env(v)
		if got := e.TrustedProxies().RealIP; got != realIP || e.Err() != nil {
			t.Errorf("%q: RealIP %v (error %v), want %v", v, got, e.Err(), realIP)
		}
	}
	e := env("Forwarded")
	e.TrustedProxies()
	if err := e.Err(); err == nil || !strings.Contains(err.Error(), "TOLLGATE_CLIENT_IP_HEADER") {
		t.Errorf("Forwarded: error %v does not name the setting", err)
	}
}
