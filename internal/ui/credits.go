package ui

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/internal/access"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/tenants"
)

// creditsPage is the data of a tenant's credits page: its balance, grants
// and ledger, and for operators the top-up form.
type creditsPage struct {
	Tenant     tenants.Tenant
	Balance    credits.Balance
	Ledger     []credits.Entry
	CanOperate bool
	Form       creditsForm
	Errors     map[string]string
}

type creditsForm struct {
	Amount, ExpiresAt, Cause string
}

// Credits serves GET /tenants/{tenantID}/credits.
func (c *Console) Credits() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		c.creditsView(w, r, t, http.StatusOK, creditsForm{Cause: "top-up"}, nil)
	})
}

func (c *Console) creditsView(w http.ResponseWriter, r *http.Request, t tenants.Tenant, status int, form creditsForm, errs map[string]string) {
	ctx := r.Context()
	p := creditsPage{Tenant: t, Form: form, Errors: errs,
		CanOperate: access.Tenant(session(r).User, t.ID, access.OperateTenant) == nil}
	cs := credits.NewStore(c.cfg.DB)
	var err error
	if p.Balance, err = cs.Balance(ctx, t.ID); err != nil {
		c.Error(w, r, err)
		return
	}
	ledger, err := cs.Ledger(ctx, t.ID, credits.LedgerFilter{}, page.First(page.MaxLimit))
	if err != nil {
		c.Error(w, r, err)
		return
	}
	p.Ledger = ledger.Items
	c.render(w, r, status, "credits", tenantNav(r, "overview"), p)
}

// CreditsGrant serves POST /tenants/{tenantID}/credits: credits.Ops.Grant
// (a top-up), expiring at the form's time (UTC; never when empty).
func (c *Console) CreditsGrant() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		fe := formErrors{}
		form := creditsForm{Amount: r.PostForm.Get("amount"), ExpiresAt: strings.TrimSpace(r.PostForm.Get("expires_at")),
			Cause: r.PostForm.Get("cause")}
		in := credits.GrantInput{Amount: fe.int64(r.PostForm, "amount", 0), ExpiresAt: fe.dateTime(r.PostForm, "expires_at"),
			Cause: form.Cause}
		reshow := func(status int, errs map[string]string) { c.creditsView(w, r, t, status, form, errs) }
		g, ok := saveForm(c, w, r, fe, reshow, func() (credits.Grant, error) {
			return c.cfg.Credits.Grant(r.Context(), actor(r), t.ID, in)
		})
		if !ok {
			return
		}
		redirect(w, r, "/tenants/"+url.PathEscape(t.ID)+"/credits",
			"Granted "+strconv.FormatInt(g.Amount, 10)+" units; every api process draws on them within a second.")
	})
}
