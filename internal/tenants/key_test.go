package tenants

import (
	"strings"
	"testing"
)

func TestGeneratedKeysAreWellFormedAndDistinct(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		secret, hash, prefix := GenerateKey()
		if !WellFormed(secret) {
			t.Fatalf("%q is not well formed", secret)
		}
		if hash != HashKey(secret) {
			t.Fatal("hash is not the SHA-256 of the secret")
		}
		if !strings.HasPrefix(secret, prefix) || len(prefix) != 11 {
			t.Fatalf("prefix %q of %q: want the first 11 characters", prefix, secret)
		}
		if seen[secret] {
			t.Fatalf("duplicate key %q", secret)
		}
		seen[secret] = true
	}
}

func TestWellFormedRejectsMistypedKeys(t *testing.T) {
	secret, _, _ := GenerateKey()
	flip := func(i int) string {
		b := []byte(secret)
		if b[i] == 'a' {
			b[i] = 'b'
		} else {
			b[i] = 'a'
		}
		return string(b)
	}
	cases := map[string]string{
		"empty":            "",
		"no prefix":        "xx" + secret[2:],
		"truncated":        secret[:len(secret)-1],
		"extra character":  secret + "a",
		"typo in body":     flip(10),
		"typo in checksum": flip(len(secret) - 1),
		"not base62":       secret[:5] + "-" + secret[6:],
		"swapped":          secret[:4] + secret[5:6] + secret[4:5] + secret[6:],
	}
	for name, k := range cases {
		if k == secret {
			continue // the swap of two equal characters
		}
		if WellFormed(k) {
			t.Errorf("%s: %q accepted", name, k)
		}
	}
}
