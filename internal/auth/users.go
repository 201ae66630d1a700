package auth

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Role is what an admin user may do.
type Role string

// Roles. Operators are the provider's staff and may do everything; tenant
// users belong to one tenant and see nothing of any other.
const (
	// RoleOperator manages plans, tenants, keys, tokens and reads the audit.
	RoleOperator Role = "operator"
	// RoleTenantAdmin manages its own tenant's keys and reads its usage
	// and statements.
	RoleTenantAdmin Role = "tenant_admin"
	// RoleTenantViewer reads its own tenant's data and changes nothing.
	RoleTenantViewer Role = "tenant_viewer"
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool {
	return r == RoleOperator || r == RoleTenantAdmin || r == RoleTenantViewer
}

// TenantScoped reports whether users with r belong to one tenant.
func (r Role) TenantScoped() bool { return r == RoleTenantAdmin || r == RoleTenantViewer }

// User is an admin user. The password hash never leaves the store.
type User struct {
	ID    string `json:"id"`
	Email string `json:"email"`
	Role  Role   `json:"role"`
	// TenantID is the tenant of a tenant-scoped user; "" for operators.
	TenantID   string     `json:"tenant_id,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
}

// NewUser describes a user to create.
type NewUser struct {
	Email    string
	Password string
	Role     Role
	// TenantID is required for tenant roles and must be empty for operators.
	TenantID string
}

// NormalizeEmail returns email trimmed and lower-cased.
func NormalizeEmail(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// ValidateEmail returns a problem with a normalized email, or "".
func ValidateEmail(email string) string {
	a, err := mail.ParseAddress(email)
	if err != nil || a.Address != email || len(email) > 254 {
		return "must be an email address such as ops@example.com"
	}
	return ""
}

// Validate normalizes the email and names each invalid field.
func (u *NewUser) Validate() error {
	u.Email = NormalizeEmail(u.Email)
	f := map[string]string{}
	if p := ValidateEmail(u.Email); p != "" {
		f["email"] = p
	}
	if p := ValidatePassword(u.Password); p != "" {
		f["password"] = p
	}
	switch {
	case !u.Role.Valid():
		f["role"] = "must be operator, tenant_admin or tenant_viewer"
	case u.Role.TenantScoped() && u.TenantID == "":
		f["tenant_id"] = "is required for role " + string(u.Role)
	case !u.Role.TenantScoped() && u.TenantID != "":
		f["tenant_id"] = "must be empty for operators"
	case u.TenantID != "" && !postgres.IsUUID(u.TenantID):
		f["tenant_id"] = "no such tenant"
	}
	return tollgate.Invalid(f)
}

const userColumns = `id, email, role, coalesce(tenant_id::text, ''), created_at, updated_at, disabled_at`

func scanUser(row pgx.Row) (User, error) {
	var u User
	err := row.Scan(&u.ID, &u.Email, &u.Role, &u.TenantID, &u.CreatedAt, &u.UpdatedAt, &u.DisabledAt)
	return u, err
}

// CreateUser stores a new user with the password hashed. A taken email is
// ECONFLICT naming "email"; an unknown tenant is EINVALID naming
// "tenant_id".
func (s *Store) CreateUser(ctx context.Context, nu NewUser) (User, error) {
	if err := nu.Validate(); err != nil {
		return User{}, err
	}
	hash, err := HashPassword(ctx, nu.Password)
	if err != nil {
		return User{}, err
	}
	var tenantID *string
	if nu.TenantID != "" {
		tenantID = &nu.TenantID
	}
	u, err := scanUser(s.db.QueryRow(ctx, `INSERT INTO users (email, password_hash, role, tenant_id)
		VALUES ($1, $2, $3, $4) RETURNING `+userColumns, nu.Email, hash, nu.Role, tenantID))
	if pgErr, ok := postgres.PgError(err); ok {
		switch pgErr.Code {
		case postgres.UniqueViolation:
			return User{}, &tollgate.Error{Code: tollgate.ECONFLICT, Message: "a user with this email exists",
				Fields: map[string]string{"email": "is taken"}}
		case postgres.ForeignKeyViolation, postgres.InvalidTextRepresentation:
			return User{}, tollgate.Invalid(map[string]string{"tenant_id": "no such tenant"})
		}
	}
	if err != nil {
		return User{}, fmt.Errorf("auth: create user: %w", err)
	}
	return u, nil
}

// SetPassword replaces the user's password and ends the user's sessions:
// whoever logged in with the old password does not stay logged in. An
// unknown user is ENOTFOUND.
func (s *Store) SetPassword(ctx context.Context, userID, password string) error {
	if p := ValidatePassword(password); p != "" {
		return tollgate.Invalid(map[string]string{"password": p})
	}
	if !postgres.IsUUID(userID) {
		return errUserNotFound
	}
	hash, err := HashPassword(ctx, password)
	if err != nil {
		return err
	}
	return postgres.Tx(ctx, s.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE users SET password_hash = $2, updated_at = now() WHERE id = $1::uuid`, userID, hash)
		if err != nil {
			return fmt.Errorf("auth: set password: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return errUserNotFound
		}
		_, err = NewStore(tx).EndUserSessions(ctx, userID)
		return err
	})
}

