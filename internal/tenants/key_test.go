package tenants

import (
	"fmt"
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

// TestParseHexForms: UUIDs and key hashes parse from the text Postgres
// writes and back, and text with a wrong length, separator or character
// is refused.
func TestParseHexForms(t *testing.T) {
	const id = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	u, ok := ParseUUID(id)
	if !ok || FormatUUID(u) != id {
		t.Fatalf("ParseUUID(%q) = %x, %v; want it back", id, u, ok)
	}
	if u2, ok := ParseUUID(strings.ToUpper(id)); !ok || u2 != u {
		t.Errorf("ParseUUID(upper case) = %x, %v; want %x", u2, ok, u)
	}
	for _, bad := range []string{"", id[:35], id + "0", strings.Replace(id, "-", "x", 1), strings.Replace(id, "0f", "0g", 1),
		"0f1e2d3c4b5a-6978-8796-a5b4c3d2e1f00"} {
		if _, ok := ParseUUID(bad); ok {
			t.Errorf("ParseUUID(%q) is ok", bad)
		}
	}
	_, h, _ := GenerateKey()
	text := fmt.Sprintf("%x", h[:])
	if got, ok := ParseKeyHash(text); !ok || got != h {
		t.Errorf("ParseKeyHash(%q) = %x, %v; want %x", text, got, ok, h)
	}
	for _, bad := range []string{"", text[:len(text)-2], text + "00", "zz" + text[2:]} {
		if _, ok := ParseKeyHash(bad); ok {
			t.Errorf("ParseKeyHash(%q) is ok", bad)
		}
	}
}
