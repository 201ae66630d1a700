package ui

import (
	"crypto/rand"
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
	// Message is a problem with the form as a whole.
	Message string
}

// creditsForm is the top-up form's values. Key is its idempotency key, a
// hidden field made when the page is: the form grants once however many
// times it is sent (a double click, a resubmission).
type creditsForm struct {
	Amount, ExpiresAt, Cause, Key string
}

// newFormKey returns a fresh idempotency key for a form.
func newFormKey() string { return "console-" + rand.Text() }

// Credits serves GET /tenants/{tenantID}/credits.
func (c *Console) Credits() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		c.creditsView(w, r, t, http.StatusOK, creditsForm{Cause: "top-up", Key: newFormKey()}, nil)
	})
}

func (c *Console) creditsView(w http.ResponseWriter, r *http.Request, t tenants.Tenant, status int, form creditsForm, errs map[string]string) {
	ctx := r.Context()
	p := creditsPage{Tenant: t, Form: form, Errors: errs,
		CanOperate: access.Tenant(session(r).User, t.ID, access.OperateTenant) == nil}
	if errs[credits.IdempotencyKeyHeader] != "" {
		// The form's key granted other values before (its page was kept
		// and changed), or was damaged: a new one lets it grant these.
		p.Form.Key = newFormKey()
		p.Message = "This form could not be matched to its earlier sending. Check the grants above; sending it again makes a new grant."
		if status == http.StatusConflict {
			p.Message = "This form already granted other units. Check the grants above; sending it again makes a new grant of these."
		}
	}
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

// CreditsGrant serves POST /tenants/{tenantID}/credits:
// credits.Ops.GrantOnce (a top-up) with the form's idempotency key,
// expiring at the form's time (UTC; never when empty). The form sent
// again with its key grants nothing and answers as the first time.
func (c *Console) CreditsGrant() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		fe := formErrors{}
		form := creditsForm{Amount: r.PostForm.Get("amount"), ExpiresAt: strings.TrimSpace(r.PostForm.Get("expires_at")),
			Cause: r.PostForm.Get("cause"), Key: r.PostForm.Get("idempotency_key")}
		in := credits.GrantInput{Amount: fe.int64(r.PostForm, "amount", 0), ExpiresAt: fe.dateTime(r.PostForm, "expires_at"),
			Cause: form.Cause}
		reshow := func(status int, errs map[string]string) { c.creditsView(w, r, t, status, form, errs) }
		g, ok := saveForm(c, w, r, fe, reshow, func() (credits.Grant, error) {
			g, _, err := c.cfg.Credits.GrantOnce(r.Context(), actor(r), t.ID, form.Key, in)
			return g, err
		})
		if !ok {
			return
		}
		redirect(w, r, "/tenants/"+url.PathEscape(t.ID)+"/credits",
			"Granted "+strconv.FormatInt(g.Amount, 10)+" units; every api process draws on them within a second.")
	})
}
