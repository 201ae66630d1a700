package tenants_test

import (
	"context"
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// snapshotKeys counts the keys of tenantID that the check API's snapshot
// loads (its full load scans exactly these).
func snapshotKeys(t *testing.T, ts *tenants.Store, tenantID string) int {
	t.Helper()
	id, _ := tenants.ParseUUID(tenantID)
	n := 0
	testenv.Must(t, ts.ScanSnapshotKeys(context.Background(), nil, func(k tenants.SnapshotKey) error {
		if k.TenantUUID == id {
			n++
		}
		return nil
	}))
	return n
}

// TestDeadKeysCannotGrowTheSnapshot: a tenant admin who issues and revokes
// keys in a loop is refused once the tenant has HeldKeysPerLive ×
// MaxLiveKeys keys in the snapshot (live, or dead for less than
// DeadKeyGrace), and the snapshot never holds more; keys dead for longer
// leave the snapshot and the count, and issuing works again.
func TestDeadKeysCannotGrowTheSnapshot(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	ops := tenants.NewOps(f.db, nil)
	admin := audit.Actor{ID: "4f6d2a9e-0c1b-4e57-9a3d-7b8c9d0e1f2a", Name: "admin@acme.example"}
	held := tenants.HeldKeysPerLive * tenants.MaxLiveKeys
	// Most of the loop straight into the table: keys revoked just now.
	_, err := f.db.Exec(ctx, `INSERT INTO api_keys (tenant_id, hash, prefix, revoked_at)
		SELECT $1, sha256(convert_to('dead' || g, 'UTF8')), 'tg_test', now() FROM generate_series(1, $2) g`,
		f.acme.ID, held-5)
	testenv.Must(t, err)

	issued := 0
	for range 20 {
		k, err := ops.CreateKey(ctx, admin, f.acme.ID, tenants.CreateKeyInput{Name: "loop"})
		if tollgate.ErrorCode(err) == tollgate.ECONFLICT {
			break
		}
		testenv.Must(t, err)
		issued++
		_, err = ops.RevokeKey(ctx, admin, f.acme.ID, k.Key.ID)
		testenv.Must(t, err)
	}
	if issued != 5 {
		t.Errorf("issued %d keys in the loop, want 5 (up to %d held)", issued, held)
	}
	if n := snapshotKeys(t, f.ts, f.acme.ID); n != held {
		t.Errorf("the snapshot holds %d of the tenant's keys, want %d", n, held)
	}

	// Past the grace period the dead keys leave the snapshot and the count.
	_, err = f.db.Exec(ctx, `UPDATE api_keys SET revoked_at = now() - $2 * interval '1 second' - interval '1 minute'
		WHERE tenant_id = $1 AND prefix = 'tg_test'`, f.acme.ID, tenants.DeadKeyGrace.Seconds())
	testenv.Must(t, err)
	if n := snapshotKeys(t, f.ts, f.acme.ID); n != 5 {
		t.Errorf("after the grace period the snapshot holds %d of the tenant's keys, want the 5 revoked lately", n)
	}
	if _, err := ops.CreateKey(ctx, admin, f.acme.ID, tenants.CreateKeyInput{Name: "after"}); err != nil {
		t.Errorf("a key after the grace period: %v", err)
	}
	// An expired key leaves it the same way; a live one never does.
	_, err = f.db.Exec(ctx, `UPDATE api_keys SET expires_at = now() - $2 * interval '1 second' - interval '1 minute'
		WHERE tenant_id = $1 AND name = 'after'`, f.acme.ID, tenants.DeadKeyGrace.Seconds())
	testenv.Must(t, err)
	if n := snapshotKeys(t, f.ts, f.acme.ID); n != 5 {
		t.Errorf("with the new key long expired the snapshot holds %d, want 5", n)
	}
}
