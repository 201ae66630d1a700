package adminapi

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/access"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/httpx"
)

// Who may do what. Every route but login, logout, the health checks and
// the console's sign-in page needs a session, and then one of these:
//
//   - operatorOnly: operators. Tenant users get 403.
//   - a tenant access level, for routes under /tenants/{tenantID}:
//     operators always; a tenant user only for its own tenant — any other
//     tenant, existing or not, is 404, exactly like a tenant that does not
//     exist, so that tenant users learn nothing about other tenants. Within
//     its own tenant a user lacking the level gets 403.
//
// The rules themselves are internal/access's, which the console also asks
// to decide which buttons a page shows. Resources below a tenant (keys)
// are looked up within the tenant of the path, so another tenant's key ID
// is 404 under one's own tenant too.
type tenantAccess = access.Level

const (
	readTenant    = access.ReadTenant
	manageKeys    = access.ManageKeys
	operateTenant = access.OperateTenant
)

// errorWriter answers a request with err: problem+json for the API, an
// HTML page (or the sign-in page) for the console.
type errorWriter func(w http.ResponseWriter, r *http.Request, err error)

// apiError writes API errors as problem+json.
func apiError(log *slog.Logger) errorWriter {
	return func(w http.ResponseWriter, r *http.Request, err error) { httpx.Error(w, r, log, err) }
}

// operatorOnly lets only operators through.
func operatorOnly(fail errorWriter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s, _ := sessionFrom(r.Context())
			if err := access.Operator(s.User); err != nil {
				fail(w, r, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// tenant lets a request for the path's {tenantID} through at level.
func tenant(fail errorWriter, level tenantAccess) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s, _ := sessionFrom(r.Context())
			if err := allowTenant(s.User, chi.URLParam(r, "tenantID"), level); err != nil {
				fail(w, r, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// allowTenant decides whether u may act on tenantID at level.
func allowTenant(u auth.User, tenantID string, level tenantAccess) error {
	return access.Tenant(u, tenantID, level)
}

// authorizeUsage decides who may read usage and statements (the
// usage.Authorize of the usage handlers): operators anything, including
// the operator-wide views (tenantID ""); tenant users their own tenant's
// only — another tenant is 404, as everywhere.
func authorizeUsage(r *http.Request, tenantID string) error {
	return access.Usage(r.Context(), tenantID)
}
