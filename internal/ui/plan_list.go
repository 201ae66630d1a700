package ui

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
)

// planListPage is the data of the plans page.
type planListPage struct {
	Rows     []planRow
	Archived bool
}

type planRow struct {
	plans.Plan
	Tenants int64
}

// PlanList serves GET /plans[?archived=true]: the plans in use, or the
// archived ones.
func (c *Console) PlanList() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		archived := r.URL.Query().Get("archived") == "true"
		list, err := c.plans.List(r.Context())
		if err != nil {
			c.Error(w, r, err)
			return
		}
		counts, err := c.tenants.CountByPlan(r.Context())
		if err != nil {
			c.Error(w, r, err)
			return
		}
		p := planListPage{Archived: archived}
		for _, pl := range list {
			if (pl.ArchivedAt != nil) == archived {
				p.Rows = append(p.Rows, planRow{Plan: pl, Tenants: counts[pl.ID]})
			}
		}
		c.render(w, r, http.StatusOK, "plan_list", "plans", p)
	})
}

// planViewPage is the data of a plan's page.
type planViewPage struct {
	Plan    plans.Plan
	Tenants int64
	Rules   []ruleView
	// Quota is the rule that the plan's quota mode adds, if any.
	Quota *ruleView
	// Thresholds are the plan's default thresholds, and Settings its
	// quota settings (spend caps).
	Thresholds []thresholdView
	Settings   quota.PlanSettings
	// Billing is the plan's billing settings (dunning grace, self-serve
	// top-up price); BillingForm the form that sets them, as typed.
	Billing     billing.PlanBilling
	BillingForm planBillingForm
	GraceLabel  string
}

// planBillingForm is the plan page's billing settings form.
type planBillingForm struct {
	DunningGrace, TopUpUnitMinor string
	Errors                       map[string]string
}

// ruleView is a rule with its preview.
type ruleView struct {
	plans.Rule
	Preview preview
	Chart   chartHTML
}

func viewRule(r plans.Rule) ruleView {
	p := simulate(r)
	return ruleView{Rule: r, Preview: p, Chart: burstChart(r, p)}
}

// pathPlanID returns the {planID} path parameter.
func pathPlanID(r *http.Request) (int64, error) {
	return plans.ParseID(chi.URLParam(r, "planID"))
}

// planOf returns the plan {planID} names.
func (c *Console) planOf(r *http.Request) (plans.Plan, error) {
	id, err := pathPlanID(r)
	if err != nil {
		return plans.Plan{}, err
	}
	return c.plans.Get(r.Context(), id)
}

// PlanView serves GET /plans/{planID}: pricing, and each rule with a
// preview of what it admits.
func (c *Console) PlanView() http.Handler {
	return loadedHandler(c, c.planOf, func(w http.ResponseWriter, r *http.Request, pl plans.Plan) {
		c.planView(w, r, pl, http.StatusOK, nil)
	})
}

// planView shows plan pl; form, when not nil, is its billing settings
// form as typed, with its problems.
func (c *Console) planView(w http.ResponseWriter, r *http.Request, pl plans.Plan, status int, form *planBillingForm) {
	counts, err := c.tenants.CountByPlan(r.Context())
	if err != nil {
		c.Error(w, r, err)
		return
	}
	p := planViewPage{Plan: pl, Tenants: counts[pl.ID]}
	for _, rule := range pl.Rules {
		p.Rules = append(p.Rules, viewRule(rule))
	}
	if q, ok := pl.QuotaRule(); ok {
		v := viewRule(q)
		p.Quota = &v
	}
	if p.Settings, err = c.quota.PlanSettings(r.Context(), pl.ID); err != nil {
		c.Error(w, r, err)
		return
	}
	for _, th := range p.Settings.Thresholds {
		at, ok := th.At(pl.IncludedUnits)
		p.Thresholds = append(p.Thresholds, thresholdView{Label: thresholdLabel(th), At: at, Reached: ok})
	}
	if p.Billing, err = c.cfg.Invoicing.PlanBilling(r.Context(), pl.ID); err != nil {
		c.Error(w, r, err)
		return
	}
	p.BillingForm = planBillingForm{DunningGrace: billing.FormatDunningGrace(p.Billing.DunningGraceS)}
	p.GraceLabel = graceLabel(p.Billing)
	if u := p.Billing.TopUpUnitMinor; u != nil {
		p.BillingForm.TopUpUnitMinor = strconv.FormatInt(*u, 10)
	}
	if form != nil {
		p.BillingForm = *form
	}
	c.render(w, r, status, "plan_view", "plans", p)
}

// PlanBillingSave serves POST /plans/{planID}/billing: the plan's
// dunning grace and self-serve top-up price, through
// billing.Invoicing.SetPlanBilling (plan.billing), the operation of the
// API's PUT /api/v1/plans/{planID}/billing and of `admin plans billing`.
func (c *Console) PlanBillingSave() http.Handler {
	return loadedHandler(c, c.planOf, func(w http.ResponseWriter, r *http.Request, pl plans.Plan) {
		form := planBillingForm{DunningGrace: strings.TrimSpace(r.PostForm.Get("dunning_grace")),
			TopUpUnitMinor: strings.TrimSpace(r.PostForm.Get("top_up_unit_minor"))}
		fe := formErrors{}
		grace, err := billing.ParseDunningGrace(form.DunningGrace)
		if err != nil {
			fe["dunning_grace_s"] = err.Error()
		}
		in := billing.PlanBillingInput{DunningGraceS: grace, TopUpUnitMinor: fe.optInt64(r.PostForm, "top_up_unit_minor")}
		reshow := func(status int, errs map[string]string) {
			form.Errors = errs
			c.planView(w, r, pl, status, &form)
		}
		if _, ok := saveForm(c, w, r, fe, reshow, func() (billing.PlanBilling, error) {
			return c.cfg.Invoicing.SetPlanBilling(r.Context(), actor(r), pl.ID, in)
		}); !ok {
			return
		}
		redirect(w, r, "/plans/"+strconv.FormatInt(pl.ID, 10), "Billing settings of plan "+pl.Name+" saved.")
	})
}

// PlanArchive serves POST /plans/{planID}/archive (archived true) and
// /unarchive: an archived plan keeps its tenants and takes no new ones.
func (c *Console) PlanArchive(archived bool) http.Handler {
	done := "Plan restored: tenants can be put on it again."
	if archived {
		done = "Plan archived: its tenants keep it; no new tenant can be put on it."
	}
	return loadedHandler(c, pathPlanID, func(w http.ResponseWriter, r *http.Request, id int64) {
		path := "/plans/" + strconv.FormatInt(id, 10)
		if archived && !confirmed(r) {
			c.askConfirmation(w, r, "plans", confirmPage{Heading: "Archive this plan?",
				Message: "Tenants on it keep it, but no tenant can be put on it until it is restored.",
				Button:  "Archive plan", Back: path})
			return
		}
		if _, err := c.cfg.Plans.SetArchived(r.Context(), actor(r), id, archived); err != nil {
			c.Error(w, r, err)
			return
		}
		redirect(w, r, path, done)
	})
}

// graceLabel says how long dunning waits for a plan's tenants.
func graceLabel(b billing.PlanBilling) string {
	eff := billing.FormatDunningGrace(&b.EffectiveDunningGraceS)
	switch {
	case b.DunningGraceS == nil && b.EffectiveDunningGraceS == 0:
		return "the server's default (off: never suspends)"
	case b.DunningGraceS == nil:
		return "the server's default (" + eff + ")"
	case b.EffectiveDunningGraceS == 0:
		return "off: never suspends"
	}
	return eff
}
