// Package tenants holds tenants (the provider's customers) and their API
// keys. Keys are stored only as SHA-256 hashes and a display prefix.
package tenants

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Status of a tenant.
const (
	StatusActive    = "active"
	StatusSuspended = "suspended"
)

// Tenant is a customer organisation subscribed to one plan.
type Tenant = tollgate.Tenant

// Key is an API key's record; the secret itself is never stored.
type Key struct {
	ID         string            `json:"id"`
	TenantID   string            `json:"tenant_id"`
	Name       string            `json:"name"`
	Hash       KeyHash           `json:"-"`
	Prefix     string            `json:"prefix"`
	Metadata   map[string]string `json:"metadata"`
	CreatedAt  time.Time         `json:"created_at"`
	ExpiresAt  *time.Time        `json:"expires_at,omitempty"`
	RevokedAt  *time.Time        `json:"revoked_at,omitempty"`
	LastUsedAt *time.Time        `json:"last_used_at,omitempty"`
	// RotatedAt is when the key was rotated (a key is rotated at most
	// once), and ReplacedBy the ID of the key that replaced it ("" when
	// that key has been deleted). Not part of the API's key record.
	RotatedAt  *time.Time `json:"-"`
	ReplacedBy string     `json:"-"`
}

// Store keeps tenants and keys in Postgres. Safe for concurrent use.
type Store struct {
	db postgres.Conn
}

// NewStore returns a Store on db: a pool, or a transaction.
func NewStore(db postgres.Conn) *Store { return &Store{db: db} }

