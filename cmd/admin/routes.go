package main

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/httpx"
	usagepkg "github.com/tollgate/tollgate/internal/usage"
)

// adminRoutes lists every route of the admin server.
func adminRoutes(log *slog.Logger, e *env) http.Handler {
	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpx.JSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := e.db.Ping(r.Context()); err != nil {
			httpx.JSON(w, http.StatusServiceUnavailable, map[string]string{"postgres": "unreachable"})
			return
		}
		httpx.JSON(w, http.StatusOK, map[string]string{"postgres": "ok"})
	})

	// Usage and statements (internal/usage), behind temporaryOperatorGuard
	// (operatorguard.go) until the admin API's roles replace it.
	uc, _ := loadUsageConfig(e.getenv) // validated by serve at start
	us, authorize := uc.store(e), temporaryOperatorGuard(e.getenv)
	r.Method(http.MethodGet, "/api/v1/usage/tenants/{tenant}/series", usagepkg.HandleSeries(us, authorize, log))
	r.Method(http.MethodGet, "/api/v1/usage/tenants/{tenant}/top-keys", usagepkg.HandleTopKeys(us, authorize, log))
	r.Method(http.MethodGet, "/api/v1/usage/tenants/{tenant}/top-resources", usagepkg.HandleTopResources(us, authorize, log))
	r.Method(http.MethodGet, "/api/v1/usage/tenants/{tenant}/rejections", usagepkg.HandleRejections(us, authorize, log))
	r.Method(http.MethodGet, "/api/v1/usage/totals", usagepkg.HandleTotals(us, authorize, log))
	r.Method(http.MethodGet, "/api/v1/usage/anonymous/top-ips", usagepkg.HandleTopIPs(us, authorize, log))
	r.Method(http.MethodGet, "/api/v1/statements", usagepkg.HandleStatements(us, authorize, log))
	r.Method(http.MethodGet, "/api/v1/statements/late", usagepkg.HandleLate(us, authorize, log))
	r.Method(http.MethodGet, "/api/v1/statements/{tenant}/{month}", usagepkg.HandleStatement(us, authorize, log))
	return r
}
