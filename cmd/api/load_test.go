package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/testenv"
)

// TestAStartThatFailsSaysWhy: an api that cannot load (Postgres not
// answering) returns the reason, releasing what it had opened, and does
// not panic.
func TestAStartThatFailsSaysWhy(t *testing.T) {
	env := map[string]string{
		"TOLLGATE_DATABASE_URL": "postgres://tollgate@" + testenv.FreeAddr(t) + "/tollgate?sslmode=disable&connect_timeout=2",
		"TOLLGATE_API_ADDR":     testenv.FreeAddr(t),
		"TOLLGATE_STORE":        "memory",
	}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), nil, func(k string) string { return env[k] }, &stdout, &stderr, nil)
	if err == nil || !strings.Contains(err.Error(), "postgres") {
		t.Errorf("run = %v, want an error naming Postgres", err)
	}
}
