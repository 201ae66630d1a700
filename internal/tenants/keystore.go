package tenants

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Metadata limits: enough to tag a key with an owner or a purpose, small
// enough that nobody stores documents in it.
const (
	MaxMetadataKeys     = 50
	MaxMetadataKeyLen   = 40
	MaxMetadataValueLen = 500
	MaxKeyNameLen       = 200
)

// KeySpec describes a key to issue.
type KeySpec struct {
	Name      string
	Metadata  map[string]string
	ExpiresAt *time.Time
	// MaxLive, when above 0, refuses the key (ECONFLICT) if the tenant
	// has this many live keys, or HeldKeysPerLive times as many in the
	// snapshot, already (ensureRoom); 0 sets no limit.
	MaxLive int
}

// MaxLiveKeys is the most live keys (neither revoked nor expired) a tenant
// may have when it makes another through the admin API. Every check API
// node keeps every live key in its snapshot, so no tenant may grow that
// without bound. Operators' tools (the CLI) are not held to it.
const MaxLiveKeys = 1000

// DeadKeyGrace is how long a dead key (revoked or expired) stays in the
// check API's snapshot: during it a check with the key answers
// key_revoked or key_expired (403) from memory; after it the key is only
// found in Postgres on demand (a check may then answer invalid_key, 401,
// when Postgres is not asked: it is down or the lookups are limited).
const DeadKeyGrace = 7 * 24 * time.Hour

// HeldKeysPerLive bounds the keys a tenant has in the snapshot — live
// keys and keys dead for less than DeadKeyGrace — to this many times its
// live-key limit: with MaxLiveKeys, 2,000. A tenant admin who issues and
// revokes keys in a loop reaches it and is refused (ECONFLICT) until
// DeadKeyGrace has passed for the keys revoked first.
const HeldKeysPerLive = 2

// heldKeyCondition is true for a key the snapshot holds: live, or dead
// for less than DeadKeyGrace ($1, seconds).
const heldKeyCondition = `(revoked_at IS NULL OR revoked_at > now() - $1 * interval '1 second')
	AND (expires_at IS NULL OR expires_at > now() - $1 * interval '1 second')`

// ValidateKeyName adds a problem with name to f under field.
func ValidateKeyName(field, name string, f map[string]string) {
	if utf8.RuneCountInString(name) > MaxKeyNameLen {
		f[field] = fmt.Sprintf("must be at most %d characters", MaxKeyNameLen)
	}
}

// ValidateMetadata adds a problem with m to f under field.
func ValidateMetadata(field string, m map[string]string, f map[string]string) {
	if len(m) > MaxMetadataKeys {
		f[field] = fmt.Sprintf("must have at most %d keys", MaxMetadataKeys)
		return
	}
	for k, v := range m {
		if k == "" || utf8.RuneCountInString(k) > MaxMetadataKeyLen {
			f[field] = fmt.Sprintf("keys must be 1–%d characters", MaxMetadataKeyLen)
			return
		}
		if utf8.RuneCountInString(v) > MaxMetadataValueLen {
			f[field+"."+k] = fmt.Sprintf("must be at most %d characters", MaxMetadataValueLen)
		}
	}
}

// Validate names each invalid field of s.
func (s KeySpec) Validate() error {
	f := map[string]string{}
	ValidateKeyName("name", s.Name, f)
	ValidateMetadata("metadata", s.Metadata, f)
	return tollgate.Invalid(f)
}

// CreateKey issues a key for the tenant and returns its secret, which is
// not stored and cannot be shown again. An unknown tenant is ENOTFOUND; a
// tenant with spec.MaxLive live keys already is ECONFLICT.
func (s *Store) CreateKey(ctx context.Context, tenantID string, spec KeySpec) (secret string, k Key, err error) {
	if err := spec.Validate(); err != nil {
		return "", Key{}, err
	}
	if spec.Metadata == nil {
		spec.Metadata = map[string]string{}
	}
	if !postgres.IsUUID(tenantID) {
		return "", Key{}, errTenantNotFound(tenantID)
	}
	if spec.MaxLive > 0 {
		err = postgres.Tx(ctx, s.db, func(tx pgx.Tx) error {
			if err := ensureRoom(ctx, tx, tenantID, spec.MaxLive, ""); err != nil {
				return err
			}
			unlimited := spec
			unlimited.MaxLive = 0
			secret, k, err = NewStore(tx).CreateKey(ctx, tenantID, unlimited)
			return err
		})
		return secret, k, err
	}
	secret, hash, prefix := GenerateKey()
	k, err = scanKey(s.db.QueryRow(ctx, `INSERT INTO api_keys (tenant_id, name, hash, prefix, metadata, expires_at)
		SELECT id, $2, $3, $4, $5, $6 FROM tenants WHERE id = $1::uuid RETURNING `+keyColumns,
		tenantID, spec.Name, hash[:], prefix, spec.Metadata, spec.ExpiresAt))
	if errors.Is(err, pgx.ErrNoRows) {
		return "", Key{}, errTenantNotFound(tenantID)
	}
	if err != nil {
		return "", Key{}, translate(err, "tenants: issue key")
	}
	return secret, k, nil
}

