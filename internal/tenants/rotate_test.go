package tenants_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestRotateKeyOnce: a key is rotated once; its replacement may be rotated
// in turn.
func TestRotateKeyOnce(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	_, k, err := f.ts.CreateKey(ctx, f.acme.ID, tenants.KeySpec{Name: "ci"})
	testenv.Must(t, err)
	now := time.Now().UTC().Truncate(time.Microsecond)
	_, fresh, old, err := f.ts.RotateKey(ctx, f.acme.ID, k.ID, tenants.Rotation{Grace: time.Hour, Now: now})
	testenv.Must(t, err)
	if old.RotatedAt == nil || !old.RotatedAt.Equal(now) || old.ReplacedBy != fresh.ID {
		t.Errorf("rotated key: rotated_at %v, replaced_by %q; want %v, %q", old.RotatedAt, old.ReplacedBy, now, fresh.ID)
	}
	if fresh.RotatedAt != nil || fresh.ReplacedBy != "" {
		t.Errorf("new key: rotated_at %v, replaced_by %q; want neither", fresh.RotatedAt, fresh.ReplacedBy)
	}
	_, _, _, err = f.ts.RotateKey(ctx, f.acme.ID, k.ID, tenants.Rotation{Grace: time.Hour, Now: now.Add(time.Second)})
	if tollgate.ErrorCode(err) != tollgate.ECONFLICT {
		t.Errorf("second rotation = %v, want conflict", err)
	}
	got, err := f.ts.GetKey(ctx, f.acme.ID, k.ID)
	testenv.Must(t, err)
	if !got.ExpiresAt.Equal(*old.ExpiresAt) || got.ReplacedBy != fresh.ID {
		t.Errorf("after a refused rotation: %+v, want it as the first rotation left it", got)
	}
	if _, _, _, err := f.ts.RotateKey(ctx, f.acme.ID, fresh.ID, tenants.Rotation{Grace: time.Hour, Now: now}); err != nil {
		t.Errorf("rotating the replacement: %v", err)
	}
	keys, err := f.ts.ListKeys(ctx, f.acme.ID)
	testenv.Must(t, err)
	if len(keys) != 3 {
		t.Errorf("%d keys, want 3 (the key, its replacement, and that one's)", len(keys))
	}
}

// TestConcurrentRotationsOneWins: of many rotations of one key at once,
// one makes a new key and the others are conflicts.
func TestConcurrentRotationsOneWins(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	_, k, err := f.ts.CreateKey(ctx, f.acme.ID, tenants.KeySpec{Name: "ci"})
	testenv.Must(t, err)
	won := atOnce(t, 8, func() error {
		_, _, _, err := f.ts.RotateKey(ctx, f.acme.ID, k.ID, tenants.Rotation{Grace: time.Hour, Now: time.Now()})
		return err
	})
	keys, err := f.ts.ListKeys(ctx, f.acme.ID)
	testenv.Must(t, err)
	if won != 1 || len(keys) != 2 {
		t.Errorf("%d rotations succeeded and left %d keys; want 1 and 2", won, len(keys))
	}
}

// TestRotationKeepsTheExpiry: the replacement of a key with an expiry
// expires when the old key would have.
func TestRotationKeepsTheExpiry(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	expires := now.Add(72 * time.Hour)
	_, k, err := f.ts.CreateKey(ctx, f.acme.ID, tenants.KeySpec{Name: "ci", ExpiresAt: &expires})
	testenv.Must(t, err)
	_, fresh, _, err := f.ts.RotateKey(ctx, f.acme.ID, k.ID, tenants.Rotation{Grace: time.Hour, Now: now})
	testenv.Must(t, err)
	if fresh.ExpiresAt == nil || !fresh.ExpiresAt.Equal(expires) {
		t.Errorf("replacement expires at %v, want %v (the old key's expiry)", fresh.ExpiresAt, expires)
	}
}
