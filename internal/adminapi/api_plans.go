package adminapi

import (
	"log/slog"
	"net/http"
	"strconv"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/plans"
)

// handlePlanList serves GET /plans[?archived=true|false].
func handlePlanList(log *slog.Logger, ps *plans.Store) http.Handler {
	return handlePage(log, func(r *http.Request) (plans.Filter, error) {
		var f plans.Filter
		if s := r.URL.Query().Get("archived"); s != "" {
			b, err := strconv.ParseBool(s)
			if err != nil {
				return f, tollgate.Invalid(map[string]string{"archived": "must be true or false"})
			}
			f.Archived = &b
		}
		return f, nil
	}, ps.ListPage)
}

// handlePlanCreate serves POST /plans.
func handlePlanCreate(log *slog.Logger, ops *plans.Ops) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in plans.PlanInput
		if err := httpx.DecodeBody(r, MaxBody, &in); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		p, err := ops.Create(r.Context(), actorOf(r), in)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		w.Header().Set("Location", "/api/v1/plans/"+strconv.FormatInt(p.ID, 10))
		httpx.JSON(w, http.StatusCreated, p)
	})
}

// handlePlanGet serves GET /plans/{planID}.
func handlePlanGet(log *slog.Logger, ps *plans.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := pathPlanID(r)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		p, err := ps.Get(r.Context(), id)
		writeResult(w, r, log, p, err)
	})
}

// handlePlanUpdate serves PUT /plans/{planID}: the plan is replaced as a
// whole. Checks see the change within a second.
func handlePlanUpdate(log *slog.Logger, ops *plans.Ops) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := pathPlanID(r)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		var in plans.PlanInput
		if err := httpx.DecodeBody(r, MaxBody, &in); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		p, err := ops.Update(r.Context(), actorOf(r), id, in)
		writeResult(w, r, log, p, err)
	})
}

// handlePlanArchive serves POST /plans/{planID}/archive (archived true) and
// POST /plans/{planID}/unarchive.
func handlePlanArchive(log *slog.Logger, ops *plans.Ops, archived bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := pathPlanID(r)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		p, err := ops.SetArchived(r.Context(), actorOf(r), id, archived)
		writeResult(w, r, log, p, err)
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
