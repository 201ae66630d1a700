package adminapi

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/quota"
)

// handlePlanQuotaGet serves GET /plans/{planID}/quota.
func handlePlanQuotaGet(log *slog.Logger, qs *quota.Store) http.Handler {
	return handlePlanID(log, func(r *http.Request, id int64) (quota.PlanSettings, error) {
		return qs.PlanSettings(r.Context(), id)
	})
}

// handlePlanQuotaPut serves PUT /plans/{planID}/quota.
func handlePlanQuotaPut(log *slog.Logger, ops *quota.Ops) http.Handler {
	return handlePlanPut(log, ops.SetPlan)
}

// handleTenantQuotaGet serves GET /tenants/{tenantID}/quota.
func handleTenantQuotaGet(log *slog.Logger, qs *quota.Store) http.Handler {
	return handleTenantRead(log, qs.TenantSettings)
}

// handleTenantQuotaPut serves PUT /tenants/{tenantID}/quota.
func handleTenantQuotaPut(log *slog.Logger, ops *quota.Ops) http.Handler {
	return handleChange(log, func(r *http.Request, in quota.TenantSettingsInput) (quota.TenantSettings, error) {
		return ops.SetTenant(r.Context(), actorOf(r), chi.URLParam(r, "tenantID"), in)
	})
}
