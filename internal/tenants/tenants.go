// Package tenants holds tenants (the provider's customers) and their API
// keys. Keys are stored only as SHA-256 hashes and a display prefix.
package tenants

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Status of a tenant.
const (
	StatusActive    = "active"
	StatusSuspended = "suspended"
)

// Tenant is a customer organisation subscribed to one plan.
type Tenant struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	PlanID    int64     `json:"plan_id"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Key is an API key's record; the secret itself is never stored.
type Key struct {
	ID         string     `json:"id"`
	TenantID   string     `json:"tenant_id"`
	Name       string     `json:"name"`
	Hash       KeyHash    `json:"-"`
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

// Store keeps tenants and keys in Postgres. Safe for concurrent use.
type Store struct {
	db *pgxpool.Pool
}

// NewStore returns a Store on db.
func NewStore(db *pgxpool.Pool) *Store { return &Store{db: db} }

const tenantColumns = `id, name, plan_id, status, created_at, updated_at`

func scanTenant(row pgx.Row) (Tenant, error) {
	var t Tenant
	err := row.Scan(&t.ID, &t.Name, &t.PlanID, &t.Status, &t.CreatedAt, &t.UpdatedAt)
	return t, err
}

// Create adds a tenant on planID and records the plan's start in the
// tenant's plan history. A taken name is ECONFLICT.
func (s *Store) Create(ctx context.Context, name string, planID int64) (Tenant, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return Tenant{}, tollgate.Invalid(map[string]string{"name": "must be 1–200 characters"})
	}
	var t Tenant
	err := postgres.Tx(ctx, s.db, func(tx pgx.Tx) error {
		var err error
		t, err = scanTenant(tx.QueryRow(ctx, `INSERT INTO tenants (name, plan_id) VALUES ($1, $2)
			RETURNING `+tenantColumns, name, planID))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO tenant_plan_changes (tenant_id, plan_id, effective_at)
			VALUES ($1, $2, $3)`, t.ID, planID, t.CreatedAt)
		return err
	})
	if err != nil {
		return Tenant{}, translate(err, "tenants: create")
	}
	return t, nil
}

// translate maps constraint violations to caller errors.
func translate(err error, op string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505":
			return tollgate.Errorf(tollgate.ECONFLICT, "already exists")
		case "23503":
			return tollgate.Errorf(tollgate.EINVALID, "refers to something that does not exist")
		case "22P02":
			return tollgate.Errorf(tollgate.ENOTFOUND, "not found")
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Get returns the tenant with id, or ENOTFOUND.
func (s *Store) Get(ctx context.Context, id string) (Tenant, error) {
	t, err := scanTenant(s.db.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id::text = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, tollgate.Errorf(tollgate.ENOTFOUND, "tenant %s not found", id)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("tenants: get: %w", err)
	}
	return t, nil
}

// GetByName returns the tenant named name, or ENOTFOUND.
func (s *Store) GetByName(ctx context.Context, name string) (Tenant, error) {
	t, err := scanTenant(s.db.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, tollgate.Errorf(tollgate.ENOTFOUND, "tenant %q not found", name)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("tenants: get by name: %w", err)
	}
	return t, nil
}

// Find returns the tenant whose id or name is ref.
func (s *Store) Find(ctx context.Context, ref string) (Tenant, error) {
	t, err := s.Get(ctx, ref)
	if tollgate.ErrorCode(err) == tollgate.ENOTFOUND {
		return s.GetByName(ctx, ref)
	}
	return t, err
}

// List returns every tenant ordered by name.
func (s *Store) List(ctx context.Context) ([]Tenant, error) {
	rows, err := s.db.Query(ctx, `SELECT `+tenantColumns+` FROM tenants ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("tenants: list: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Tenant, error) { return scanTenant(r) })
	if err != nil {
		return nil, fmt.Errorf("tenants: list: %w", err)
	}
	return list, nil
}

// SetPlan moves the tenant to planID from effective on, recording the
// change in the plan history.
func (s *Store) SetPlan(ctx context.Context, id string, planID int64, effective time.Time) error {
	return postgres.Tx(ctx, s.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE tenants SET plan_id = $2, updated_at = now() WHERE id::text = $1`, id, planID)
		if err != nil {
			return translate(err, "tenants: set plan")
		}
		if tag.RowsAffected() == 0 {
			return tollgate.Errorf(tollgate.ENOTFOUND, "tenant %s not found", id)
		}
		_, err = tx.Exec(ctx, `INSERT INTO tenant_plan_changes (tenant_id, plan_id, effective_at)
			VALUES ($1, $2, $3)`, id, planID, effective)
		return translate(err, "tenants: record plan change")
	})
}

