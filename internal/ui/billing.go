package ui

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/access"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
)

// billingPage is the data of a tenant's billing page: its billing
// account, invoices (with their push state and payment status) and
// credit top-ups, and for operators the forms that link an account and
// open a top-up.
type billingPage struct {
	Tenant     tenants.Tenant
	Invoicing  bool
	Mode       billing.InvoiceMode
	Account    *billing.Account
	Invoices   []billing.InvoiceRecord
	TopUps     []billing.TopUp
	CanOperate bool
	// CanTopUp: the user may buy the tenant's prepaid credits (operators
	// and its tenant_admins); UnitMinor is the plan's price of a unit
	// for its own admins (nil: they may not buy), in Currency.
	CanTopUp  bool
	UnitMinor *int64
	Currency  string
	Link      billingLinkForm
	TopUp     topUpForm
	Errors    map[string]string
}

type billingLinkForm struct{ CustomerID, Email string }

type topUpForm struct{ Units, AmountMinor string }

// Billing serves GET /tenants/{tenantID}/billing.
func (c *Console) Billing() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		c.billingView(w, r, t, http.StatusOK, billingLinkForm{}, topUpForm{}, nil)
	})
}

func (c *Console) billingView(w http.ResponseWriter, r *http.Request, t tenants.Tenant, status int,
	link billingLinkForm, topUp topUpForm, errs map[string]string) {
	ctx := r.Context()
	inv := c.cfg.Invoicing
	p := billingPage{Tenant: t, Invoicing: inv.Enabled(), Mode: inv.Mode(), Link: link, TopUp: topUp, Errors: errs,
		CanOperate: access.Tenant(session(r).User, t.ID, access.OperateTenant) == nil,
		CanTopUp:   access.Tenant(session(r).User, t.ID, access.ManageKeys) == nil}
	pl, err := c.plans.Get(ctx, t.PlanID)
	if err != nil {
		c.Error(w, r, err)
		return
	}
	pb, err := inv.PlanBilling(ctx, t.PlanID)
	if err != nil {
		c.Error(w, r, err)
		return
	}
	p.Currency, p.UnitMinor = pl.Currency, pb.TopUpUnitMinor
	a, err := inv.Account(ctx, t.ID)
	switch {
	case err == nil:
		p.Account = &a
	case tollgate.ErrorCode(err) != tollgate.ENOTFOUND:
		c.Error(w, r, err)
		return
	}
	if p.Invoices, err = inv.Invoices(ctx, t.ID, nil); err == nil {
		p.TopUps, err = inv.TopUps(ctx, t.ID)
	}
	if err != nil {
		c.Error(w, r, err)
		return
	}
	c.render(w, r, status, "billing", tenantNav(r, "overview"), p)
}

// BillingLink serves POST /tenants/{tenantID}/billing/account:
// billing.Invoicing.LinkAccount with the form's customer ID, or a new
// customer when it is empty.
func (c *Console) BillingLink() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		form := billingLinkForm{CustomerID: strings.TrimSpace(r.PostForm.Get("customer_id")), Email: r.PostForm.Get("email")}
		in := billing.LinkInput{CustomerID: form.CustomerID, Create: form.CustomerID == "", Email: form.Email}
		reshow := func(status int, errs map[string]string) { c.billingView(w, r, t, status, form, topUpForm{}, errs) }
		a, ok := saveForm(c, w, r, formErrors{}, reshow, func() (billing.Account, error) {
			return c.cfg.Invoicing.LinkAccount(r.Context(), actor(r), t.ID, in)
		})
		if !ok {
			return
		}
		redirect(w, r, "/tenants/"+url.PathEscape(t.ID)+"/billing", "Linked to customer "+a.CustomerID+".")
	})
}

// BillingTopUp serves POST /tenants/{tenantID}/billing/top-ups:
// billing.Invoicing.OpenTopUp, then on to the provider's checkout page,
// which returns to the billing page. Operators and the tenant's admins
// may; the admins pay the plan's price (their form has no price field).
func (c *Console) BillingTopUp() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		fe := formErrors{}
		form := topUpForm{Units: r.PostForm.Get("units"), AmountMinor: r.PostForm.Get("amount_minor")}
		back := consoleURL(r) + "/tenants/" + url.PathEscape(t.ID) + "/billing"
		in := billing.TopUpInput{Units: fe.int64(r.PostForm, "units", 0), AmountMinor: fe.int64(r.PostForm, "amount_minor", 0),
			SuccessURL: back + "?top_up=paid", CancelURL: back}
		reshow := func(status int, errs map[string]string) {
			c.billingView(w, r, t, status, billingLinkForm{}, form, errs)
		}
		u, ok := saveForm(c, w, r, fe, reshow, func() (billing.TopUp, error) {
			return c.cfg.Invoicing.OpenTopUp(r.Context(), actor(r), t.ID, in)
		})
		if !ok {
			return
		}
		http.Redirect(w, r, u.CheckoutURL, http.StatusSeeOther)
	})
}

// consoleURL is the console's own origin as the client reached it: https
// when httpx.HTTPS says so, which is also when the session is in the
// __Host- cookie, sent over HTTPS only. Behind a proxy that ends TLS
// (TOLLGATE_TRUSTED_PROXIES, X-Forwarded-Proto) the request came over
// plain HTTP, and a buyer sent back to http:// would arrive signed out.
func consoleURL(r *http.Request) string {
	scheme := "http"
	if httpx.HTTPS(r) {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// reconciliationPage is the data of a month's reconciliation page.
type reconciliationPage struct {
	Month       usage.Month
	Tenants     []billing.Reconciliation
	Differences int
}

// Reconciliation serves GET /months/{month}/reconciliation: every
// closed statement of the month beside its invoice, and their
// differences.
func (c *Console) Reconciliation() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, err := usage.ParseMonth(chi.URLParam(r, "month"))
		if err != nil {
			c.Error(w, r, tollgate.Errorf(tollgate.ENOTFOUND, "no month %s", chi.URLParam(r, "month")))
			return
		}
		list, err := c.cfg.Invoicing.Reconcile(r.Context(), m)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		p := reconciliationPage{Month: m, Tenants: list}
		for _, t := range list {
			if len(t.Differences) > 0 {
				p.Differences++
			}
		}
		c.render(w, r, http.StatusOK, "reconciliation", "usage", p)
	})
}