// TenantAudit describes a change to a tenant's record for the audit log.
func TenantAudit(action string, before, after *Tenant) audit.Change {
	t := audit.Subject(before, after)
	return audit.Change{Action: action, TargetType: "tenant", TargetID: t.ID, TenantID: t.ID,
		Before: before, After: after}
}

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
	if pgErr, ok := postgres.PgError(err); ok {
		switch {
		case pgErr.ConstraintName == "tenants_name_key":
			return &tollgate.Error{Code: tollgate.ECONFLICT, Message: "a tenant with this name exists",
				Fields: map[string]string{"name": "is taken by another tenant"}}
		case pgErr.ConstraintName == "tenants_plan_not_archived":
			return tollgate.Invalid(map[string]string{"plan_id": "is archived: archived plans cannot be assigned"})
		case pgErr.ConstraintName == "tenants_plan_id_fkey":
			return tollgate.Invalid(map[string]string{"plan_id": "no such plan"})
		case pgErr.Code == postgres.UniqueViolation:
			return tollgate.Errorf(tollgate.ECONFLICT, "already exists")
		case pgErr.Code == postgres.ForeignKeyViolation:
			return tollgate.Errorf(tollgate.EINVALID, "refers to something that does not exist")
		case pgErr.Code == postgres.InvalidTextRepresentation:
			return tollgate.Errorf(tollgate.ENOTFOUND, "not found")
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Get returns the tenant with id, or ENOTFOUND.
func (s *Store) Get(ctx context.Context, id string) (Tenant, error) {
	return postgres.ByID(ctx, s.db, `SELECT `+tenantColumns+` FROM tenants WHERE id = $1::uuid`, id,
		scanTenant, errTenantNotFound(id), "tenants: get")
}

func errTenantNotFound(id string) error {
	return tollgate.Errorf(tollgate.ENOTFOUND, "tenant %s not found", id)
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
	return postgres.Collect(rows, err, scanTenant, "tenants: list")
}

// SetPlan moves the tenant to planID from effective on, recording the
// change in the plan history. The history only moves forward: effective
// must not be before the tenant's latest change (EINVALID naming
// "effective_at"), nor in or before the latest month closed for billing
// (ECONFLICT naming "effective_at"). A month is billed in one currency, so
// a move to a plan of another currency must take effect at the start of a
// month, 00:00 UTC on the 1st (otherwise EINVALID naming "effective_at").
// Moving to the current plan is EINVALID naming "plan_id", and so is an
// archived or unknown plan.
func (s *Store) SetPlan(ctx context.Context, id string, planID int64, effective time.Time) error {
	if !postgres.IsUUID(id) {
		return errTenantNotFound(id)
	}
	return postgres.Tx(ctx, s.db, func(tx pgx.Tx) error {
		var current int64
		var latest *time.Time
		err := tx.QueryRow(ctx, `SELECT t.plan_id, (SELECT max(effective_at) FROM tenant_plan_changes c
			WHERE c.tenant_id = t.id) FROM tenants t WHERE t.id = $1::uuid FOR UPDATE`, id).Scan(&current, &latest)
		if errors.Is(err, pgx.ErrNoRows) {
			return errTenantNotFound(id)
		}
		if err != nil {
			return fmt.Errorf("tenants: set plan: %w", err)
		}
		if current == planID {
			return tollgate.Invalid(map[string]string{"plan_id": "is the tenant's plan already"})
		}
		if latest != nil && effective.Before(*latest) {
			return tollgate.Invalid(map[string]string{"effective_at": "must not be before the tenant's latest plan change (" +
				latest.UTC().Format(time.RFC3339) + ")"})
		}
		// A change effective in (or before) a closed month would change
		// the plan of a month whose statements are frozen. Closed months
		// are UTC calendar months.
		var closed *time.Time // the start of the latest closed month
		// SHARE conflicts with the insert of a month being closed: wait
		// for a close in progress to commit, and keep one from starting
		// until this change has committed (the close then bills it).
		if _, err := tx.Exec(ctx, `LOCK TABLE usage_closed_months IN SHARE MODE`); err != nil {
			return fmt.Errorf("tenants: set plan: lock closed months: %w", err)
		}
		if err := tx.QueryRow(ctx, `SELECT max(month)::timestamp AT TIME ZONE 'UTC' FROM usage_closed_months`).
			Scan(&closed); err != nil {
			return fmt.Errorf("tenants: set plan: closed months: %w", err)
		}
		if closed != nil && effective.Before(closed.AddDate(0, 1, 0)) {
			month := closed.UTC().Format("2006-01")
			return &tollgate.Error{Code: tollgate.ECONFLICT,
				Message: "month " + month + " is closed and its statements are frozen: a plan change cannot take effect in it or before it",
				Fields:  map[string]string{"effective_at": "must be after the latest closed month (" + month + ")"}}
		}
		from, to, err := sameCurrencyOrMonthStart(ctx, tx, current, planID, effective, latest)
		if err != nil {
			return err
		}
		if from != to {
			if err := noOwnSpendCap(ctx, tx, id, from, to); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE tenants SET plan_id = $2, updated_at = now() WHERE id = $1::uuid`, id, planID); err != nil {
			return translate(err, "tenants: set plan")
		}
		_, err = tx.Exec(ctx, `INSERT INTO tenant_plan_changes (tenant_id, plan_id, effective_at)
			VALUES ($1::uuid, $2, $3)`, id, planID, effective)
		if err != nil {
			return translate(err, "tenants: record plan change")
		}
		return nil
	})
}

// sameCurrencyOrMonthStart refuses a move from plan current to plan next
// effective in the middle of a month when the plans' currencies differ:
// a statement prices one month in one currency (billing refuses to mix
// them, and a month is closed for every tenant at once), and the plan
// history cannot be moved back. At a month's start the months before are
// all in the old currency and those after in the new. It locks both
// plans' rows (FOR SHARE) so that neither currency changes until the
// move commits; plans.Store refuses to change the currency of a plan a
// tenant is on, or was on in a month not yet closed. An unknown plan is
// EINVALID naming "plan_id". It returns the two plans' currencies.
func sameCurrencyOrMonthStart(ctx context.Context, tx pgx.Tx, current, next int64, effective time.Time, latest *time.Time) (from, to string, err error) {
	rows, err := tx.Query(ctx, `SELECT id, currency FROM plans WHERE id = ANY($1) ORDER BY id FOR SHARE`, []int64{current, next})
	if err != nil {
		return "", "", fmt.Errorf("tenants: set plan: currencies: %w", err)
	}
	currency := map[int64]string{}
	var planID int64
	var code string
	if _, err := pgx.ForEachRow(rows, []any{&planID, &code}, func() error {
		currency[planID] = code
		return nil
	}); err != nil {
		return "", "", fmt.Errorf("tenants: set plan: currencies: %w", err)
	}
	to, ok := currency[next]
	if !ok {
		return "", "", tollgate.Invalid(map[string]string{"plan_id": "no such plan"})
	}
	from = currency[current]
	u := effective.UTC()
	start := time.Date(u.Year(), u.Month(), 1, 0, 0, 0, 0, time.UTC)
	if from == to || u.Equal(start) {
		return from, to, nil
	}
	when := ""
	if latest != nil && start.Before(*latest) {
		// This month's start is before the tenant's latest change: the
		// next one, which has not come yet (no change is in the future).
		start = start.AddDate(0, 1, 0)
		when = ", once it has come, as the tenant's latest plan change is later than this month's start"
	}
	return "", "", &tollgate.Error{Code: tollgate.EINVALID,
		Message: "the new plan is in " + to + " and the tenant's plan in " + from +
			": a month is billed in one currency, so a change of currency takes effect at the start of a month",
		Fields: map[string]string{"effective_at": "must be the start of a month (00:00 UTC on the 1st, such as " +
			start.Format(time.RFC3339) + when + ") to move to a plan in " + to + " from one in " + from +
			": a month is billed in one currency"}}
}

// noOwnSpendCap refuses a move from a plan in currency from to one in to
// while the tenant has a spend cap of its own: the cap is an amount of
// from's minor units, which the new plan would read as to's (5000 cents
// read as 5000 yen). The operator removes it, moves the tenant, then sets
// it again in the new currency. FOR SHARE keeps the cap from changing
// until the move commits (a first cap's insert waits for the tenant's
// row, locked FOR UPDATE).
func noOwnSpendCap(ctx context.Context, tx pgx.Tx, tenantID, from, to string) error {
	var capMinor *int64
	err := tx.QueryRow(ctx, `SELECT spend_cap_minor FROM quota_tenant_settings WHERE tenant_id = $1::uuid FOR SHARE`, tenantID).Scan(&capMinor)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && capMinor == nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tenants: set plan: spend cap: %w", err)
	}
	return &tollgate.Error{Code: tollgate.EINVALID,
		Message: "the tenant has a spend cap of its own, " + strconv.FormatInt(*capMinor, 10) + " minor units of " + from +
			", which the plan in " + to + " would read as " + to + ": remove it, move the tenant, then set it again in " + to,
		Fields: map[string]string{"plan_id": "is a plan in " + to + ", and the tenant's own spend cap is in " + from +
			": remove the cap first (tenants quota --spend-cap \"\"), then set it again in " + to + " after the move"}}
}

// SetStatus suspends or resumes a tenant and returns it.
func (s *Store) SetStatus(ctx context.Context, id, status string) (Tenant, error) {
	if status != StatusActive && status != StatusSuspended {
		return Tenant{}, tollgate.Invalid(map[string]string{"status": "must be active or suspended"})
	}
	if !postgres.IsUUID(id) {
		return Tenant{}, errTenantNotFound(id)
	}
	t, err := scanTenant(s.db.QueryRow(ctx, `UPDATE tenants SET status = $2, updated_at = now()
		WHERE id = $1::uuid RETURNING `+tenantColumns, id, status))
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, errTenantNotFound(id)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("tenants: set status: %w", err)
	}
	return t, nil
}

// Filter narrows a tenant listing.
type Filter struct {
	// Query matches a tenant's ID exactly or part of its name, ignoring case.
	Query string
	// Status keeps only tenants with this status when set.
	Status string
	// PlanID keeps only tenants on this plan when not 0.
	PlanID int64
}

// ListPage returns one page of tenants matching f, ordered by name.
func (s *Store) ListPage(ctx context.Context, f Filter, pr page.Request) (page.Page[Tenant], error) {
	var after postgres.ByName
	if _, err := pr.After(&after); err != nil {
		return page.Page[Tenant]{}, err
	}
	like := "%" + postgres.LikeEscape(f.Query) + "%"
	var queryID *string // the query, when it is a tenant ID
	if q := strings.ToLower(f.Query); postgres.IsUUID(q) {
		queryID = &q
	}
	rows, err := s.db.Query(ctx, `SELECT `+tenantColumns+` FROM tenants
		WHERE name > $1 AND ($2 = '' OR name ILIKE $3 OR id = $7::uuid)
		AND ($4 = '' OR status = $4) AND ($5 = 0 OR plan_id = $5)
		ORDER BY name LIMIT $6`, after.Name, f.Query, like, f.Status, f.PlanID, pr.Fetch(), queryID)
	return postgres.CollectPage(pr, rows, err, scanTenant, "tenants: list", func(t Tenant) any { return postgres.ByName{Name: t.Name} })
}

// PlanChange is one entry of a tenant's plan history.
type PlanChange struct {
	ID          int64     `json:"id"`
	TenantID    string    `json:"tenant_id"`
	PlanID      int64     `json:"plan_id"`
	PlanName    string    `json:"plan_name"`
	EffectiveAt time.Time `json:"effective_at"`
	RecordedAt  time.Time `json:"recorded_at"`
}

// PlanHistory returns one page of the tenant's plan changes, newest first.
func (s *Store) PlanHistory(ctx context.Context, tenantID string, pr page.Request) (page.Page[PlanChange], error) {
	var after struct {
		EffectiveAt time.Time `json:"t"`
		ID          int64     `json:"i"`
	}
	have, err := pr.After(&after)
	if err != nil {
		return page.Page[PlanChange]{}, err
	}
	if !postgres.IsUUID(tenantID) {
		return page.Page[PlanChange]{}, errTenantNotFound(tenantID)
	}
	rows, err := s.db.Query(ctx, selectPlanChanges+`
		WHERE c.tenant_id = $1::uuid AND (NOT $2 OR (c.effective_at, c.id) < ($3, $4))
		ORDER BY c.effective_at DESC, c.id DESC LIMIT $5`, tenantID, have, after.EffectiveAt, after.ID, pr.Fetch())
	return postgres.CollectPage(pr, rows, err, scanPlanChange, "tenants: plan history", func(c PlanChange) any {
		after.EffectiveAt, after.ID = c.EffectiveAt, c.ID
		return after
	})
}

const keyColumns = `id, tenant_id, name, hash, prefix, metadata, created_at, expires_at, revoked_at, last_used_at,
	rotated_at, coalesce(replaced_by::text, '')`

func scanKey(row pgx.Row) (Key, error) {
	var k Key
	var hash []byte
	err := row.Scan(&k.ID, &k.TenantID, &k.Name, &hash, &k.Prefix, &k.Metadata, &k.CreatedAt, &k.ExpiresAt, &k.RevokedAt, &k.LastUsedAt,
		&k.RotatedAt, &k.ReplacedBy)
	copy(k.Hash[:], hash)
	if k.Metadata == nil {
		k.Metadata = map[string]string{}
	}
	return k, err
}

// IssueKey creates a key for the tenant and returns its secret, which is
// not stored and cannot be shown again.
func (s *Store) IssueKey(ctx context.Context, tenantID, name string, expiresAt *time.Time) (secret string, k Key, err error) {
	return s.CreateKey(ctx, tenantID, KeySpec{Name: name, ExpiresAt: expiresAt})
}

// RevokeKey revokes the key at once. Revoking twice keeps the first time.
func (s *Store) RevokeKey(ctx context.Context, id string) error {
	return postgres.ExecByID(ctx, s.db, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1::uuid`, id,
		errKeyNotFound(id), "tenants: revoke key")
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
// A malformed tenant ID has no keys.
func (s *Store) ListKeys(ctx context.Context, tenantID string) ([]Key, error) {
	if tenantID != "" && !postgres.IsUUID(tenantID) {
		return []Key{}, nil
	}
	rows, err := s.db.Query(ctx, `SELECT `+keyColumns+` FROM api_keys
		WHERE $1::uuid IS NULL OR tenant_id = $1::uuid ORDER BY created_at DESC, id`, postgres.OptionalID(tenantID))
	return postgres.Collect(rows, err, scanKey, "tenants: list keys")
}
