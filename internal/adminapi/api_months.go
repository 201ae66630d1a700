package adminapi

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/httpx"
)

// handleMonthClose serves POST /months/{month}/close, as `admin close`:
// every tenant's statement of the month is computed and frozen. Closing a
// closed month changes nothing (already_closed); a month that has not
// ended is 422. The close is recorded in the audit log in its own
// transaction.
func handleMonthClose(log *slog.Logger, store *billing.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, err := billing.ParseMonth(chi.URLParam(r, "month"))
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		actor := actorOf(r)
		res, err := store.CloseMonthAndRecord(r.Context(), m, nil, func(tx pgx.Tx, res billing.CloseResult) error {
			_, err := audit.Record(r.Context(), tx, actor, audit.Change{Action: "month.close", TargetType: "month",
				TargetID: res.Month, After: map[string]any{"statements": res.Statements, "total_minor": res.TotalMinor}})
			return err
		})
		writeResult(w, r, log, res, err)
	})
}