// DisableUser disables the user, who can no longer log in, and ends its
// sessions. It returns the user as changed and how many sessions it
// ended. Disabling twice keeps the first time. An unknown user is
// ENOTFOUND.
func (s *Store) DisableUser(ctx context.Context, userID string) (u User, sessionsEnded int64, err error) {
	if !postgres.IsUUID(userID) {
		return User{}, 0, errUserNotFound
	}
	err = postgres.Tx(ctx, s.db, func(tx pgx.Tx) error {
		var err error
		u, err = scanUser(tx.QueryRow(ctx, `UPDATE users SET disabled_at = coalesce(disabled_at, now()),
			updated_at = CASE WHEN disabled_at IS NULL THEN now() ELSE updated_at END
			WHERE id = $1::uuid RETURNING `+userColumns, userID))
		if errors.Is(err, pgx.ErrNoRows) {
			return errUserNotFound
		}
		if err != nil {
			return fmt.Errorf("auth: disable user: %w", err)
		}
		sessionsEnded, err = NewStore(tx).EndUserSessions(ctx, userID)
		return err
	})
	if err != nil {
		return User{}, 0, err
	}
	return u, sessionsEnded, nil
}

// EndUserSessions ends every live session of the user at once and returns
// how many it ended; the user may log in again. A user that does not
// exist has no sessions.
func (s *Store) EndUserSessions(ctx context.Context, userID string) (int64, error) {
	if !postgres.IsUUID(userID) {
		return 0, nil
	}
	tag, err := s.db.Exec(ctx, `UPDATE admin_sessions SET revoked_at = now()
		WHERE user_id = $1::uuid AND revoked_at IS NULL AND expires_at > now()`, userID)
	if err != nil {
		return 0, fmt.Errorf("auth: end sessions: %w", err)
	}
	return tag.RowsAffected(), nil
}

// GetUser returns the user with id, or ENOTFOUND.
func (s *Store) GetUser(ctx context.Context, id string) (User, error) {
	if !postgres.IsUUID(id) {
		return User{}, errUserNotFound
	}
	return s.userWhere(ctx, "id = $1::uuid", id)
}

// GetUserByEmail returns the user with email (any case), or ENOTFOUND.
func (s *Store) GetUserByEmail(ctx context.Context, email string) (User, error) {
	return s.userWhere(ctx, "email = $1", NormalizeEmail(email))
}

func (s *Store) userWhere(ctx context.Context, where string, arg any) (User, error) {
	u, err := scanUser(s.db.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE `+where, arg))
	if errors.Is(err, pgx.ErrNoRows) {
		return User{}, errUserNotFound
	}
	if err != nil {
		return User{}, fmt.Errorf("auth: get user: %w", err)
	}
	return u, nil
}

var errUserNotFound = tollgate.Errorf(tollgate.ENOTFOUND, "user not found")

// ErrBadLogin is the one answer to a failed login, whatever failed.
var ErrBadLogin = tollgate.Errorf(tollgate.EUNAUTHORIZED, "wrong email or password")

// Authenticate returns the enabled user with email and password, or
// ErrBadLogin. An unknown email costs as much time as a wrong password.
// Waiting to check the password (see HashPassword) ends with ctx.
func (s *Store) Authenticate(ctx context.Context, email, password string) (User, error) {
	var hash string
	var u User
	err := s.db.QueryRow(ctx, `SELECT `+userColumns+`, password_hash FROM users WHERE email = $1`,
		NormalizeEmail(email)).Scan(&u.ID, &u.Email, &u.Role, &u.TenantID, &u.CreatedAt, &u.UpdatedAt,
		&u.DisabledAt, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := CheckPassword(ctx, dummyHash(), password); err != nil {
			return User{}, err
		}
		return User{}, ErrBadLogin
	}
	if err != nil {
		return User{}, fmt.Errorf("auth: authenticate: %w", err)
	}
	ok, err := CheckPassword(ctx, hash, password)
	if err != nil {
		return User{}, err
	}
	if !ok || u.DisabledAt != nil {
		return User{}, ErrBadLogin
	}
	return u, nil
}

// UserFilter narrows a user listing; zero fields match every user.
type UserFilter struct {
	// Query matches part of the email, ignoring case.
	Query string
	Role  Role
	// TenantID keeps only the tenant's users.
	TenantID string
}

// ListUsersPage returns one page of the users matching f, by email.
func (s *Store) ListUsersPage(ctx context.Context, f UserFilter, pr page.Request) (page.Page[User], error) {
	var after struct {
		Email string `json:"e"`
	}
	if _, err := pr.After(&after); err != nil {
		return page.Page[User]{}, err
	}
	if f.TenantID != "" && !postgres.IsUUID(f.TenantID) {
		return page.Make(pr, []User{}, func(User) any { return after }), nil
	}
	like := "%" + postgres.LikeEscape(strings.ToLower(f.Query)) + "%"
	var tenantID *string
	if f.TenantID != "" {
		tenantID = &f.TenantID
	}
	rows, err := s.db.Query(ctx, `SELECT `+userColumns+` FROM users
		WHERE email > $1 AND ($2 = '' OR email LIKE $3) AND ($4 = '' OR role = $4)
		AND ($5::uuid IS NULL OR tenant_id = $5::uuid)
		ORDER BY email LIMIT $6`, after.Email, f.Query, like, string(f.Role), tenantID, pr.Fetch())
	return postgres.CollectPage(pr, rows, err, scanUser, "auth: list users", func(u User) any {
		after.Email = u.Email
		return after
	})
}
