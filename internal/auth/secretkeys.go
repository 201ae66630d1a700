package auth

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
)

// SecretKeys seal what Tollgate keeps secret at rest (the service-token
// signing keys) with AES-256-GCM: the current key seals, the current and
// previous keys open, so that a key can be rotated and the stored secrets
// re-encrypted (Store.ResealSigningKeys). A nil *SecretKeys seals nothing
// and opens nothing.
type SecretKeys struct {
	current keyAEAD
	all     []keyAEAD
}

type keyAEAD struct {
	id   [8]byte // the first bytes of the key's SHA-256: which key sealed a value
	aead cipher.AEAD
}

// sealedVersion starts every sealed value: version, key id, nonce, then
// the ciphertext with its tag.
const sealedVersion = 1

// ErrNoSecretKey is returned when a secret must be sealed or opened and no
// key is configured.
var ErrNoSecretKey = errors.New("auth: no secret key (TOLLGATE_SECRET_KEY) is configured")

// ErrKeyNotConfigured is returned (errors.Is) when a value was sealed with
// a key that is neither the current key nor a previous one.
var ErrKeyNotConfigured = errors.New("auth: the value was sealed with a key that is not configured (set it in TOLLGATE_SECRET_KEY_PREVIOUS)")

// BadSecretKeyError is a secret key ParseSecretKeys cannot read.
type BadSecretKeyError struct {
	// Position is the key's place in ParseSecretKeys's arguments: 1 for
	// the current key, 2 for the first previous one, and so on.
	Position int
}

func (e *BadSecretKeyError) Error() string {
	return fmt.Sprintf("auth: secret key %d: %s", e.Position, BadSecretKeyReason)
}

// BadSecretKeyReason says what a secret key must be.
const BadSecretKeyReason = "must be 32 bytes in base64 (e.g. `admin secrets generate`)"

// GenerateSecretKey returns a fresh key in the form ParseSecretKeys reads:
// 32 random bytes, base64.
func GenerateSecretKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// ParseSecretKeys reads the current key and any previous ones, each 32
// bytes in standard or URL-safe base64. A key it cannot read is a
// *BadSecretKeyError naming its position.
func ParseSecretKeys(current string, previous ...string) (*SecretKeys, error) {
	var k SecretKeys
	for i, s := range append([]string{current}, previous...) {
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			raw, err = base64.RawURLEncoding.DecodeString(s)
		}
		if err != nil || len(raw) != 32 {
			return nil, &BadSecretKeyError{Position: i + 1}
		}
		block, _ := aes.NewCipher(raw)
		aead, _ := cipher.NewGCM(block)
		sum := sha256.Sum256(raw)
		ka := keyAEAD{aead: aead}
		copy(ka.id[:], sum[:8])
		k.all = append(k.all, ka)
	}
	k.current = k.all[0]
	return &k, nil
}

// seal encrypts plain with the current key; aad binds it to where it is
// stored.
func (k *SecretKeys) seal(plain, aad []byte) ([]byte, error) {
	if k == nil {
		return nil, ErrNoSecretKey
	}
	nonce := make([]byte, k.current.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := append([]byte{sealedVersion}, k.current.id[:]...)
	out = append(out, nonce...)
	return k.current.aead.Seal(out, nonce, plain, aad), nil
}

// open decrypts a sealed value with whichever configured key sealed it.
// sealedByCurrent reports whether that was the current key.
func (k *SecretKeys) open(sealed, aad []byte) (plain []byte, sealedByCurrent bool, err error) {
	if k == nil {
		return nil, false, ErrNoSecretKey
	}
	if !isSealed(sealed) {
		return nil, false, errors.New("auth: not a sealed value")
	}
	id, rest := sealed[1:9], sealed[9:]
	for _, ka := range k.all {
		if !bytes.Equal(ka.id[:], id) {
			continue
		}
		n := ka.aead.NonceSize()
		if len(rest) < n {
			break
		}
		plain, err := ka.aead.Open(nil, rest[:n], rest[n:], aad)
		if err != nil {
			return nil, false, fmt.Errorf("auth: open sealed value: %w", err)
		}
		return plain, ka.id == k.current.id, nil
	}
	return nil, false, ErrKeyNotConfigured
}

// isSealed tells a sealed value from a signing key stored in the clear by
// an earlier version (64 bytes of Ed25519 private key).
func isSealed(b []byte) bool { return len(b) > 9+12 && b[0] == sealedVersion && len(b) != 64 }

// Seal encrypts plain with the current key for other features' secrets
// at rest (webhook endpoint secrets); aad binds the value to where it is
// stored, and Open must be given the same. ErrNoSecretKey on a nil
// *SecretKeys.
func (k *SecretKeys) Seal(plain, aad []byte) ([]byte, error) { return k.seal(plain, aad) }

// Open decrypts a value Seal made with whichever configured key sealed it;
// current reports whether that was the current key (else the value should
// be sealed again).
func (k *SecretKeys) Open(sealed, aad []byte) (plain []byte, current bool, err error) {
	if len(sealed) <= 9+12 || sealed[0] != sealedVersion {
		return nil, false, errors.New("auth: not a sealed value")
	}
	return k.open(sealed, aad)
}
