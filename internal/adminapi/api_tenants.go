package adminapi

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/tenants"
)

// handleTenantList serves GET /tenants[?q=…&status=…&plan_id=…]: q matches
// a tenant's ID or part of its name.
func handleTenantList(log *slog.Logger, ts *tenants.Store) http.Handler {
	return handlePage(log, func(r *http.Request) (tenants.Filter, error) {
		q := r.URL.Query()
		f := tenants.Filter{Query: strings.TrimSpace(q.Get("q")), Status: q.Get("status")}
		problems := map[string]string{}
		if f.Status != "" && f.Status != tenants.StatusActive && f.Status != tenants.StatusSuspended {
			problems["status"] = "must be active or suspended"
		}
		if s := q.Get("plan_id"); s != "" {
			var err error
			if f.PlanID, err = strconv.ParseInt(s, 10, 64); err != nil || f.PlanID <= 0 {
				problems["plan_id"] = "must be a plan ID"
			}
		}
		if len(f.Query) > 200 {
			problems["q"] = "must be at most 200 characters"
		}
		return f, tollgate.Invalid(problems)
	}, ts.ListPage)
}

// handleTenantCreate serves POST /tenants. The plan must exist and not be
// archived.
func handleTenantCreate(log *slog.Logger, ops *tenants.Ops) http.Handler {
	return handleCreate(log, decodeBody, func(r *http.Request, in tenants.CreateTenantInput) (tenants.Tenant, error) {
		return ops.Create(r.Context(), actorOf(r), in)
	}, func(t tenants.Tenant) string { return "/tenants/" + t.ID })
}

// handleTenantRead serves a read about the tenant {tenantID} (the route
// checked access to it): read's result as JSON with 200 OK.
func handleTenantRead[T any](log *slog.Logger, read func(ctx context.Context, tenantID string) (T, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := read(r.Context(), chi.URLParam(r, "tenantID"))
		writeResult(w, r, log, v, err)
	})
}

// handleTenantGet serves GET /tenants/{tenantID}.
func handleTenantGet(log *slog.Logger, ts *tenants.Store) http.Handler {
	return handleTenantRead(log, ts.Get)
}

// handleTenantSetPlan serves POST /tenants/{tenantID}/plan: the tenant
// moves to another plan, recorded in its plan history. 409 naming
// effective_at when it falls in or before a closed month.
func handleTenantSetPlan(log *slog.Logger, ops *tenants.Ops) http.Handler {
	return handleChange(log, func(r *http.Request, in tenants.SetPlanInput) (tenants.Tenant, error) {
		return ops.SetPlan(r.Context(), actorOf(r), chi.URLParam(r, "tenantID"), in)
	})
}

// handleTenantPlanHistory serves GET /tenants/{tenantID}/plan-changes,
// newest first.
func handleTenantPlanHistory(log *slog.Logger, ts *tenants.Store) http.Handler {
	return handleTenantPage(log, ts, ts.PlanHistory)
}

// handleTenantStatus serves POST /tenants/{tenantID}/suspend (suspend
// true) and /resume: a suspended tenant's checks are denied
// (tenant_suspended) within a second.
func handleTenantStatus(log *slog.Logger, ops *tenants.Ops, suspend bool) http.Handler {
	change := ops.Resume
	if suspend {
		change = ops.Suspend
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, err := change(r.Context(), actorOf(r), chi.URLParam(r, "tenantID"))
		writeResult(w, r, log, t, err)
	})
}

// handleOverridesGet serves GET /tenants/{tenantID}/overrides.
func handleOverridesGet(log *slog.Logger, ts *tenants.Store) http.Handler {
	return handleTenantRead(log, func(ctx context.Context, tenantID string) (tenants.Overrides, error) {
		rules, err := ts.Overrides(ctx, tenantID)
		return tenants.Overrides{Rules: rules}, err
	})
}

// handleOverridesPut serves PUT /tenants/{tenantID}/overrides: the
// tenant's override rules are replaced as a whole. Each replaces the plan
// rule of its name for this tenant, or adds a rule.
func handleOverridesPut(log *slog.Logger, ops *tenants.Ops) http.Handler {
	return handleChange(log, func(r *http.Request, in tenants.Overrides) (tenants.Overrides, error) {
		return ops.SetOverrides(r.Context(), actorOf(r), chi.URLParam(r, "tenantID"), in)
	})
}
