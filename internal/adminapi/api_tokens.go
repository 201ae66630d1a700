package adminapi

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/page"
)

// Service tokens are the check API's callers' credentials (gateways). Only
// operators see or make them.

// handleServiceTokenList serves GET /service-tokens, newest first.
func handleServiceTokenList(log *slog.Logger, as *auth.Store) http.Handler {
	return handlePage(log, noFilter, func(ctx context.Context, _ struct{}, pr page.Request) (page.Page[auth.ServiceToken], error) {
		return as.ListServiceTokensPage(ctx, pr)
	})
}

// ServiceTokenResponse answers POST /service-tokens: the only time the
// token is shown.
type ServiceTokenResponse = auth.IssuedServiceToken

// handleServiceTokenCreate serves POST /service-tokens.
func handleServiceTokenCreate(log *slog.Logger, ops *auth.Ops) http.Handler {
	return handleCreate(log, decodeBody, func(r *http.Request, in auth.IssueServiceTokenInput) (auth.IssuedServiceToken, error) {
		return ops.IssueServiceToken(r.Context(), actorOf(r), in)
	}, func(res auth.IssuedServiceToken) string { return "/service-tokens/" + res.ServiceToken.ID })
}

// handleServiceTokenRevoke serves POST /service-tokens/{tokenID}/revoke:
// the check API refuses the token (401) within a second.
func handleServiceTokenRevoke(log *slog.Logger, ops *auth.Ops) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, err := ops.RevokeServiceToken(r.Context(), actorOf(r), chi.URLParam(r, "tokenID"))
		writeResult(w, r, log, st, err)
	})
}
