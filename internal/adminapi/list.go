package adminapi

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/page"
)

// handlePage serves one page of a list: the page request from the query
// (?limit=…&cursor=…), then the filter that filter reads from the request,
// then a page of list. An error at any step is the answer.
func handlePage[F, T any](log *slog.Logger, filter func(r *http.Request) (F, error),
	list func(ctx context.Context, f F, pr page.Request) (page.Page[T], error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pr, err := page.FromQuery(r.URL.Query())
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		f, err := filter(r)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		pg, err := list(r.Context(), f, pr)
		writeResult(w, r, log, pg, err)
	})
}

// writeResult answers err, or else v as JSON with 200 OK.
func writeResult(w http.ResponseWriter, r *http.Request, log *slog.Logger, v any, err error) {
	if err != nil {
		httpx.Error(w, r, log, err)
		return
	}
	httpx.JSON(w, http.StatusOK, v)
}

// noFilter is the filter of a list that has none.
func noFilter(*http.Request) (struct{}, error) { return struct{}{}, nil }
