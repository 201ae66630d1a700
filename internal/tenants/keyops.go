package tenants

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/events"
)

// The key changes of Ops. Every key is reached through its tenant: a key
// ID under another tenant is ENOTFOUND.

// CreateKeyInput is a new key: the body of POST /tenants/{tenantID}/keys.
type CreateKeyInput struct {
	Name      string            `json:"name"`
	Metadata  map[string]string `json:"metadata"`
	ExpiresAt *time.Time        `json:"expires_at"`
	// Unlimited lifts the MaxLiveKeys limit: the operator CLI's issue
	// (for load tests), never a request's.
	Unlimited bool `json:"-"`
}

func (in CreateKeyInput) validate(now time.Time) error {
	f := map[string]string{}
	ValidateKeyName("name", in.Name, f)
	ValidateMetadata("metadata", in.Metadata, f)
	if in.ExpiresAt != nil {
		if !in.ExpiresAt.After(now) {
			f["expires_at"] = "must be in the future"
		}
		tollgate.CheckTime(f, "expires_at", *in.ExpiresAt)
	}
	return tollgate.Invalid(f)
}

// IssuedKey is a key just made, with its secret: the only time the secret
// is shown. Previous is the rotated key, now expiring (rotation only).
type IssuedKey struct {
	Key    Key    `json:"key"`
	Secret string `json:"secret"`
	// Previous is the rotated key, now expiring (rotation only).
	Previous *Key `json:"previous,omitempty"`
}

// CreateKey issues a key for tenant tenantID (key.create): ECONFLICT when
// the tenant has MaxLiveKeys live keys, or HeldKeysPerLive times as many
// in the snapshot (live, or dead for less than DeadKeyGrace), already,
// unless in.Unlimited.
func (o *Ops) CreateKey(ctx context.Context, by audit.Actor, tenantID string, in CreateKeyInput) (IssuedKey, error) {
	if err := in.validate(o.now()); err != nil {
		return IssuedKey{}, err
	}
	spec := KeySpec{Name: in.Name, Metadata: in.Metadata, ExpiresAt: in.ExpiresAt, MaxLive: MaxLiveKeys}
	if in.Unlimited {
		spec.MaxLive = 0
	}
	var res IssuedKey
	var err error
	res.Key, err = audit.Create(ctx, o.db, by, "key.create", KeyAudit, func(tx pgx.Tx) (k Key, err error) {
		res.Secret, k, err = NewStore(tx).CreateKey(ctx, tenantID, spec)
		return k, err
	})
	return res, err
}

// UpdateKey changes a key's name, metadata or expiry (key.update). An
// expiry in the past ends the key at once. Only operators (by.Operator)
// may clear or extend an expiry, or change an expired key's: for others
// that is EFORBIDDEN, since it could undo a rotation's grace period or an
// operator's expiry, or bring a key back.
func (o *Ops) UpdateKey(ctx context.Context, by audit.Actor, tenantID, keyID string, c KeyChange) (Key, error) {
	c.ShortenOnly = !by.Operator
	if err := c.Validate(); err != nil {
		return Key{}, err
	}
	if c.ExpiresAt != nil && *c.ExpiresAt != nil && !tollgate.InTimeRange(**c.ExpiresAt) {
		return Key{}, tollgate.Invalid(map[string]string{"expires_at": tollgate.TimeRangeProblem})
	}
	return audit.Update(ctx, o.db, by, "key.update", KeyAudit, o.key(ctx, tenantID, keyID),
		func(tx pgx.Tx, _ Key) (Key, error) { return NewStore(tx).UpdateKey(ctx, tenantID, keyID, c, o.now()) })
}

// RevokeKey revokes a key (key.revoke): checks with it are denied
// (key_revoked) within a second. Revoking twice keeps the first time.
func (o *Ops) RevokeKey(ctx context.Context, by audit.Actor, tenantID, keyID string) (Key, error) {
	return audit.Update(ctx, o.db, by, "key.revoke", KeyAudit, o.key(ctx, tenantID, keyID),
		func(tx pgx.Tx, before Key) (Key, error) {
			k, err := NewStore(tx).RevokeTenantKey(ctx, tenantID, keyID)
			if err != nil || before.RevokedAt != nil || k.RevokedAt == nil {
				return k, err
			}
			return k, emit(ctx, tx, o.now(), events.KeyRevoked, tenantID,
				KeyRevokedData{KeyID: k.ID, Name: k.Name, Prefix: k.Prefix, RevokedAt: *k.RevokedAt})
		})
}