// ensureRoom returns ECONFLICT if the tenant has max live keys or more,
// or HeldKeysPerLive×max keys in the snapshot (live, or dead for less
// than DeadKeyGrace), not counting the key with id except (when not "").
// It locks the tenant's row until tx ends, so that concurrent key
// creations are counted one after another and cannot together pass max.
func ensureRoom(ctx context.Context, tx pgx.Tx, tenantID string, max int, except string) error {
	// Lock, then count in a statement of its own: one that waited for the
	// lock would count with the snapshot it started with, missing the keys
	// of the transaction it waited for.
	err := tx.QueryRow(ctx, `SELECT id FROM tenants WHERE id = $1::uuid FOR NO KEY UPDATE`, tenantID).Scan(new(string))
	if errors.Is(err, pgx.ErrNoRows) {
		return errTenantNotFound(tenantID)
	}
	if err != nil {
		return fmt.Errorf("tenants: lock tenant: %w", err)
	}
	var live, held int
	err = tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())),
		count(*) FROM api_keys WHERE tenant_id = $2::uuid AND `+heldKeyCondition+`
		AND ($3::uuid IS NULL OR id <> $3::uuid)`, DeadKeyGrace.Seconds(), tenantID, postgres.OptionalID(except)).Scan(&live, &held)
	if err != nil {
		return fmt.Errorf("tenants: count live keys: %w", err)
	}
	if live >= max {
		return tollgate.Errorf(tollgate.ECONFLICT, "the tenant has %d live keys, the most allowed: revoke keys it no longer uses first", live)
	}
	if held >= HeldKeysPerLive*max {
		return tollgate.Errorf(tollgate.ECONFLICT, "the tenant has %d keys that are live or were revoked or expired in the last %d days, "+
			"the most allowed: try again when the oldest of them is %d days dead", held, DeadKeyGrace/(24*time.Hour), DeadKeyGrace/(24*time.Hour))
	}
	return nil
}

// GetKey returns the tenant's key with id. A key of another tenant is
// ENOTFOUND, exactly like a key that does not exist.
func (s *Store) GetKey(ctx context.Context, tenantID, id string) (Key, error) {
	return s.keyWhere(ctx, "", tenantID, id)
}

func (s *Store) keyWhere(ctx context.Context, lock, tenantID, id string) (Key, error) {
	if !postgres.IsUUID(tenantID) || !postgres.IsUUID(id) {
		return Key{}, errKeyNotFound(id)
	}
	k, err := scanKey(s.db.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys
		WHERE tenant_id = $1::uuid AND id = $2::uuid`+lock, tenantID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, errKeyNotFound(id)
	}
	if err != nil {
		return Key{}, fmt.Errorf("tenants: get key: %w", err)
	}
	return k, nil
}

func errKeyNotFound(id string) error {
	return tollgate.Errorf(tollgate.ENOTFOUND, "key %s not found", id)
}

// ListKeysPage returns one page of the tenant's keys, newest first.
func (s *Store) ListKeysPage(ctx context.Context, tenantID string, pr page.Request) (page.Page[Key], error) {
	return s.keysPage(ctx, KeyFilter{TenantID: tenantID}, pr, "list keys", false)
}

// KeyChange is a change to a key's name, metadata or expiry; nil fields
// are left as they are.
type KeyChange struct {
	Name     *string
	Metadata *map[string]string
	// ExpiresAt, when set, replaces the expiry; a nil *time.Time inside
	// removes it.
	ExpiresAt **time.Time
	// ShortenOnly limits ExpiresAt to what a tenant's own admins may do:
	// set an expiry on a key that has none, or bring an expiry forward.
	// Clearing or extending an expiry, or changing an expired key's, is
	// then EFORBIDDEN: it could undo a rotation's grace period or an
	// operator's expiry, or bring an expired key back.
	ShortenOnly bool
}