// SetStatus suspends or resumes a tenant.
func (s *Store) SetStatus(ctx context.Context, id, status string) error {
	if status != StatusActive && status != StatusSuspended {
		return tollgate.Invalid(map[string]string{"status": "must be active or suspended"})
	}
	tag, err := s.db.Exec(ctx, `UPDATE tenants SET status = $2, updated_at = now() WHERE id::text = $1`, id, status)
	if err != nil {
		return fmt.Errorf("tenants: set status: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return tollgate.Errorf(tollgate.ENOTFOUND, "tenant %s not found", id)
	}
	return nil
}

const keyColumns = `id, tenant_id, name, hash, prefix, created_at, expires_at, revoked_at, last_used_at`

func scanKey(row pgx.Row) (Key, error) {
	var k Key
	var hash []byte
	err := row.Scan(&k.ID, &k.TenantID, &k.Name, &hash, &k.Prefix, &k.CreatedAt, &k.ExpiresAt, &k.RevokedAt, &k.LastUsedAt)
	copy(k.Hash[:], hash)
	return k, err
}

// IssueKey creates a key for the tenant and returns its secret, which is
// not stored and cannot be shown again.
func (s *Store) IssueKey(ctx context.Context, tenantID, name string, expiresAt *time.Time) (secret string, k Key, err error) {
	secret, hash, prefix := GenerateKey()
	k, err = scanKey(s.db.QueryRow(ctx, `INSERT INTO api_keys (tenant_id, name, hash, prefix, expires_at)
		VALUES ($1, $2, $3, $4, $5) RETURNING `+keyColumns, tenantID, name, hash[:], prefix, expiresAt))
	if err != nil {
		return "", Key{}, translate(err, "tenants: issue key")
	}
	return secret, k, nil
}

// RevokeKey revokes the key at once. Revoking twice keeps the first time.
func (s *Store) RevokeKey(ctx context.Context, id string) error {
	tag, err := s.db.Exec(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id::text = $1`, id)
	if err != nil {
		return fmt.Errorf("tenants: revoke key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return tollgate.Errorf(tollgate.ENOTFOUND, "key %s not found", id)
	}
	return nil
}

// FindKeyByHash returns the key with hash, or ENOTFOUND.
func (s *Store) FindKeyByHash(ctx context.Context, hash KeyHash) (Key, error) {
	k, err := scanKey(s.db.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE hash = $1`, hash[:]))
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, tollgate.Errorf(tollgate.ENOTFOUND, "key not found")
	}
	if err != nil {
		return Key{}, fmt.Errorf("tenants: find key: %w", err)
	}
	return k, nil
}

// ListKeys returns the tenant's keys, newest first ("" = every tenant's).
func (s *Store) ListKeys(ctx context.Context, tenantID string) ([]Key, error) {
	rows, err := s.db.Query(ctx, `SELECT `+keyColumns+` FROM api_keys
		WHERE $1 = '' OR tenant_id::text = $1 ORDER BY created_at DESC, id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("tenants: list keys: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Key, error) { return scanKey(r) })
	if err != nil {
		return nil, fmt.Errorf("tenants: list keys: %w", err)
	}
	return list, nil
}
