// Package access decides who may do what in the admin server: it carries
// a request's verified session and holds the rules by role. Operators may
// do everything; a tenant's users see their own tenant only — any other
// tenant, existing or not, is not found, exactly like one that does not
// exist —, and only its tenant_admins manage its keys.
//
// The admin API (internal/adminapi) and the web console (internal/ui) ask
// the same functions, so that a page offers exactly what the API lets its
// user do.
package access

import (
	"context"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
)

// Level is what a request does to a tenant.
type Level int

// Levels of access to a tenant.
const (
	// ReadTenant: the tenant's operators and all its users.
	ReadTenant Level = iota
	// ManageKeys: operators and the tenant's tenant_admins (its keys,
	// alert thresholds, webhook endpoints and credit top-ups).
	ManageKeys
	// OperateTenant: operators only (plans, suspension, overrides).
	OperateTenant
)

// ErrOperatorsOnly refuses a tenant user what only operators may do.
var ErrOperatorsOnly = tollgate.Errorf(tollgate.EFORBIDDEN, "only operators may do this")

type ctxKey struct{}

// WithSession returns ctx carrying the verified session s.
func WithSession(ctx context.Context, s auth.Session) context.Context {
	return context.WithValue(ctx, ctxKey{}, s)
}

// WithoutSession returns ctx carrying no session, whatever ctx carried:
// a request is only ever signed in by the token it carries itself.
func WithoutSession(ctx context.Context) context.Context {
	return context.WithValue(ctx, ctxKey{}, nil)
}

// SessionFrom returns the verified session ctx carries, if any.
func SessionFrom(ctx context.Context) (auth.Session, bool) {
	s, ok := ctx.Value(ctxKey{}).(auth.Session)
	return s, ok
}

// Actor returns who makes the changes of ctx's session: the principal the
// change operations (plans.Ops, tenants.Ops, auth.Ops…) take.
func Actor(ctx context.Context) audit.Actor {
	s, _ := SessionFrom(ctx)
	return audit.Actor{ID: s.User.ID, Name: s.User.Email, Operator: s.User.Role == auth.RoleOperator}
}

// Operator lets only operators through: tenant users get ErrOperatorsOnly.
func Operator(u auth.User) error {
	if u.Role != auth.RoleOperator {
		return ErrOperatorsOnly
	}
	return nil
}

// Tenant decides whether u may act on tenantID at level: nil, ENOTFOUND
// for a tenant that is not u's, or EFORBIDDEN within u's own tenant for
// what its role may not do.
func Tenant(u auth.User, tenantID string, level Level) error {
	switch {
	case u.Role == auth.RoleOperator:
		return nil
	case !u.Role.TenantScoped() || u.TenantID == "" || u.TenantID != tenantID:
		return tollgate.Errorf(tollgate.ENOTFOUND, "tenant %s not found", tenantID)
	case level == ReadTenant:
		return nil
	case level == ManageKeys && u.Role == auth.RoleTenantAdmin:
		return nil
	case level == ManageKeys:
		return tollgate.Errorf(tollgate.EFORBIDDEN, "your role (%s) may only read this tenant", u.Role)
	default:
		return ErrOperatorsOnly
	}
}

// Usage decides whether ctx's session may read a tenant's usage and
// statements: operators anything, including the operator-wide views
// (tenantID ""); tenant users their own tenant's only.
func Usage(ctx context.Context, tenantID string) error {
	s, ok := SessionFrom(ctx)
	if !ok {
		return auth.ErrNoSession
	}
	if tenantID == "" {
		return Operator(s.User)
	}
	return Tenant(s.User, tenantID, ReadTenant)
}
