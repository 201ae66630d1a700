package adminapi

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/page"
)

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
	return handleCreate(log, decodeBody, tenantChange(ops.Grant),
		func(g credits.Grant) string { return "/tenants/" + g.TenantID + "/credits" })
}
