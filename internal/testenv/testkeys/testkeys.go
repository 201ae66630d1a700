// Package testkeys gives tests the secret keys of testenv.SecretKey. It is
// apart from testenv, which the auth package's own dependencies test with.
package testkeys

import (
	"testing"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/testenv"
)

// SecretKeys are the keys of testenv.SecretKey.
func SecretKeys(t testing.TB) *auth.SecretKeys {
	t.Helper()
	keys, err := auth.ParseSecretKeys(testenv.SecretKey)
	testenv.Must(t, err)
	return keys
}
