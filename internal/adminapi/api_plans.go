package adminapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/plans"
)

// planFilter reads the query of GET /plans: archived (true or false).
func planFilter(q url.Values) (plans.Filter, error) {
	var f plans.Filter
	if s := q.Get("archived"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return f, tollgate.Invalid(map[string]string{"archived": "must be true or false"})
		}
		f.Archived = &b
	}
	return f, nil
}

// handlePlanCreate serves POST /plans.
func handlePlanCreate(log *slog.Logger, ops *plans.Ops) http.Handler {
	return handleCreate(log, decodeBody, func(r *http.Request, in plans.PlanInput) (plans.Plan, error) {
		return ops.Create(r.Context(), actorOf(r), in)
	}, func(p plans.Plan) string { return "/plans/" + strconv.FormatInt(p.ID, 10) })
}

// handlePlanID serves a request about the plan {planID}: 404 for an ID
// that is not a number, else do's result as JSON with 200 OK.
func handlePlanID[T any](log *slog.Logger, do func(r *http.Request, id int64) (T, error)) http.Handler {
	return handlePath(log, http.StatusOK, pathPlanID, do)
}

// handlePlanRead serves a read about the plan {planID} (404 for an ID
// that is not a number): read's result as JSON with 200 OK.
func handlePlanRead[T any](log *slog.Logger, read func(ctx context.Context, planID int64) (T, error)) http.Handler {
	return handlePlanID(log, func(r *http.Request, id int64) (T, error) {
		return read(r.Context(), id)
	})
}

// handlePlanPut serves a PUT to the plan {planID} (404 for an ID that is
// not a number): the body decoded into an In, then put's result as JSON
// with 200 OK.
func handlePlanPut[In, T any](log *slog.Logger,
	put func(ctx context.Context, by audit.Actor, id int64, in In) (T, error)) http.Handler {
	return handlePlanID(log, func(r *http.Request, id int64) (T, error) {
		var in In
		if err := decodeBody(r, &in); err != nil {
			var zero T
			return zero, err
		}
		return put(r.Context(), actorOf(r), id, in)
	})
}

// handlePlanArchive serves POST /plans/{planID}/archive (archived true) and
// POST /plans/{planID}/unarchive.
func handlePlanArchive(log *slog.Logger, ops *plans.Ops, archived bool) http.Handler {
	return handlePlanID(log, func(r *http.Request, id int64) (plans.Plan, error) {
		return ops.SetArchived(r.Context(), actorOf(r), id, archived)
	})
}

// handlePlanDelete serves DELETE /plans/{planID}: only a plan no tenant is
// or was ever on; otherwise 409 (archive it instead).
func handlePlanDelete(log *slog.Logger, ops *plans.Ops) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := pathPlanID(r)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		if err := ops.Delete(r.Context(), actorOf(r), id); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