// DefaultRotationGrace is how long a rotated key keeps working when the
// rotation does not say: a day to roll the new key out.
const DefaultRotationGrace = 24 * time.Hour

// RotateKeyInput is the body of POST /tenants/{tenantID}/keys/{keyID}/rotate.
type RotateKeyInput struct {
	// GracePeriodS is how long the old key keeps working, in seconds
	// (DefaultRotationGrace when nil).
	GracePeriodS *int64 `json:"grace_period_s"`
}

// maxGracePeriodS is MaxRotationGrace in whole seconds. Inputs are
// compared in seconds: converting a huge grace_period_s to a
// time.Duration first would overflow and wrap to a small, valid-looking
// value.
const maxGracePeriodS = int64(MaxRotationGrace / time.Second)

// Validate names grace_period_s when it is out of range.
func (in RotateKeyInput) Validate() error {
	if g := in.GracePeriodS; g != nil && (*g < 0 || *g > maxGracePeriodS) {
		return tollgate.Invalid(map[string]string{"grace_period_s": "must be from 0 to 2592000 (30 days)"})
	}
	return nil
}

func (in RotateKeyInput) grace() time.Duration {
	if in.GracePeriodS == nil {
		return DefaultRotationGrace
	}
	return time.Duration(*in.GracePeriodS) * time.Second
}

// rotatedKey is a key as the audit log records its rotation: with when it
// was rotated and what replaced it, which the API's key record leaves
// out, and, after the rotation, the new key's record.
type rotatedKey struct {
	Key
	RotatedAt  *time.Time `json:"rotated_at"`
	ReplacedBy string     `json:"replaced_by"`
	NewKey     *Key       `json:"new_key,omitempty"`
}

// RotateKey replaces a key by a new one of the same name and metadata
// (key.rotate: one entry on the old key, whose after names the new key in
// replaced_by and holds its record in new_key). The old key keeps working
// for the grace period (its expires_at becomes now + grace). A key is
// rotated at most once: ECONFLICT for a key rotated before, revoked or
// expired, and when the tenant has MaxLiveKeys live keys (or
// HeldKeysPerLive times as many in the snapshot) already.
func (o *Ops) RotateKey(ctx context.Context, by audit.Actor, tenantID, keyID string, in RotateKeyInput) (IssuedKey, error) {
	if err := in.Validate(); err != nil {
		return IssuedKey{}, err
	}
	var res IssuedKey
	err := audit.Apply(ctx, o.db, by, func(tx pgx.Tx) (audit.Change, error) {
		ts := NewStore(tx)
		before, err := ts.GetKey(ctx, tenantID, keyID)
		if err != nil {
			return audit.Change{}, err
		}
		secret, fresh, old, err := ts.RotateKey(ctx, tenantID, keyID,
			Rotation{Grace: in.grace(), Now: o.now(), MaxLive: MaxLiveKeys})
		if err != nil {
			return audit.Change{}, err
		}
		res = IssuedKey{Key: fresh, Secret: secret, Previous: &old}
		if err := emit(ctx, tx, o.now(), events.KeyRotated, tenantID, KeyRotatedData{KeyID: old.ID, NewKeyID: fresh.ID,
			Name: old.Name, Prefix: old.Prefix, NewPrefix: fresh.Prefix, ExpiresAt: old.ExpiresAt}); err != nil {
			return audit.Change{}, err
		}
		c := KeyAudit("key.rotate", &before, &old)
		c.Before = rotatedKey{Key: before, RotatedAt: before.RotatedAt, ReplacedBy: before.ReplacedBy}
		c.After = rotatedKey{Key: old, RotatedAt: old.RotatedAt, ReplacedBy: old.ReplacedBy, NewKey: &fresh}
		return c, nil
	})
	return res, err
}

// key reads tenantID's key keyID on a change's transaction.
func (o *Ops) key(ctx context.Context, tenantID, keyID string) func(pgx.Tx) (Key, error) {
	return func(tx pgx.Tx) (Key, error) { return NewStore(tx).GetKey(ctx, tenantID, keyID) }
}