// errExpiryOperatorsOnly answers an expiry change ShortenOnly forbids.
var errExpiryOperatorsOnly = tollgate.Errorf(tollgate.EFORBIDDEN,
	"only operators may clear or extend a key's expiry, or change an expired key's: you may set an expiry on a key without one, or bring it forward")

// shortens reports whether moving an expiry from current to next (nil:
// never) at now is within ShortenOnly.
func shortens(current, next *time.Time, now time.Time) bool {
	switch {
	case current != nil && !current.After(now):
		return false // expired: any change could bring it back
	case next == nil:
		return current == nil
	case current == nil:
		return true
	default:
		return !next.After(*current)
	}
}

// Validate names each invalid field of c.
func (c KeyChange) Validate() error {
	f := map[string]string{}
	if c.Name != nil {
		ValidateKeyName("name", *c.Name, f)
	}
	if c.Metadata != nil {
		ValidateMetadata("metadata", *c.Metadata, f)
	}
	return tollgate.Invalid(f)
}

// UpdateKey applies c to the tenant's key with id at now and returns the
// key. A change of expiry c.ShortenOnly forbids is EFORBIDDEN, and changes
// nothing.
func (s *Store) UpdateKey(ctx context.Context, tenantID, id string, c KeyChange, now time.Time) (Key, error) {
	if err := c.Validate(); err != nil {
		return Key{}, err
	}
	if !postgres.IsUUID(tenantID) || !postgres.IsUUID(id) {
		return Key{}, errKeyNotFound(id)
	}
	var k Key
	err := postgres.Tx(ctx, s.db, func(tx pgx.Tx) error {
		var err error
		k, err = NewStore(tx).keyWhere(ctx, " FOR UPDATE", tenantID, id)
		if err != nil {
			return err
		}
		if c.Name != nil {
			k.Name = *c.Name
		}
		if c.Metadata != nil {
			k.Metadata = *c.Metadata
			if k.Metadata == nil {
				k.Metadata = map[string]string{}
			}
		}
		if c.ExpiresAt != nil {
			if c.ShortenOnly && !shortens(k.ExpiresAt, *c.ExpiresAt, now) {
				return errExpiryOperatorsOnly
			}
			k.ExpiresAt = *c.ExpiresAt
		}
		k, err = scanKey(tx.QueryRow(ctx, `UPDATE api_keys SET name = $2, metadata = $3, expires_at = $4
			WHERE id = $1 RETURNING `+keyColumns, k.ID, k.Name, k.Metadata, k.ExpiresAt))
		if err != nil {
			return fmt.Errorf("tenants: update key: %w", err)
		}
		return nil
	})
	return k, err
}

