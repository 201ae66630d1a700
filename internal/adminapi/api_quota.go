package adminapi

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/quota"
)

// handlePlanQuotaGet serves GET /plans/{planID}/quota.
func handlePlanQuotaGet(log *slog.Logger, qs *quota.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := pathPlanID(r)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		ps, err := qs.PlanSettings(r.Context(), id)
		writeResult(w, r, log, ps, err)
	})
}

// handlePlanQuotaPut serves PUT /plans/{planID}/quota.
func handlePlanQuotaPut(log *slog.Logger, ops *quota.Ops) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := pathPlanID(r)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		var in quota.PlanSettingsInput
		if err := httpx.DecodeBody(r, MaxBody, &in); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		ps, err := ops.SetPlan(r.Context(), actorOf(r), id, in)
		writeResult(w, r, log, ps, err)
	})
}

// handleTenantQuotaGet serves GET /tenants/{tenantID}/quota.
func handleTenantQuotaGet(log *slog.Logger, qs *quota.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts, err := qs.TenantSettings(r.Context(), chi.URLParam(r, "tenantID"))
		writeResult(w, r, log, ts, err)
	})
}

// handleTenantQuotaPut serves PUT /tenants/{tenantID}/quota.
func handleTenantQuotaPut(log *slog.Logger, ops *quota.Ops) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in quota.TenantSettingsInput
		if err := httpx.DecodeBody(r, MaxBody, &in); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		ts, err := ops.SetTenant(r.Context(), actorOf(r), chi.URLParam(r, "tenantID"), in)
		writeResult(w, r, log, ts, err)
	})
}
