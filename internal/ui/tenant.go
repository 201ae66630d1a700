package ui

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/access"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
)

// tenantPage is the data of a tenant's page: the operator's detail view,
// and the tenant users' portal home.
type tenantPage struct {
	Tenant    tenants.Tenant
	Plan      plans.Plan
	Plans     []plans.Plan // plans it may move to
	History   []tenants.PlanChange
	Overrides []plans.Rule
	Keys      tenants.KeyCount
	Month     usage.Month
	// Consumption is the month's units against the included ones.
	Consumption consumption
	// Usage is the last 30 days, by day.
	Usage chartHTML
	// What the user may do here.
	CanOperate, CanManageKeys bool
	Form                      planChangeForm
	Errors                    map[string]string
}

type planChangeForm struct {
	PlanID      int64
	EffectiveAt string
}

// consumption is the month's units against the included ones, with the
// projection to the month's end.
type consumption struct {
	billing.Projection
	Chart chartHTML
}

// tenantOf loads the path's tenant (the route has checked access).
func (c *Console) tenantOf(r *http.Request) (tenants.Tenant, error) {
	return c.tenants.Get(r.Context(), chi.URLParam(r, "tenantID"))
}

// tenantHandler serves a request about the tenant {tenantID}: the error
// page when it cannot be read, else serve with it.
func (c *Console) tenantHandler(serve func(w http.ResponseWriter, r *http.Request, t tenants.Tenant)) http.Handler {
	return loadedHandler(c, c.tenantOf, serve)
}

// loadedHandler serves a request with what load reads for it (the
// tenant, plan or page the request is about): the error page when load
// fails, else serve with it.
func loadedHandler[T any](c *Console, load func(r *http.Request) (T, error), serve func(w http.ResponseWriter, r *http.Request, v T)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := load(r)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		serve(w, r, v)
	})
}

// pathNamed loads what the path parameter param names, with get: for
// loadedHandler.
func pathNamed[T any](param string, get func(ctx context.Context, id string) (T, error)) func(r *http.Request) (T, error) {
	return func(r *http.Request) (T, error) { return get(r.Context(), chi.URLParam(r, param)) }
}

// TenantView serves GET /tenants/{tenantID}.
func (c *Console) TenantView() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		c.tenantView(w, r, t, http.StatusOK, planChangeForm{EffectiveAt: c.now().UTC().Format("2006-01-02T15:04")}, nil)
	})
}

func (c *Console) tenantView(w http.ResponseWriter, r *http.Request, t tenants.Tenant, status int, form planChangeForm, errs map[string]string) {
	ctx := r.Context()
	u := session(r).User
	now := c.now()
	p := tenantPage{Tenant: t, Form: form, Errors: errs, Month: usage.MonthOf(now),
		CanOperate:    access.Tenant(u, t.ID, access.OperateTenant) == nil,
		CanManageKeys: access.Tenant(u, t.ID, access.ManageKeys) == nil}
	var err error
	if p.Plan, err = c.plans.Get(ctx, t.PlanID); err != nil {
		c.Error(w, r, err)
		return
	}
	if p.CanOperate {
		_, list, err := c.planNames(r)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		for _, pl := range list {
			if pl.ArchivedAt == nil && pl.ID != t.PlanID && pl.Name != plans.AnonymousPlan {
				p.Plans = append(p.Plans, pl)
			}
		}
	}
	hist, err := c.tenants.PlanHistory(ctx, t.ID, page.First(10))
	if err != nil {
		c.Error(w, r, err)
		return
	}
	p.History = hist.Items
	if p.Overrides, err = c.tenants.Overrides(ctx, t.ID); err != nil {
		c.Error(w, r, err)
		return
	}
	counts, err := c.tenants.KeyCounts(ctx, []string{t.ID}, now)
	if err != nil {
		c.Error(w, r, err)
		return
	}
	p.Keys = counts[t.ID]
	if p.Consumption, err = c.consumption(r, t, p.Plan, p.Month); err != nil {
		c.Error(w, r, err)
		return
	}
	day := usage.GranularityDay
	rng := usage.Range{From: now.UTC().Truncate(24*time.Hour).AddDate(0, 0, -29), To: now}
	points, err := c.usage.Series(ctx, t.ID, day, rng)
	if err != nil {
		c.Error(w, r, err)
		return
	}
	p.Usage = usageChart("tenant-30d", "Checks per day, last 30 days", points, day, wide)
	c.render(w, r, status, "tenant", tenantNav(r, "overview"), p)
}

// consumption computes the tenant's month so far against its included
// units, and where it is heading: from the month's statement, the one
// its statement page shows, priced on the plans of the month (p, the
// tenant's current plan, only names the currency of a month it was on
// no plan).
func (c *Console) consumption(r *http.Request, t tenants.Tenant, p plans.Plan, m usage.Month) (consumption, error) {
	st, err := c.billing.Statement(r.Context(), t.ID, m)
	if err != nil {
		return consumption{}, err
	}
	byID, _, err := c.planNames(r)
	if err != nil {
		return consumption{}, err
	}
	pr := billing.Project(st, byID, c.now())
	if pr.Currency == "" {
		pr.Currency = p.Currency
	}
	return consumption{Projection: pr, Chart: consumptionChart(pr)}, nil
}

// TenantSetPlan serves POST /tenants/{tenantID}/plan: tenants.Ops.SetPlan,
// effective at the form's time (UTC; now when empty).
func (c *Console) TenantSetPlan() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		fe := formErrors{}
		form := planChangeForm{PlanID: fe.int64(r.PostForm, "plan_id", 0), EffectiveAt: strings.TrimSpace(r.PostForm.Get("effective_at"))}
		in := tenants.SetPlanInput{PlanID: form.PlanID, EffectiveAt: fe.dateTime(r.PostForm, "effective_at")}
		reshow := func(status int, errs map[string]string) { c.tenantView(w, r, t, status, form, errs) }
		if _, ok := saveForm(c, w, r, fe, reshow, func() (tenants.Tenant, error) {
			return c.cfg.Tenants.SetPlan(r.Context(), actor(r), t.ID, in)
		}); !ok {
			return
		}
		redirect(w, r, "/tenants/"+url.PathEscape(t.ID), "Plan changed.")
	})
}

// TenantStatus serves POST /tenants/{tenantID}/suspend and /resume, after
// confirmation: a suspended tenant's checks are denied within a second.
func (c *Console) TenantStatus(suspend bool) http.Handler {
	verb, done, change := "resume", "Tenant resumed: its checks are allowed again.", c.cfg.Tenants.Resume
	if suspend {
		verb, done, change = "suspend", "Tenant suspended: its checks are denied.", c.cfg.Tenants.Suspend
	}
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		back := "/tenants/" + url.PathEscape(t.ID)
		msg := "Checks with " + t.Name + "'s keys will be allowed again within a second."
		if suspend {
			msg = "Every check with " + t.Name + "'s keys will be denied (tenant_suspended) within a second, until you resume it."
		}
		c.confirmThen(w, r, "tenants", confirmPage{Heading: strings.ToUpper(verb[:1]) + verb[1:] + " " + t.Name + "?",
			Message: msg, Button: strings.ToUpper(verb[:1]) + verb[1:], Back: back}, done, func() error {
			_, err := change(r.Context(), actor(r), t.ID)
			return err
		})
	})
}
