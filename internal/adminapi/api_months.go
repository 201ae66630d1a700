package adminapi

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/httpx"
)

// handleMonthClose serves POST /months/{month}/close, as `admin close`:
// every tenant's statement of the month is computed and frozen. Closing a
// closed month changes nothing (already_closed); a month that has not
// ended is 422. The close is recorded in the audit log in the closing
// transaction (billing.Store.CloseMonth).
func handleMonthClose(log *slog.Logger, store *billing.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, err := billing.ParseMonth(chi.URLParam(r, "month"))
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		res, err := store.CloseMonth(r.Context(), actorOf(r), m, nil)
		writeResult(w, r, log, res, err)
	})
}
