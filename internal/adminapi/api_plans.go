package adminapi

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/plans"
)

// planRequest is the body of POST /plans and PUT /plans/{planID}: the whole
// plan. Rules' ids are read-only and ignored.
type planRequest struct {
	Name             string            `json:"name"`
	DisplayName      string            `json:"display_name"`
	Currency         string            `json:"currency"`
	BaseFeeMinor     int64             `json:"base_fee_minor"`
	IncludedUnits    int64             `json:"included_units"`
	OverageUnitMinor int64             `json:"overage_unit_minor"`
	QuotaMode        plans.QuotaMode   `json:"quota_mode"`
	Tiers            []plans.PriceTier `json:"tiers"`
	Rules            []plans.Rule      `json:"rules"`
}

func (p *planRequest) plan() plans.Plan {
	return plans.Plan{Name: p.Name, DisplayName: p.DisplayName, Currency: p.Currency, BaseFeeMinor: p.BaseFeeMinor,
		IncludedUnits: p.IncludedUnits, OverageUnitMinor: p.OverageUnitMinor, QuotaMode: p.QuotaMode,
		Tiers: p.Tiers, Rules: p.Rules}
}

// Validate checks every field: known algorithm, period > 0, burst ≥ 1,
// resource pattern syntax, non-negative integer money.
func (p *planRequest) Validate() error {
	return p.plan().WithDefaults().Validate()
}

// planIn reads plan id on a change's transaction.
func planIn(ctx context.Context, id int64) func(pgx.Tx) (plans.Plan, error) {
	return func(tx pgx.Tx) (plans.Plan, error) { return plans.NewStore(tx).Get(ctx, id) }
}

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
func handlePlanCreate(log *slog.Logger, db *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req planRequest
		if err := httpx.Decode(r, MaxBody, &req); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		p, err := audit.Create(r.Context(), db, actorOf(r), "plan.create", plans.PlanAudit,
			func(tx pgx.Tx) (plans.Plan, error) { return plans.NewStore(tx).Create(r.Context(), req.plan()) })
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
func handlePlanUpdate(log *slog.Logger, db *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := pathPlanID(r)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		var req planRequest
		if err := httpx.Decode(r, MaxBody, &req); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		after, err := audit.Update(r.Context(), db, actorOf(r), "plan.update", plans.PlanAudit, planIn(r.Context(), id),
			func(tx pgx.Tx, _ plans.Plan) (plans.Plan, error) {
				return plans.NewStore(tx).Update(r.Context(), id, req.plan())
			})
		writeResult(w, r, log, after, err)
	})
}

// handlePlanArchive serves POST /plans/{planID}/archive (archived true) and
// POST /plans/{planID}/unarchive.
func handlePlanArchive(log *slog.Logger, db *pgxpool.Pool, archived bool) http.Handler {
	action := "plan.unarchive"
	if archived {
		action = "plan.archive"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := pathPlanID(r)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		after, err := audit.Update(r.Context(), db, actorOf(r), action, plans.PlanAudit, planIn(r.Context(), id),
			func(tx pgx.Tx, _ plans.Plan) (plans.Plan, error) {
				return plans.NewStore(tx).SetArchived(r.Context(), id, archived)
			})
		writeResult(w, r, log, after, err)
	})
}

// handlePlanDelete serves DELETE /plans/{planID}: only a plan no tenant is
// or was ever on; otherwise 409 (archive it instead).
func handlePlanDelete(log *slog.Logger, db *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := pathPlanID(r)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		err = audit.Delete(r.Context(), db, actorOf(r), "plan.delete", plans.PlanAudit, planIn(r.Context(), id),
			func(tx pgx.Tx, _ plans.Plan) error { return plans.NewStore(tx).Delete(r.Context(), id) })
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
