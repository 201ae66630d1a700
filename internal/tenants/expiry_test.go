package tenants_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestUpdateKeyShortenOnly: with ShortenOnly an expiry may be set on a key
// without one, or brought forward; nothing else.
func TestUpdateKeyShortenOnly(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	at := func(d time.Duration) *time.Time {
		t := now.Add(d)
		return &t
	}
	tests := []struct {
		name          string
		current, next *time.Time
		ok            bool
	}{
		{"set on a key without one", nil, at(time.Hour), true},
		{"set in the past on a key without one", nil, at(-time.Hour), true},
		{"clear nothing", nil, nil, true},
		{"bring forward", at(2 * time.Hour), at(time.Hour), true},
		{"end now", at(2 * time.Hour), at(0), true},
		{"keep", at(2 * time.Hour), at(2 * time.Hour), true},
		{"clear", at(2 * time.Hour), nil, false},
		{"extend", at(2 * time.Hour), at(3 * time.Hour), false},
		{"revive an expired key", at(-time.Hour), at(time.Hour), false},
		{"clear an expired key", at(-time.Hour), nil, false},
		{"move an expired key's expiry back", at(-time.Hour), at(-2 * time.Hour), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, k, err := f.ts.CreateKey(ctx, f.acme.ID, tenants.KeySpec{Name: "k", ExpiresAt: tt.current})
			testenv.Must(t, err)
			next := tt.next
			got, err := f.ts.UpdateKey(ctx, f.acme.ID, k.ID, tenants.KeyChange{ExpiresAt: &next, ShortenOnly: true}, now)
			if !tt.ok {
				if tollgate.ErrorCode(err) != tollgate.EFORBIDDEN {
					t.Fatalf("UpdateKey = %v, want forbidden", err)
				}
				got, err = f.ts.GetKey(ctx, f.acme.ID, k.ID)
				testenv.Must(t, err)
				if !sameTime(got.ExpiresAt, tt.current) {
					t.Errorf("after a refused change expires_at = %v, want %v", got.ExpiresAt, tt.current)
				}
				return
			}
			testenv.Must(t, err)
			if !sameTime(got.ExpiresAt, tt.next) {
				t.Errorf("expires_at = %v, want %v", got.ExpiresAt, tt.next)
			}
			// Without ShortenOnly (operators), anything goes.
			_, err = f.ts.UpdateKey(ctx, f.acme.ID, k.ID, tenants.KeyChange{ExpiresAt: &tt.current}, now)
			testenv.Must(t, err)
		})
	}
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
