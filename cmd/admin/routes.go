package main

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/httpx"
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
	return r
}
