package adminapi

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/billing"
)

// handleMonthClose serves POST /months/{month}/close, as `admin close`:
// every tenant's statement of the month is computed and frozen. Closing a
// closed month changes nothing (already_closed); a month that has not
// ended is 422. The close is recorded in the audit log in the closing
// transaction (billing.Store.CloseMonth).
func handleMonthClose(log *slog.Logger, store *billing.Store) http.Handler {
	return handlePath(log, http.StatusOK, func(r *http.Request) (billing.Month, error) {
		return billing.ParseMonth(chi.URLParam(r, "month"))
	}, func(r *http.Request, m billing.Month) (billing.CloseResult, error) {
		return store.CloseMonth(r.Context(), actorOf(r), m, nil)
	})
}
