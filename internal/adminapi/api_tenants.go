package adminapi

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
)

// tenantIn reads tenant id on a change's transaction.
func tenantIn(ctx context.Context, id string) func(pgx.Tx) (tenants.Tenant, error) {
	return func(tx pgx.Tx) (tenants.Tenant, error) { return tenants.NewStore(tx).Get(ctx, id) }
}

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

type tenantCreateRequest struct {
	Name   string `json:"name"`
	PlanID int64  `json:"plan_id"`
}

func (t *tenantCreateRequest) Validate() error {
	f := map[string]string{}
	t.Name = strings.TrimSpace(t.Name)
	if t.Name == "" || len(t.Name) > 200 {
		f["name"] = "must be 1–200 characters"
	}
	if t.PlanID <= 0 {
		f["plan_id"] = "is required"
	}
	return tollgate.Invalid(f)
}

// handleTenantCreate serves POST /tenants. The plan must exist and not be
// archived.
func handleTenantCreate(log *slog.Logger, db *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req tenantCreateRequest
		if err := httpx.Decode(r, MaxBody, &req); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		t, err := audit.Create(r.Context(), db, actorOf(r), "tenant.create", tenants.TenantAudit,
			func(tx pgx.Tx) (tenants.Tenant, error) {
				return tenants.NewStore(tx).Create(r.Context(), req.Name, req.PlanID)
			})
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		w.Header().Set("Location", "/api/v1/tenants/"+t.ID)
		httpx.JSON(w, http.StatusCreated, t)
	})
}

// handleTenantGet serves GET /tenants/{tenantID}.
func handleTenantGet(log *slog.Logger, ts *tenants.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, err := ts.Get(r.Context(), chi.URLParam(r, "tenantID"))
		writeResult(w, r, log, t, err)
	})
}

// planChangeRequest is the body of POST /tenants/{tenantID}/plan.
type planChangeRequest struct {
	PlanID int64 `json:"plan_id"`
	// EffectiveAt is when the new plan starts counting for billing; now
	// when absent. It may lie in the past (after the latest change, and
	// after the latest month closed for billing), not in the future: the
	// limits change at once.
	EffectiveAt *time.Time `json:"effective_at"`

	now time.Time
}

// maxClockSkew is how far in the future effective_at may be, for clients
// whose clocks run a little ahead.
const maxClockSkew = time.Minute

func (p *planChangeRequest) Validate() error {
	f := map[string]string{}
	if p.PlanID <= 0 {
		f["plan_id"] = "is required"
	}
	if p.EffectiveAt != nil && p.EffectiveAt.After(p.now.Add(maxClockSkew)) {
		f["effective_at"] = "must not be in the future: a plan change takes effect at once"
	}
	return tollgate.Invalid(f)
}

// handleTenantSetPlan serves POST /tenants/{tenantID}/plan: the tenant
// moves to another plan, recorded in its plan history. 409 naming
// effective_at when it falls in or before a closed month.
func handleTenantSetPlan(log *slog.Logger, db *pgxpool.Pool, now func() time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := planChangeRequest{now: now()}
		if err := httpx.Decode(r, MaxBody, &req); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		effective := req.now
		if req.EffectiveAt != nil {
			effective = *req.EffectiveAt
		}
		id := chi.URLParam(r, "tenantID")
		// The entry holds the plan and when it took effect, not the record.
		describe := func(action string, before, after *tenants.Tenant) audit.Change {
			c := tenants.TenantAudit(action, before, after)
			c.Before = map[string]any{"plan_id": before.PlanID}
			c.After = map[string]any{"plan_id": after.PlanID, "effective_at": effective.UTC()}
			return c
		}
		after, err := audit.Update(r.Context(), db, actorOf(r), "tenant.plan_change", describe, tenantIn(r.Context(), id),
			func(tx pgx.Tx, _ tenants.Tenant) (tenants.Tenant, error) {
				ts := tenants.NewStore(tx)
				if err := ts.SetPlan(r.Context(), id, req.PlanID, effective); err != nil {
					return tenants.Tenant{}, err
				}
				return ts.Get(r.Context(), id)
			})
		writeResult(w, r, log, after, err)
	})
}

// handleTenantPlanHistory serves GET /tenants/{tenantID}/plan-changes,
// newest first.
func handleTenantPlanHistory(log *slog.Logger, ts *tenants.Store) http.Handler {
	return handleTenantPage(log, ts, ts.PlanHistory)
}

// handleTenantStatus serves POST /tenants/{tenantID}/suspend and /resume:
// a suspended tenant's checks are denied (tenant_suspended) within a
// second.
func handleTenantStatus(log *slog.Logger, db *pgxpool.Pool, status string) http.Handler {
	action := "tenant.resume"
	if status == tenants.StatusSuspended {
		action = "tenant.suspend"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "tenantID")
		after, err := audit.Update(r.Context(), db, actorOf(r), action, tenants.TenantAudit, tenantIn(r.Context(), id),
			func(tx pgx.Tx, _ tenants.Tenant) (tenants.Tenant, error) {
				return tenants.NewStore(tx).SetStatus(r.Context(), id, status)
			})
		writeResult(w, r, log, after, err)
	})
}

// overridesBody is the body of GET and PUT /tenants/{tenantID}/overrides.
type overridesBody struct {
	Rules []plans.Rule `json:"rules"`
}

func (o *overridesBody) Validate() error {
	if o.Rules == nil {
		return tollgate.Invalid(map[string]string{"rules": "is required (an empty list removes every override)"})
	}
	return tenants.ValidateOverrides(o.Rules)
}

// overridesAudit describes a change to tenant id's override rules for the
// audit log: a change to the tenant.
func overridesAudit(id string) func(action string, before, after *[]plans.Rule) audit.Change {
	return func(action string, before, after *[]plans.Rule) audit.Change {
		return audit.Change{Action: action, TargetType: "tenant", TargetID: id, TenantID: id,
			Before: overridesBody{Rules: *before}, After: overridesBody{Rules: *after}}
	}
}

// handleOverridesGet serves GET /tenants/{tenantID}/overrides.
func handleOverridesGet(log *slog.Logger, ts *tenants.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rules, err := ts.Overrides(r.Context(), chi.URLParam(r, "tenantID"))
		writeResult(w, r, log, overridesBody{Rules: rules}, err)
	})
}

// handleOverridesPut serves PUT /tenants/{tenantID}/overrides: the
// tenant's override rules are replaced as a whole. Each replaces the plan
// rule of its name for this tenant, or adds a rule.
func handleOverridesPut(log *slog.Logger, db *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req overridesBody
		if err := httpx.Decode(r, MaxBody, &req); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		id := chi.URLParam(r, "tenantID")
		after, err := audit.Update(r.Context(), db, actorOf(r), "tenant.overrides_set", overridesAudit(id),
			func(tx pgx.Tx) ([]plans.Rule, error) { return tenants.NewStore(tx).Overrides(r.Context(), id) },
			func(tx pgx.Tx, _ []plans.Rule) ([]plans.Rule, error) {
				return tenants.NewStore(tx).SetOverrides(r.Context(), id, req.Rules)
			})
		writeResult(w, r, log, overridesBody{Rules: after}, err)
	})
}
