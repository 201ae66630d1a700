package adminapi

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/tenants"
)

// handleCreditsLedger serves GET /tenants/{tenantID}/credits/ledger,
// newest first, filtered by kind: 404 for a tenant that does not exist.
func handleCreditsLedger(log *slog.Logger, ts *tenants.Store, cs *credits.Store) http.Handler {
	return handlePage(log, func(r *http.Request) (credits.LedgerFilter, error) {
		f := credits.LedgerFilter{Kind: r.URL.Query().Get("kind")}
		if err := credits.ValidateLedgerFilter(f); err != nil {
			return f, err
		}
		_, err := ts.Get(r.Context(), chi.URLParam(r, "tenantID"))
		return f, err
	}, func(ctx context.Context, f credits.LedgerFilter, pr page.Request) (page.Page[credits.Entry], error) {
		return cs.Ledger(ctx, chi.URLParamFromCtx(ctx, "tenantID"), f, pr)
	})
}

// handleCreditsGrant serves POST /tenants/{tenantID}/credits/grants: a
// grant or top-up, 201 with the grant; once per Idempotency-Key
// (tenantChangeOnce).
func handleCreditsGrant(log *slog.Logger, ops *credits.Ops) http.Handler {
	return handleBody(log, decodeBody, tenantChangeOnce(ops.GrantOnce), func(w http.ResponseWriter, r *http.Request, g replayable[credits.Grant]) {
		w.Header().Set("Location", "/api/v1/tenants/"+g.value.TenantID+"/credits")
		g.write(w, r, log, http.StatusCreated)
	})
}

// handleCreditsAdjust serves POST /tenants/{tenantID}/credits/adjustments:
// 200 with the adjustment and the balance after it; once per
// Idempotency-Key (tenantChangeOnce).
func handleCreditsAdjust(log *slog.Logger, ops *credits.Ops) http.Handler {
	return handleBody(log, decodeBody, tenantChangeOnce(ops.AdjustOnce), func(w http.ResponseWriter, r *http.Request, a replayable[credits.Adjustment]) {
		a.write(w, r, log, http.StatusOK)
	})
}

// replayable is the result of a change made at most once per idempotency
// key: replayed when an earlier request with the key made it.
type replayable[T any] struct {
	value    T
	replayed bool
}

// write answers the result as JSON with status, the status of the request
// that made it, and on a replay the header Idempotent-Replayed: true (as
// Stripe answers), so a client can tell its retry changed nothing.
func (res replayable[T]) write(w http.ResponseWriter, r *http.Request, log *slog.Logger, status int) {
	if res.replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	httpx.JSON(w, r, log, status, res.value)
}

// tenantChangeOnce is change made to the tenant {tenantID} by the
// request's actor with the request's body in, at most once for the
// request's idempotency key (idempotencyKey; without one, every time).
func tenantChangeOnce[In, Out any](change func(ctx context.Context, by audit.Actor, tenantID, key string, in In) (Out, bool, error)) func(r *http.Request, in In) (replayable[Out], error) {
	return func(r *http.Request, in In) (replayable[Out], error) {
		key, err := idempotencyKey(r)
		if err != nil {
			return replayable[Out]{}, err
		}
		v, replayed, err := change(r.Context(), actorOf(r), chi.URLParam(r, "tenantID"), key, in)
		return replayable[Out]{v, replayed}, err
	}
}

// idempotencyKey returns the request's Idempotency-Key header, "" when it
// has none. A header sent empty or more than once is EINVALID naming it
// (the change checks the key itself: credits.IdempotencyKeyProblem).
func idempotencyKey(r *http.Request) (string, error) {
	keys := r.Header.Values(credits.IdempotencyKeyHeader)
	switch {
	case len(keys) == 0:
		return "", nil
	case len(keys) > 1:
		return "", tollgate.Invalid(map[string]string{credits.IdempotencyKeyHeader: "must be sent once"})
	case keys[0] == "":
		return "", tollgate.Invalid(map[string]string{credits.IdempotencyKeyHeader: credits.IdempotencyKeyProblem("")})
	}
	return keys[0], nil
}
