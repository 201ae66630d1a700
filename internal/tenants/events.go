package tenants

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/events"
)

// The lifecycle events of tenants and keys, emitted in the transaction of
// the change (docs/events.md describes their payloads).

// KeyRevokedData is the payload of key.revoked.
type KeyRevokedData struct {
	KeyID     string    `json:"key_id"`
	Name      string    `json:"name"`
	Prefix    string    `json:"prefix"`
	RevokedAt time.Time `json:"revoked_at"`
}

// KeyRotatedData is the payload of key.rotated: the old key keeps working
// until ExpiresAt, the end of the grace period.
type KeyRotatedData struct {
	KeyID     string     `json:"key_id"`
	NewKeyID  string     `json:"new_key_id"`
	Name      string     `json:"name"`
	Prefix    string     `json:"prefix"`
	NewPrefix string     `json:"new_prefix"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// TenantStatusData is the payload of tenant.suspended and tenant.resumed.
type TenantStatusData struct {
	TenantID string `json:"tenant_id"`
	Name     string `json:"name"`
	Status   string `json:"status"`
}

// emit writes one event about tenantID on tx at now.
func emit(ctx context.Context, tx pgx.Tx, now time.Time, typ, tenantID string, data any) error {
	_, err := events.Emit(ctx, tx, events.Event{Type: typ, TenantID: tenantID, CreatedAt: now, Data: data})
	return err
}
