package main

import (
	"io"
	"strings"
	"testing"
)

func TestServerConfig(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

	c, err := loadServerConfig(env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.JWTSecretGenerated || len(c.JWTSecret) != 32 || c.LoginPerMinute != 5 || c.Redis.Configured() {
		t.Errorf("defaults = %+v", c)
	}
	for name, value := range map[string]string{
		"TOLLGATE_ADMIN_JWT_SECRET":  "too short",
		"TOLLGATE_ADMIN_LOGIN_LIMIT": "0",
		"TOLLGATE_ADMIN_SESSION_TTL": "9999h",
		"TOLLGATE_KEY_PREFIX":        "{x}",
	} {
		_, err := loadServerConfig(env(map[string]string{name: value}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: err = %v, want one naming the setting", name, value, err)
		}
	}
	c, err = loadServerConfig(env(map[string]string{"TOLLGATE_ADMIN_JWT_SECRET": testJWTSecret}), io.Discard)
	if err != nil || c.JWTSecretGenerated || string(c.JWTSecret) != testJWTSecret {
		t.Errorf("a given secret: %+v, %v", c, err)
	}
}
