package adminapi

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/usage"
)

// handleMonthClose serves POST /months/{month}/close, as `admin close`:
// every tenant's statement of the month is computed and frozen. Closing a
// closed month changes nothing (already_closed); a month that has not
// ended is 422. The close is recorded in the audit log in the closing
// transaction (billing.Ops.CloseMonth).
func handleMonthClose(log *slog.Logger, ops *billing.Ops) http.Handler {
	return handlePath(log, http.StatusOK, func(r *http.Request) (usage.Month, error) {
		return usage.ParseMonth(chi.URLParam(r, "month"))
	}, func(r *http.Request, m usage.Month) (billing.CloseResult, error) {
		return ops.CloseMonth(r.Context(), actorOf(r), m, nil)
	})
}
