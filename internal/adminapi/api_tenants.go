package adminapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/tenants"
)

// tenantFilter reads the query of GET /tenants: q (a tenant's ID or part
// of its name), status and plan_id.
func tenantFilter(q url.Values) (tenants.Filter, error) {
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

// tenantChange is change made to the tenant {tenantID} by the request's
// actor, with the request's body in.
func tenantChange[In, Out any](change func(ctx context.Context, by audit.Actor, tenantID string, in In) (Out, error)) func(r *http.Request, in In) (Out, error) {
	return func(r *http.Request, in In) (Out, error) {
		return change(r.Context(), actorOf(r), chi.URLParam(r, "tenantID"), in)
	}
}

// handleTenantChange serves a change to the tenant {tenantID} (the route
// checked access to it): the body decoded into an In, then change's
// result as JSON with 200 OK.
func handleTenantChange[In, Out any](log *slog.Logger,
	change func(ctx context.Context, by audit.Actor, tenantID string, in In) (Out, error)) http.Handler {
	return handleChange(log, tenantChange(change))
}

// handleTenantPage serves one page of a list below /tenants/{tenantID}:
// 404 for a tenant that does not exist, else a page of list.
func handleTenantPage[T any](log *slog.Logger, ts *tenants.Store,
	list func(ctx context.Context, tenantID string, pr page.Request) (page.Page[T], error)) http.Handler {
	return handlePage(log, func(r *http.Request) (string, error) {
		id := chi.URLParam(r, "tenantID")
		_, err := ts.Get(r.Context(), id)
		return id, err
	}, list)
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
