package adminapi

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/httpx"
)

// Who may do what. Every route but login, logout and the health checks
// needs a session, and then one of these:
//
//   - operatorOnly: operators. Tenant users get 403.
//   - a tenant access level, for routes under /tenants/{tenantID}:
//     operators always; a tenant user only for its own tenant — any other
//     tenant, existing or not, is 404, exactly like a tenant that does not
//     exist, so that tenant users learn nothing about other tenants. Within
//     its own tenant a user lacking the level gets 403.
//
// Resources below a tenant (keys) are looked up within the tenant of the
// path, so another tenant's key ID is 404 under one's own tenant too.
type tenantAccess int

const (
	// readTenant: the tenant's operators and all its users.
	readTenant tenantAccess = iota
	// manageKeys: operators and the tenant's tenant_admins.
	manageKeys
	// operateTenant: operators only (plans, suspension, overrides).
	operateTenant
)

var errOperatorsOnly = tollgate.Errorf(tollgate.EFORBIDDEN, "only operators may do this")

// operatorOnly lets only operators through.
func operatorOnly(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s, _ := sessionFrom(r.Context()); s.User.Role != auth.RoleOperator {
				httpx.Error(w, r, log, errOperatorsOnly)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// tenant lets a request for the path's {tenantID} through at level.
func tenant(log *slog.Logger, level tenantAccess) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s, _ := sessionFrom(r.Context())
			if err := allowTenant(s.User, chi.URLParam(r, "tenantID"), level); err != nil {
				httpx.Error(w, r, log, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// allowTenant decides whether u may act on tenantID at level.
func allowTenant(u auth.User, tenantID string, level tenantAccess) error {
	switch {
	case u.Role == auth.RoleOperator:
		return nil
	case !u.Role.TenantScoped() || u.TenantID == "" || u.TenantID != tenantID:
		return tollgate.Errorf(tollgate.ENOTFOUND, "tenant %s not found", tenantID)
	case level == readTenant:
		return nil
	case level == manageKeys && u.Role == auth.RoleTenantAdmin:
		return nil
	case level == manageKeys:
		return tollgate.Errorf(tollgate.EFORBIDDEN, "your role (%s) may only read this tenant", u.Role)
	default:
		return errOperatorsOnly
	}
}

// authorizeUsage decides who may read usage and statements (the
// usage.Authorize of the usage handlers): operators anything, including
// the operator-wide views (tenantID ""); tenant users their own tenant's
// only — another tenant is 404, as everywhere.
func authorizeUsage(r *http.Request, tenantID string) error {
	s, ok := sessionFrom(r.Context())
	if !ok {
		return auth.ErrNoSession
	}
	if tenantID == "" {
		if s.User.Role != auth.RoleOperator {
			return errOperatorsOnly
		}
		return nil
	}
	return allowTenant(s.User, tenantID, readTenant)
}
