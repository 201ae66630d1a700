package main

import (
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	usagepkg "github.com/tollgate/tollgate/internal/usage"
)

// routes lists every route of the admin server. Each API route names who
// may call it (see access.go): public, signedIn (any role), operator, or
// for routes under /tenants/{tenantID}: tenantRead (the tenant's users),
// tenantKeys (its tenant_admins) and tenantOps (operators only).
func routes(log *slog.Logger, db *pgxpool.Pool, sessions *sessionAuth, logins *loginLimiter, us *usagepkg.Store) http.Handler {
	ps, ts, as, audits := plans.NewStore(db), tenants.NewStore(db), auth.NewStore(db), audit.NewStore(db)
	ch := changer{db: db}
	now := sessions.now

	r := chi.NewRouter()
	r.NotFound(notFound(log))
	r.MethodNotAllowed(methodNotAllowed())
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpx.JSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := db.Ping(r.Context()); err != nil {
			httpx.JSON(w, http.StatusServiceUnavailable, map[string]string{"postgres": "unreachable"})
			return
		}
		httpx.JSON(w, http.StatusOK, map[string]string{"postgres": "ok"})
	})

	r.Route("/api/v1", func(r chi.Router) {
		r.NotFound(notFound(log))
		r.MethodNotAllowed(methodNotAllowed())
		r.Use(noStore, crossOriginProtection(log), sessions.identify(log))
		public := r
		signedIn := r.With(requireSession(log))
		operator := signedIn.With(operatorOnly(log))
		tenantRead := signedIn.With(tenant(log, readTenant))
		tenantKeys := signedIn.With(tenant(log, manageKeys))
		tenantOps := signedIn.With(tenant(log, operateTenant))

		public.Method("POST", "/login", handleLogin(log, sessions, logins, ch))
		public.Method("POST", "/logout", handleLogout(log, ch))
		signedIn.Method("GET", "/me", handleMe())

		operator.Method("GET", "/plans", handlePlanList(log, ps))
		operator.Method("POST", "/plans", handlePlanCreate(log, ch))
		operator.Method("GET", "/plans/{planID}", handlePlanGet(log, ps))
		operator.Method("PUT", "/plans/{planID}", handlePlanUpdate(log, ch))
		operator.Method("DELETE", "/plans/{planID}", handlePlanDelete(log, ch))
		operator.Method("POST", "/plans/{planID}/archive", handlePlanArchive(log, ch, true))
		operator.Method("POST", "/plans/{planID}/unarchive", handlePlanArchive(log, ch, false))

		operator.Method("GET", "/tenants", handleTenantList(log, ts))
		operator.Method("POST", "/tenants", handleTenantCreate(log, ch))
		tenantRead.Method("GET", "/tenants/{tenantID}", handleTenantGet(log, ts))
		tenantOps.Method("POST", "/tenants/{tenantID}/plan", handleTenantSetPlan(log, ch, now))
		tenantRead.Method("GET", "/tenants/{tenantID}/plan-changes", handleTenantPlanHistory(log, ts))
		tenantOps.Method("POST", "/tenants/{tenantID}/suspend", handleTenantStatus(log, ch, tenants.StatusSuspended))
		tenantOps.Method("POST", "/tenants/{tenantID}/resume", handleTenantStatus(log, ch, tenants.StatusActive))
		tenantRead.Method("GET", "/tenants/{tenantID}/overrides", handleOverridesGet(log, ts))
		tenantOps.Method("PUT", "/tenants/{tenantID}/overrides", handleOverridesPut(log, ch))

		tenantRead.Method("GET", "/tenants/{tenantID}/keys", handleKeyList(log, ts))
		tenantKeys.Method("POST", "/tenants/{tenantID}/keys", handleKeyCreate(log, ch, now))
		tenantRead.Method("GET", "/tenants/{tenantID}/keys/{keyID}", handleKeyGet(log, ts))
		tenantKeys.Method("PATCH", "/tenants/{tenantID}/keys/{keyID}", handleKeyUpdate(log, ch, now))
		tenantKeys.Method("POST", "/tenants/{tenantID}/keys/{keyID}/revoke", handleKeyRevoke(log, ch))
		tenantKeys.Method("POST", "/tenants/{tenantID}/keys/{keyID}/rotate", handleKeyRotate(log, ch, now))

		operator.Method("GET", "/service-tokens", handleServiceTokenList(log, as))
		operator.Method("POST", "/service-tokens", handleServiceTokenCreate(log, ch))
		operator.Method("POST", "/service-tokens/{tokenID}/revoke", handleServiceTokenRevoke(log, ch))

		operator.Method("GET", "/audit", handleAuditList(log, audits))

		// Usage and statements: each handler asks authorizeUsage, which
		// lets tenant users read their own tenant's and operators
		// everyone's (and the operator-wide views).
		signedIn.Method("GET", "/usage/tenants/{tenantID}/series", usagepkg.HandleSeries(us, authorizeUsage, log))
		signedIn.Method("GET", "/usage/tenants/{tenantID}/top-keys", usagepkg.HandleTopKeys(us, authorizeUsage, log))
		signedIn.Method("GET", "/usage/tenants/{tenantID}/top-resources", usagepkg.HandleTopResources(us, authorizeUsage, log))
		signedIn.Method("GET", "/usage/tenants/{tenantID}/rejections", usagepkg.HandleRejections(us, authorizeUsage, log))
		signedIn.Method("GET", "/usage/totals", usagepkg.HandleTotals(us, authorizeUsage, log))
		signedIn.Method("GET", "/usage/anonymous/top-ips", usagepkg.HandleTopIPs(us, authorizeUsage, log))
		signedIn.Method("GET", "/statements", usagepkg.HandleStatements(us, authorizeUsage, log))
		signedIn.Method("GET", "/statements/late", usagepkg.HandleLate(us, authorizeUsage, log))
		signedIn.Method("GET", "/statements/{tenantID}/{month}", usagepkg.HandleStatement(us, authorizeUsage, log))
	})
	return r
}

// noStore keeps API answers, which hold tenants' data, out of caches.
func noStore(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// crossOriginProtection refuses state-changing requests a browser sends
// from another origin (CSRF through the session cookie). API clients that
// send no Origin or Sec-Fetch-Site header are not affected.
func crossOriginProtection(log *slog.Logger) func(http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpx.Error(w, r, log, tollgate.Errorf(tollgate.EFORBIDDEN, "cross-origin request refused"))
	}))
	return cop.Handler
}

func notFound(log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		httpx.Error(w, r, log, tollgate.Errorf(tollgate.ENOTFOUND, "no such endpoint"))
	}
}

func methodNotAllowed() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusMethodNotAllowed)
		_ = json.NewEncoder(w).Encode(httpx.Problem{Type: "about:blank", Title: http.StatusText(http.StatusMethodNotAllowed),
			Status: http.StatusMethodNotAllowed, Detail: "method not allowed on this endpoint", Code: "method_not_allowed"})
	}
}
