package adminapi

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/page"
)

// handlePlanCreditsGet serves GET /plans/{planID}/credits: mode "off"
// for a plan that does not draw on credits.
func handlePlanCreditsGet(log *slog.Logger, cs *credits.Store) http.Handler {
	return handlePlanID(log, func(r *http.Request, id int64) (credits.PlanSettings, error) {
		return cs.PlanSettingsOrOff(r.Context(), id)
	})
}

// handlePlanCreditsPut serves PUT /plans/{planID}/credits.
func handlePlanCreditsPut(log *slog.Logger, ops *credits.Ops) http.Handler {
	return handlePlanPut(log, ops.SetPlan)
}

// handleCreditsGet serves GET /tenants/{tenantID}/credits: the balance
// and the grants.
func handleCreditsGet(log *slog.Logger, cs *credits.Store) http.Handler {
	return handleTenantRead(log, cs.Balance)
}

// handleCreditsLedger serves GET /tenants/{tenantID}/credits/ledger,
// newest first, filtered by kind.
func handleCreditsLedger(log *slog.Logger, cs *credits.Store) http.Handler {
	return handlePage(log, func(r *http.Request) (credits.LedgerFilter, error) {
		f := credits.LedgerFilter{Kind: r.URL.Query().Get("kind")}
		return f, credits.ValidateLedgerFilter(f)
	}, func(ctx context.Context, f credits.LedgerFilter, pr page.Request) (page.Page[credits.Entry], error) {
		return cs.Ledger(ctx, chi.URLParamFromCtx(ctx, "tenantID"), f, pr)
	})
}

// handleCreditsGrant serves POST /tenants/{tenantID}/credits/grants: a
// grant or top-up, 201 with the grant.
func handleCreditsGrant(log *slog.Logger, ops *credits.Ops) http.Handler {
	return handleCreate(log, decodeBody, func(r *http.Request, in credits.GrantInput) (credits.Grant, error) {
		return ops.Grant(r.Context(), actorOf(r), chi.URLParam(r, "tenantID"), in)
	}, func(g credits.Grant) string { return "/tenants/" + g.TenantID + "/credits" })
}

// handleCreditsAdjust serves POST /tenants/{tenantID}/credits/adjustments.
func handleCreditsAdjust(log *slog.Logger, ops *credits.Ops) http.Handler {
	return handleChange(log, func(r *http.Request, in credits.AdjustInput) (credits.Adjustment, error) {
		return ops.Adjust(r.Context(), actorOf(r), chi.URLParam(r, "tenantID"), in)
	})
}
