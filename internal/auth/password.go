package auth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/crypto/argon2"
)

// Passwords are hashed with Argon2id (RFC 9106), stored as PHC strings
// ($argon2id$v=19$m=…,t=…,p=…$salt$hash) so that parameters can be raised
// later without invalidating stored hashes. The parameters are OWASP's
// recommended minimum for Argon2id: 19 MiB of memory, 2 passes, 1 lane —
// about 20–40 ms per hash on one core.
const (
	argonMemoryKiB = 19 * 1024
	argonTime      = 2
	argonThreads   = 1
	argonKeyLen    = 32
	argonSaltLen   = 16
)

// Password length limits, in bytes.
const (
	MinPasswordLen = 12
	MaxPasswordLen = 1024
)

// ValidatePassword returns a problem with password, or "".
func ValidatePassword(password string) string {
	switch {
	case len(password) < MinPasswordLen:
		return fmt.Sprintf("must be at least %d characters", MinPasswordLen)
	case len(password) > MaxPasswordLen:
		return fmt.Sprintf("must be at most %d bytes", MaxPasswordLen)
	}
	return ""
}

// hashSlots bounds the Argon2id computations running at once to the
// number of CPUs. Each takes 19 MiB and a core for tens of milliseconds:
// more at once would only queue for the CPUs while holding their memory,
// so a burst of logins could exhaust it. It belongs to the process, as the
// CPUs and the memory do (stores are made per transaction and cannot own
// it).
var hashSlots = make(chan struct{}, runtime.NumCPU())

// withHashSlot runs fn in a free slot of hashSlots, waiting for one as
// long as ctx allows; when ctx ends first it returns ctx's error and does
// not run fn.
func withHashSlot(ctx context.Context, fn func()) error {
	select {
	case hashSlots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("auth: waiting to hash a password: %w", ctx.Err())
	}
	defer func() { <-hashSlots }()
	fn()
	return nil
}

// HashPassword returns the PHC-encoded Argon2id hash of password with a
// fresh random salt. At most runtime.NumCPU() hashes and checks run at
// once; it waits for its turn as long as ctx allows and returns ctx's
// error when that ends first.
func HashPassword(ctx context.Context, password string) (string, error) {
	var hash string
	var err error
	if slotErr := withHashSlot(ctx, func() { hash, err = hashPassword(password) }); slotErr != nil {
		return "", slotErr
	}
	return hash, err
}

func hashPassword(password string) (string, error) {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("auth: salt: %w", err)
	}
	key := argon2.IDKey([]byte(password), salt, argonTime, argonMemoryKiB, argonThreads, argonKeyLen)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemoryKiB, argonTime,
		argonThreads, b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

var errBadHash = errors.New("auth: not an argon2id hash")

// CheckPassword reports whether password matches the PHC-encoded hash, in
// time that does not depend on where they differ. Like HashPassword it
// waits for its turn as long as ctx allows, and returns ctx's error when
// that ends first; a hash it cannot read matches nothing.
func CheckPassword(ctx context.Context, encoded, password string) (bool, error) {
	var ok bool
	err := withHashSlot(ctx, func() { ok, _ = checkPassword(encoded, password) })
	return ok, err
}

func checkPassword(encoded, password string) (bool, error) {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false, errBadHash
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, errBadHash
	}
	var memory, time uint32
	var threads uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &memory, &time, &threads); err != nil ||
		memory == 0 || time == 0 || threads == 0 {
		return false, errBadHash
	}
	b64 := base64.RawStdEncoding
	salt, err := b64.DecodeString(parts[4])
	if err != nil {
		return false, errBadHash
	}
	want, err := b64.DecodeString(parts[5])
	if err != nil || len(want) == 0 {
		return false, errBadHash
	}
	got := argon2.IDKey([]byte(password), salt, time, memory, threads, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}

// dummyHash is checked against when a login names no known user, so that
// an unknown email costs as much time as a wrong password. It is made on
// first use: binaries that never log anyone in do not pay for it (nor does
// it take a slot of hashSlots: it is made once).
var dummyHash = sync.OnceValue(func() string {
	h, _ := hashPassword("tollgate-dummy-password")
	return h
})

// GeneratePassword returns a random password of 24 base62 characters
// (about 143 bits).
func GeneratePassword() string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	out := make([]byte, 0, 24)
	buf := make([]byte, 64)
	for len(out) < 24 {
		_, _ = rand.Read(buf)
		for _, c := range buf {
			if c < 248 && len(out) < 24 { // 248 = 4 × 62 keeps the choice uniform
				out = append(out, alphabet[c%62])
			}
		}
	}
	return string(out)
}
