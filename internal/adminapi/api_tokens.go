package adminapi

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/httpx"
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

// Service token lifetimes.
const (
	minServiceTokenTTL     = time.Minute
	maxServiceTokenTTL     = 10 * 365 * 24 * time.Hour
	defaultServiceTokenTTL = 365 * 24 * time.Hour
)

type serviceTokenRequest struct {
	Name string `json:"name"`
	// TTLS is the token's lifetime in seconds (default one year).
	TTLS *int64 `json:"ttl_s"`
}

func (s *serviceTokenRequest) ttl() time.Duration {
	if s.TTLS == nil {
		return defaultServiceTokenTTL
	}
	return time.Duration(*s.TTLS) * time.Second
}

func (s *serviceTokenRequest) Validate() error {
	f := map[string]string{}
	s.Name = strings.TrimSpace(s.Name)
	if s.Name == "" || len(s.Name) > 200 {
		f["name"] = "must be 1–200 characters"
	}
	if s.TTLS != nil && (*s.TTLS < int64(minServiceTokenTTL/time.Second) || *s.TTLS > int64(maxServiceTokenTTL/time.Second)) {
		f["ttl_s"] = "must be from 60 to 315360000 (10 years)"
	}
	return tollgate.Invalid(f)
}

// ServiceTokenResponse answers POST /service-tokens: the only time the
// token is shown.
type ServiceTokenResponse struct {
	ServiceToken auth.ServiceToken `json:"service_token"`
	// Token is the signed JWT, shown this once.
	Token string `json:"token"`
}

// handleServiceTokenCreate serves POST /service-tokens.
func handleServiceTokenCreate(log *slog.Logger, db *pgxpool.Pool, keys *auth.SecretKeys) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req serviceTokenRequest
		if err := httpx.Decode(r, MaxBody, &req); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		var token string
		st, err := audit.Create(r.Context(), db, actorOf(r), "service_token.create", auth.ServiceTokenAudit,
			func(tx pgx.Tx) (st auth.ServiceToken, err error) {
				token, st, err = auth.NewStore(tx).WithSecretKeys(keys).IssueServiceToken(r.Context(), req.Name, req.ttl())
				return st, err
			})
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		w.Header().Set("Location", "/api/v1/service-tokens/"+st.ID)
		httpx.JSON(w, http.StatusCreated, ServiceTokenResponse{ServiceToken: st, Token: token})
	})
}

// handleServiceTokenRevoke serves POST /service-tokens/{tokenID}/revoke:
// the check API refuses the token (401) within a second.
func handleServiceTokenRevoke(log *slog.Logger, db *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "tokenID")
		after, err := audit.Update(r.Context(), db, actorOf(r), "service_token.revoke", auth.ServiceTokenAudit,
			func(tx pgx.Tx) (auth.ServiceToken, error) { return auth.NewStore(tx).GetServiceToken(r.Context(), id) },
			func(tx pgx.Tx, _ auth.ServiceToken) (auth.ServiceToken, error) {
				as := auth.NewStore(tx)
				if err := as.RevokeServiceToken(r.Context(), id); err != nil {
					return auth.ServiceToken{}, err
				}
				return as.GetServiceToken(r.Context(), id)
			})
		writeResult(w, r, log, after, err)
	})
}
