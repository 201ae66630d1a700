package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/httpx"
)

// routes lists every route of the check server.
func routes(log *slog.Logger, holder *enforce.Holder, checker *enforce.Checker, reg *prometheus.Registry,
	db *pgxpool.Pool, pingStore func(context.Context) error) http.Handler {
	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpx.JSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", handleReady(log, holder, db, pingStore))
	r.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	r.With(enforce.RequireServiceToken(holder, log)).Post("/v1/check", enforce.HandleCheck(checker, log).ServeHTTP)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		httpx.Error(w, r, log, tollgate.Errorf(tollgate.ENOTFOUND, "no such endpoint"))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusMethodNotAllowed)
	})
	return r
}

// handleReady answers 200 when the snapshot is loaded and the limiter
// store answers, 503 otherwise, naming what is wrong. Postgres is reported
// but does not make the process unready: checks are served from the
// snapshot, so a Postgres outage must not take every API node out of its
// load balancer.
func handleReady(log *slog.Logger, holder *enforce.Holder, db *pgxpool.Pool, pingStore func(context.Context) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		checks := map[string]string{"snapshot": "ok", "postgres": "ok", "limiter_store": "ok"}
		ok := true
		if holder.Current() == nil {
			checks["snapshot"], ok = "not loaded", false
		}
		if err := db.Ping(ctx); err != nil {
			checks["postgres"] = "unreachable (serving from the last snapshot)"
		}
		if err := pingStore(ctx); err != nil {
			checks["limiter_store"], ok = "unreachable", false
		}
		status := http.StatusOK
		if !ok {
			status = http.StatusServiceUnavailable
			log.Warn("not ready", "checks", checks)
		}
		httpx.JSON(w, status, checks)
	}
}
