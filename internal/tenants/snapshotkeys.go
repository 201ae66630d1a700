package tenants

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tollgate/tollgate/internal/postgres"
)

// SnapshotKey is what the check path keeps of a key: enough to find it by
// hash and decide whether it may be used. Times are µs since the epoch,
// 0 for none.
type SnapshotKey struct {
	ID          string
	TenantUUID  [16]byte
	Hash        KeyHash
	ExpiresAtUS int64
	RevokedAtUS int64
}

// ScanSnapshotKeys calls fn for every key the snapshot holds — live, or
// dead (revoked or expired) for less than DeadKeyGrace — (ids nil) or for
// those of them with the given IDs (malformed ones match nothing), in no
// particular order, reading only the columns SnapshotKey holds: the check
// path's snapshot streams a million keys without holding them twice.
func (s *Store) ScanSnapshotKeys(ctx context.Context, ids []string, fn func(SnapshotKey) error) error {
	sql := `SELECT id, tenant_id, hash, expires_at, revoked_at FROM api_keys WHERE ` + heldKeyCondition
	args := []any{DeadKeyGrace.Seconds()}
	if ids != nil {
		valid := make([]string, 0, len(ids))
		for _, id := range ids {
			if postgres.IsUUID(id) {
				valid = append(valid, id)
			}
		}
		if len(valid) == 0 {
			return nil
		}
		sql += ` AND id = ANY($2::uuid[])`
		args = append(args, valid)
	}
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("tenants: scan keys: %w", err)
	}
	defer rows.Close()
	var (
		k        SnapshotKey
		id       [16]byte
		exp, rev pgtype.Timestamptz
	)
	hash := hashScanner{&k.Hash}
	for rows.Next() {
		if err := rows.Scan(&id, &k.TenantUUID, &hash, &exp, &rev); err != nil {
			return fmt.Errorf("tenants: scan keys: %w", err)
		}
		k.ID = FormatUUID(id)
		k.ExpiresAtUS, k.RevokedAtUS = micros(exp), micros(rev)
		if err := fn(k); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("tenants: scan keys: %w", err)
	}
	return nil
}

// hashScanner reads a bytea of 32 bytes into a KeyHash without allocating.
type hashScanner struct{ h *KeyHash }

func (s hashScanner) ScanBytes(b []byte) error {
	if len(b) != len(s.h) {
		return fmt.Errorf("key hash of %d bytes", len(b))
	}
	copy(s.h[:], b)
	return nil
}

func micros(t pgtype.Timestamptz) int64 {
	if !t.Valid {
		return 0
	}
	return t.Time.UnixMicro()
}

// FormatUUID returns the canonical text of a UUID.
func FormatUUID(u [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// ParseUUID returns the bytes of a UUID in canonical text, or false.
func ParseUUID(s string) (u [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	ok = decodeHex(u[0:4], s[0:8]) && decodeHex(u[4:6], s[9:13]) && decodeHex(u[6:8], s[14:18]) &&
		decodeHex(u[8:10], s[19:23]) && decodeHex(u[10:], s[24:])
	return u, ok
}

// ParseKeyHash returns the key hash whose hex text is s (as Postgres's
// encode(key_hash, 'hex') writes it, in change notifications), or false.
func ParseKeyHash(s string) (h KeyHash, ok bool) {
	return h, len(s) == 2*len(h) && decodeHex(h[:], s)
}

// decodeHex decodes the hex text s, twice as long as dst, into dst
// without allocating; false when s holds a non-hex character.
func decodeHex(dst []byte, s string) bool {
	for i := range dst {
		hi, lo := unhex(s[2*i]), unhex(s[2*i+1])
		if hi > 15 || lo > 15 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10
	}
	return 255
}