// RevokeTenantKey revokes the tenant's key with id at once and returns it.
// Revoking twice keeps the first time.
func (s *Store) RevokeTenantKey(ctx context.Context, tenantID, id string) (Key, error) {
	if !postgres.IsUUID(tenantID) || !postgres.IsUUID(id) {
		return Key{}, errKeyNotFound(id)
	}
	k, err := scanKey(s.db.QueryRow(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
		WHERE tenant_id = $1::uuid AND id = $2::uuid RETURNING `+keyColumns, tenantID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, errKeyNotFound(id)
	}
	if err != nil {
		return Key{}, fmt.Errorf("tenants: revoke key: %w", err)
	}
	return k, nil
}

// MaxRotationGrace bounds how long a rotated key keeps working.
const MaxRotationGrace = 30 * 24 * time.Hour

// Rotation says how to rotate a key.
type Rotation struct {
	// Grace is how long the old key keeps working: 0 to MaxRotationGrace.
	Grace time.Duration
	// Now is when the rotation happens.
	Now time.Time
	// MaxLive, when above 0, refuses the rotation (ECONFLICT) if the
	// tenant has this many live keys (or HeldKeysPerLive times as many in
	// the snapshot) already, the old key among them unless Grace is 0; 0
	// sets no limit.
	MaxLive int
}

// RotateKey replaces the tenant's key with id by a new key of the same name
// and metadata, and lets the old one work until r.Now+r.Grace (or its
// earlier expiry). It returns the new key's secret, the new key and the old
// key as changed. A key is rotated at most once: rotating it again, or
// rotating a revoked or expired key, is ECONFLICT. Of concurrent rotations
// of one key exactly one succeeds.
func (s *Store) RotateKey(ctx context.Context, tenantID, id string, r Rotation) (secret string, fresh, old Key, err error) {
	grace, now := r.Grace, r.Now
	if grace < 0 || grace > MaxRotationGrace {
		return "", Key{}, Key{}, tollgate.Invalid(map[string]string{"grace_period_s": "must be from 0 to 2592000 (30 days)"})
	}
	if !postgres.IsUUID(tenantID) || !postgres.IsUUID(id) {
		return "", Key{}, Key{}, errKeyNotFound(id)
	}
	err = postgres.Tx(ctx, s.db, func(tx pgx.Tx) error {
		ts := NewStore(tx)
		var err error
		old, err = ts.keyWhere(ctx, " FOR UPDATE", tenantID, id)
		if err != nil {
			return err
		}
		switch {
		case old.RevokedAt != nil:
			return tollgate.Errorf(tollgate.ECONFLICT, "key %s is revoked: issue a new key instead", id)
		case old.ExpiresAt != nil && !old.ExpiresAt.After(now):
			return tollgate.Errorf(tollgate.ECONFLICT, "key %s has expired: issue a new key instead", id)
		case old.RotatedAt != nil:
			return errRotated(old)
		}
		if r.MaxLive > 0 {
			except := ""
			if grace == 0 {
				except = old.ID // it stops working now
			}
			if err := ensureRoom(ctx, tx, tenantID, r.MaxLive, except); err != nil {
				return err
			}
		}
		// The replacement inherits the old key's expiry: rotating must not
		// undo an expiry an operator set.
		secret, fresh, err = ts.CreateKey(ctx, tenantID, KeySpec{Name: old.Name, Metadata: old.Metadata, ExpiresAt: old.ExpiresAt})
		if err != nil {
			return err
		}
		until := now.Add(grace)
		if old.ExpiresAt != nil && old.ExpiresAt.Before(until) {
			until = *old.ExpiresAt
		}
		// The row is locked, so the condition holds; it is what makes a
		// second rotation impossible whatever led up to this statement.
		rotated, err := scanKey(tx.QueryRow(ctx, `UPDATE api_keys SET expires_at = $2, rotated_at = $3, replaced_by = $4
			WHERE id = $1 AND rotated_at IS NULL AND revoked_at IS NULL RETURNING `+keyColumns,
			old.ID, until, now, fresh.ID))
		if errors.Is(err, pgx.ErrNoRows) {
			return errRotated(old)
		}
		if err != nil {
			return fmt.Errorf("tenants: rotate key: %w", err)
		}
		old = rotated
		return nil
	})
	if err != nil {
		return "", Key{}, Key{}, err
	}
	return secret, fresh, old, nil
}

func errRotated(k Key) error {
	return tollgate.Errorf(tollgate.ECONFLICT, "key %s has been rotated already: rotate the key that replaced it instead", k.ID)
}

// TouchKeys records when keys were last used: usedAt maps key IDs to a
// time of use. A key's last_used_at only moves forward. It is one
// statement however many keys there are, and it does not wake the check
// API's snapshot reload (only changes that matter to checks do).
func (s *Store) TouchKeys(ctx context.Context, usedAt map[string]time.Time) error {
	if len(usedAt) == 0 {
		return nil
	}
	ids := make([]string, 0, len(usedAt))
	ats := make([]time.Time, 0, len(usedAt))
	for id, at := range usedAt {
		if !postgres.IsUUID(id) {
			continue // names no key, and would fail the whole statement
		}
		ids = append(ids, id)
		ats = append(ats, at)
	}
	_, err := s.db.Exec(ctx, `UPDATE api_keys k SET last_used_at = u.at
		FROM unnest($1::uuid[], $2::timestamptz[]) AS u(id, at)
		WHERE k.id = u.id AND (k.last_used_at IS NULL OR k.last_used_at < u.at)`, ids, ats)
	if err != nil {
		return fmt.Errorf("tenants: touch keys: %w", err)
	}
	return nil
}

// KeyByID returns the key with id, whatever its tenant, or ENOTFOUND. It
// is for operators' tools; tenant-facing code uses GetKey.
func (s *Store) KeyByID(ctx context.Context, id string) (Key, error) {
	return postgres.ByID(ctx, s.db, `SELECT `+keyColumns+` FROM api_keys WHERE id = $1::uuid`, id,
		scanKey, errKeyNotFound(id), "tenants: get key")
}
