package tenants

import (
	"crypto/rand"
	"crypto/sha256"
	"hash/crc32"
	"strings"

	"github.com/tollgate/tollgate/internal/audit"
)

// API keys look like tg_<30 base62 random characters><6 base62 checksum
// characters>. The checksum (CRC-32 of everything before it) lets a
// mistyped or truncated key be rejected without any lookup; it is not a
// secret and proves nothing about the key's validity.
const (
	keyPrefix       = "tg_"
	keyRandomLen    = 30
	keyChecksumLen  = 6
	keyLen          = len(keyPrefix) + keyRandomLen + keyChecksumLen
	displayPrefixOf = len(keyPrefix) + 8
	base62          = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

// KeyHash is the SHA-256 of a key's full text: the only form stored.
type KeyHash [32]byte

// HashKey returns the hash a key is stored and looked up by.
func HashKey(secret string) KeyHash {
	// Hashed from the stack: every check hashes its key.
	var buf [keyLen]byte
	if len(secret) <= len(buf) {
		return sha256.Sum256(append(buf[:0], secret...))
	}
	return sha256.Sum256([]byte(secret))
}

// GenerateKey returns a new secret key, its hash and its display prefix.
func GenerateKey() (secret string, hash KeyHash, prefix string) {
	var b strings.Builder
	b.Grow(keyLen)
	b.WriteString(keyPrefix)
	buf := make([]byte, 64)
	for b.Len() < len(keyPrefix)+keyRandomLen {
		_, _ = rand.Read(buf)
		for _, c := range buf {
			// 248 = 4 × 62: rejecting above it keeps the choice uniform.
			if c < 248 && b.Len() < len(keyPrefix)+keyRandomLen {
				b.WriteByte(base62[c%62])
			}
		}
	}
	body := b.String()
	sum := checksum(body)
	secret = body + string(sum[:])
	return secret, HashKey(secret), DisplayPrefix(secret)
}

// DisplayPrefix returns the part of a key shown in lists ("tg_" and 8
// characters): enough to recognise a key, far too little to use it.
func DisplayPrefix(secret string) string {
	if len(secret) < displayPrefixOf {
		return secret
	}
	return secret[:displayPrefixOf]
}

// WellFormed reports whether s has the shape and checksum of a key.
func WellFormed(s string) bool {
	if len(s) != keyLen || !strings.HasPrefix(s, keyPrefix) {
		return false
	}
	for i := len(keyPrefix); i < keyLen; i++ {
		if !isBase62[s[i]] {
			return false
		}
	}
	body := s[:keyLen-keyChecksumLen]
	sum := checksum(body)
	return s[keyLen-keyChecksumLen:] == string(sum[:])
}

// isBase62 tells the characters of base62 (WellFormed runs on every check).
var isBase62 = func() (t [256]bool) {
	for i := 0; i < len(base62); i++ {
		t[base62[i]] = true
	}
	return t
}()

// checksum returns the base62 CRC-32 (IEEE) of body. The CRC is computed
// byte by byte, from the string, so that checking a key allocates nothing.
func checksum(body string) [keyChecksumLen]byte {
	crc := ^uint32(0)
	for i := 0; i < len(body); i++ {
		crc = crc32.IEEETable[byte(crc)^body[i]] ^ crc>>8
	}
	n := ^crc
	var out [keyChecksumLen]byte
	for i := keyChecksumLen - 1; i >= 0; i-- {
		out[i] = base62[n%62]
		n /= 62
	}
	return out
}

// KeyAudit describes a change to an API key for the audit log: the record
// only, never the secret or its hash.
func KeyAudit(action string, before, after *Key) audit.Change {
	k := audit.Subject(before, after)
	return audit.Change{Action: action, TargetType: "key", TargetID: k.ID, TenantID: k.TenantID,
		Before: before, After: after}
}
