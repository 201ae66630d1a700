package tenants_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

func TestMaxLiveKeys(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	capped := tenants.KeySpec{Name: "k", MaxLive: 3}
	var keys []tenants.Key
	for range 3 {
		_, k, err := f.ts.CreateKey(ctx, f.acme.ID, capped)
		testenv.Must(t, err)
		keys = append(keys, k)
	}
	if _, _, err := f.ts.CreateKey(ctx, f.acme.ID, capped); tollgate.ErrorCode(err) != tollgate.ECONFLICT {
		t.Fatalf("a 4th key with MaxLive 3 = %v, want conflict", err)
	}
	if _, _, err := f.ts.CreateKey(ctx, f.other.ID, capped); err != nil {
		t.Errorf("another tenant's key: %v", err)
	}
	if _, _, err := f.ts.CreateKey(ctx, f.acme.ID, tenants.KeySpec{Name: "cli"}); err != nil {
		t.Errorf("a key without a limit: %v", err)
	}
	if _, _, err := f.ts.CreateKey(ctx, "0b9f3d5e-8a44-4c1e-9d3a-5f6e7a8b9c0d", capped); tollgate.ErrorCode(err) != tollgate.ENOTFOUND {
		t.Errorf("unknown tenant = %v, want not_found", err)
	}

	// Rotating makes one more live key, unless the old one stops at once.
	now := time.Now()
	rotation := tenants.Rotation{Grace: time.Hour, Now: now, MaxLive: 4}
	if _, _, _, err := f.ts.RotateKey(ctx, f.acme.ID, keys[0].ID, rotation); tollgate.ErrorCode(err) != tollgate.ECONFLICT {
		t.Errorf("rotation at the limit = %v, want conflict", err)
	}
	rotation.Grace = 0
	if _, _, _, err := f.ts.RotateKey(ctx, f.acme.ID, keys[0].ID, rotation); err != nil {
		t.Fatalf("rotation at the limit without grace: %v", err)
	}

	// Revoked and expired keys do not count.
	_, err := f.ts.RevokeTenantKey(ctx, f.acme.ID, keys[1].ID)
	testenv.Must(t, err)
	past := time.Now().Add(-time.Minute)
	pastPtr := &past
	_, err = f.ts.UpdateKey(ctx, f.acme.ID, keys[2].ID, tenants.KeyChange{ExpiresAt: &pastPtr}, time.Now())
	testenv.Must(t, err)
	for range 2 {
		if _, _, err := f.ts.CreateKey(ctx, f.acme.ID, tenants.KeySpec{MaxLive: 4}); err != nil {
			t.Fatalf("a key after revoking and expiring: %v", err)
		}
	}
	if _, _, err := f.ts.CreateKey(ctx, f.acme.ID, tenants.KeySpec{MaxLive: 4}); tollgate.ErrorCode(err) != tollgate.ECONFLICT {
		t.Errorf("a 5th live key with MaxLive 4 = %v, want conflict", err)
	}
}

// TestMaxLiveKeysUnderConcurrency: keys made at the same time are counted
// one after another.
func TestMaxLiveKeysUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	const n, max = 12, 5
	made := atOnce(t, n, func() error {
		_, _, err := f.ts.CreateKey(ctx, f.acme.ID, tenants.KeySpec{MaxLive: max})
		return err
	})
	if made != max {
		t.Errorf("%d of %d concurrent keys made with MaxLive %d, want %d", made, n, max, max)
	}
}

// atOnce makes n calls of do at the same moment and returns how many
// succeeded; an error other than a conflict fails the test.
func atOnce(t *testing.T, n int, do func() error) (succeeded int) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = do()
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		switch tollgate.ErrorCode(err) {
		case "":
			succeeded++
		case tollgate.ECONFLICT:
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	return succeeded
}
