package ui

import (
	"net/http"
	"net/url"

	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
)

// overridesPage is the data of a tenant's rule overrides form: rules that
// replace the plan's rule of the same name for this tenant, or add one.
type overridesPage struct {
	Tenant  tenants.Tenant
	Plan    plans.Plan
	Rules   []ruleForm
	Errors  map[string]string
	Message string
	Options formOptions
}

// OverridesEdit serves GET /tenants/{tenantID}/overrides.
func (c *Console) OverridesEdit() http.Handler {
	return loadedHandler(c, c.overridesPage, func(w http.ResponseWriter, r *http.Request, p overridesPage) {
		rules, err := c.tenants.Overrides(r.Context(), p.Tenant.ID)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		p.Rules = append(rulesForm(rules), blankRule())
		c.render(w, r, http.StatusOK, "overrides", "tenants", p)
	})
}

func (c *Console) overridesPage(r *http.Request) (overridesPage, error) {
	t, err := c.tenantOf(r)
	if err != nil {
		return overridesPage{}, err
	}
	pl, err := c.plans.Get(r.Context(), t.PlanID)
	return overridesPage{Tenant: t, Plan: pl, Options: options, Errors: map[string]string{}}, err
}

// OverridesSave serves POST /tenants/{tenantID}/overrides:
// tenants.Ops.SetOverrides replaces the tenant's overrides as a whole (rows left blank or marked
// for removal are left out). With action=add-rule the form comes back one
// row longer, unsaved.
func (c *Console) OverridesSave() http.Handler {
	return loadedHandler(c, c.overridesPage, func(w http.ResponseWriter, r *http.Request, p overridesPage) {
		fe := formErrors{}
		var rules []plans.Rule
		p.Rules, rules = readRules(r.PostForm, fe)
		if r.PostForm.Get("action") == "add-rule" {
			p.Rules = append(p.Rules, blankRule())
			c.render(w, r, http.StatusOK, "overrides", "tenants", p)
			return
		}
		reshow := func(status int, errs map[string]string, msg string) {
			p.Errors, p.Message = errs, msg
			c.render(w, r, status, "overrides", "tenants", p)
		}
		if _, ok := saveRules(c, w, r, fe, nil, reshow, func() (tenants.Overrides, error) {
			return c.cfg.Tenants.SetOverrides(r.Context(), actor(r), p.Tenant.ID, tenants.Overrides{Rules: rules})
		}); !ok {
			return
		}
		redirect(w, r, "/tenants/"+url.PathEscape(p.Tenant.ID), "Overrides saved: checks use them within a second.")
	})
}
