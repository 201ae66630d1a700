package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/internal/access"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
)

// alertsPage is the data of a tenant's alerts page: the thresholds it is
// told of, its spend cap, its own webhook endpoints and its recent
// events.
type alertsPage struct {
	Tenant tenants.Tenant
	Plan   plans.Plan
	Month  usage.Month
	// UsedUnits are the month's units so far.
	UsedUnits int64
	// Thresholds are those in force: the tenant's own (OwnThresholds) or
	// else the plan's.
	Thresholds    []thresholdView
	OwnThresholds bool
	Cap           capView
	// CanManage: the user may change the settings and the endpoints
	// (tenant admins and operators).
	CanManage     bool
	ThresholdRows []thresholdRow
	Kinds         []thresholdKind
	// ThresholdsOpen: the thresholds form has errors to show.
	ThresholdsOpen bool
	CapForm        string
	Errors         map[string]string
	Endpoints      endpointsView
	Events         []eventRow
	MoreEvents     bool
}

// thresholdView is a threshold in force, and the month's count at which
// it is crossed.
type thresholdView struct {
	Label   string
	At      int64
	Reached bool // can be crossed on the plan
	Crossed bool // this month's units have reached it
}

// capView is the spend cap in force and where it comes from.
type capView struct {
	InForce, Max, Default, Own *int64
	// Source says where the cap in force comes from.
	Source string
	// Binds: the plan's quota mode is overage, where a cap holds.
	Binds    bool
	Currency string
}

// thresholdRow is one row of the thresholds form, as typed.
type thresholdRow struct {
	Kind, Value string
}

// thresholdKind is a kind of threshold: its name in the form, and what
// its number counts.
type thresholdKind struct{ Name, Label string }

// thresholdKinds are the kinds of threshold, as the form names them.
var thresholdKinds = []thresholdKind{
	{"percent", "% of the included units"},
	{"units", "units this month"},
	{"remaining", "included units left"},
}

// alertForms are the page's forms as typed, and their errors.
type alertForms struct {
	Thresholds []thresholdRow
	Cap        *string
	Endpoint   endpointForm
	Errors     map[string]string
}

// thresholdLabel names t for people.
func thresholdLabel(t quota.Threshold) string {
	switch {
	case t.Percent > 0:
		return strconv.FormatInt(t.Percent, 10) + " % of the included units"
	case t.Units > 0:
		return formatInt(t.Units) + " units"
	default:
		return formatInt(t.Remaining) + " included units left"
	}
}

// rowOf is t as a row of the form.
func rowOf(t quota.Threshold) thresholdRow {
	switch {
	case t.Percent > 0:
		return thresholdRow{"percent", strconv.FormatInt(t.Percent, 10)}
	case t.Units > 0:
		return thresholdRow{"units", strconv.FormatInt(t.Units, 10)}
	default:
		return thresholdRow{"remaining", strconv.FormatInt(t.Remaining, 10)}
	}
}

// blankThresholdRows is how many empty rows the form offers for new
// thresholds.
const blankThresholdRows = 3

// thresholdRows are the rows of a thresholds form showing ts, and
// blankThresholdRows empty ones.
func thresholdRows(ts []quota.Threshold) []thresholdRow {
	var rows []thresholdRow
	for _, th := range ts {
		rows = append(rows, rowOf(th))
	}
	for range blankThresholdRows {
		rows = append(rows, thresholdRow{Kind: "percent"})
	}
	return rows
}

// readThresholds reads the rows of a posted thresholds form
// ("thresholds[i].value" and ".kind"): the rows to show again (empty
// ones left out) and the thresholds they make, one per row shown, in the
// same order — so that thresholds[k] of a field error is row k. Values
// that are no number, and rows of no kind, are named in fe. The list is
// empty, not nil, when every row is.
func readThresholds(pf url.Values, fe formErrors) ([]thresholdRow, []quota.Threshold) {
	var rows []thresholdRow
	list := []quota.Threshold{}
	for i := 0; i < 100; i++ {
		k := fmt.Sprintf("thresholds[%d].", i)
		if _, ok := pf[k+"kind"]; !ok {
			break
		}
		row := thresholdRow{Kind: pf.Get(k + "kind"), Value: strings.TrimSpace(pf.Get(k + "value"))}
		if row.Value == "" {
			continue
		}
		field := fmt.Sprintf("thresholds[%d]", len(rows))
		rows = append(rows, row)
		n := fe.number(row.Value, field, 0)
		var th quota.Threshold
		switch row.Kind {
		case "percent":
			th.Percent = n
		case "units":
			th.Units = n
		case "remaining":
			th.Remaining = n
		default:
			fe[field] = "choose a kind of threshold"
		}
		list = append(list, th)
	}
	return rows, list
}

// onThresholdRows adds to errs, for each problem of a threshold's own
// field ("thresholds[0].percent"), the same problem under its row
// ("thresholds[0]"), where the form shows it; it returns errs.
func onThresholdRows(errs map[string]string) map[string]string {
	for k, v := range errs {
		if row, _, ok := strings.Cut(k, "]."); ok && strings.HasPrefix(row, "thresholds[") {
			errs[row+"]"] = v
		}
	}
	return errs
}

// Alerts serves GET /tenants/{tenantID}/alerts.
func (c *Console) Alerts() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		c.alertsView(w, r, t, http.StatusOK, alertForms{})
	})
}

func (c *Console) alertsView(w http.ResponseWriter, r *http.Request, t tenants.Tenant, status int, forms alertForms) {
	ctx := r.Context()
	u := session(r).User
	p := alertsPage{Tenant: t, Month: usage.MonthOf(c.now()), Errors: forms.Errors, Kinds: thresholdKinds,
		CanManage: access.Tenant(u, t.ID, access.ManageKeys) == nil}
	if p.Errors == nil {
		p.Errors = map[string]string{}
	}
	for k := range p.Errors {
		p.ThresholdsOpen = p.ThresholdsOpen || strings.HasPrefix(k, "thresholds")
	}
	var err error
	if p.Plan, err = c.plans.Get(ctx, t.PlanID); err != nil {
		c.Error(w, r, err)
		return
	}
	ps, err := c.quota.PlanSettings(ctx, t.PlanID)
	if err != nil {
		c.Error(w, r, err)
		return
	}
	own, err := c.quota.TenantSettings(ctx, t.ID)
	if err != nil {
		c.Error(w, r, err)
		return
	}
	cons, err := c.consumption(r, t, p.Plan, p.Month)
	if err != nil {
		c.Error(w, r, err)
		return
	}
	p.UsedUnits = cons.UsedUnits

	inForce := ps.Thresholds
	if own.Thresholds != nil {
		inForce, p.OwnThresholds = own.Thresholds, true
	}
	for _, th := range inForce {
		at, ok := th.At(p.Plan.IncludedUnits)
		p.Thresholds = append(p.Thresholds, thresholdView{Label: thresholdLabel(th), At: at, Reached: ok, Crossed: ok && p.UsedUnits >= at})
	}
	p.ThresholdRows = forms.Thresholds
	if p.ThresholdRows == nil {
		p.ThresholdRows = thresholdRows(inForce)
	} else {
		for range blankThresholdRows {
			p.ThresholdRows = append(p.ThresholdRows, thresholdRow{Kind: "percent"})
		}
	}

	p.Cap = capView{Max: ps.SpendCapMaxMinor, Default: ps.SpendCapDefaultMinor, Own: own.SpendCapMinor,
		Binds: p.Plan.QuotaMode == plans.QuotaOverage, Currency: p.Plan.Currency}
	switch {
	case own.SpendCapMinor != nil:
		p.Cap.InForce, p.Cap.Source = own.SpendCapMinor, "your own"
	case ps.SpendCapDefaultMinor != nil:
		p.Cap.InForce, p.Cap.Source = ps.SpendCapDefaultMinor, "the plan's default"
	case ps.SpendCapMaxMinor != nil:
		p.Cap.InForce, p.Cap.Source = ps.SpendCapMaxMinor, "the plan's maximum"
	}
	if p.Cap.Max != nil && p.Cap.InForce != nil && *p.Cap.InForce > *p.Cap.Max {
		p.Cap.InForce, p.Cap.Source = p.Cap.Max, "the plan's maximum"
	}
	switch {
	case forms.Cap != nil:
		p.CapForm = *forms.Cap
	case own.SpendCapMinor != nil:
		p.CapForm = strconv.FormatInt(*own.SpendCapMinor, 10)
	}

	s, err := c.hookScopeOf(r)
	if err != nil {
		c.Error(w, r, err)
		return
	}
	pr, err := page.FromQuery(r.URL.Query())
	if err != nil {
		c.Error(w, r, err)
		return
	}
	if p.Endpoints, err = c.endpointsView(r, s, pr, forms.Endpoint, p.Errors); err != nil {
		c.Error(w, r, err)
		return
	}
	evs, err := c.events.Events(ctx, t.ID, "", page.First(20))
	if err != nil {
		c.Error(w, r, err)
		return
	}
	p.Events, p.MoreEvents = eventRows(evs.Items), evs.NextCursor != nil
	c.render(w, r, status, "alerts", "alerts", p)
}

func alertsPath(t tenants.Tenant) string { return "/tenants/" + url.PathEscape(t.ID) + "/alerts" }

// AlertThresholds serves POST /tenants/{tenantID}/alerts/thresholds:
// quota.Ops.SetTenantThresholds, with the form's rows (empty rows are
// left out), or the plan's thresholds when plan=yes.
func (c *Console) AlertThresholds() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		pf := r.PostForm
		fe := formErrors{}
		rows, list := readThresholds(pf, fe)
		if pf.Get("plan") == "yes" {
			list, rows = nil, nil
		}
		reshow := func(status int, errs map[string]string) {
			c.alertsView(w, r, t, status, alertForms{Thresholds: rows, Errors: onThresholdRows(errs)})
		}
		if _, ok := saveForm(c, w, r, fe, reshow, func() (quota.TenantSettings, error) {
			return c.cfg.Quota.SetTenantThresholds(r.Context(), actor(r), t.ID, list)
		}); !ok {
			return
		}
		msg := "Thresholds saved."
		if list == nil {
			msg = "The plan's thresholds apply again."
		}
		redirect(w, r, alertsPath(t), msg)
	})
}

// AlertSpendCap serves POST /tenants/{tenantID}/alerts/spend-cap:
// quota.Ops.SetTenantSpendCap, which lets a tenant's users lower the cap
// in force, never raise it, and nobody set it above the plan's maximum.
func (c *Console) AlertSpendCap() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		typed := strings.TrimSpace(r.PostForm.Get("spend_cap_minor"))
		fe := formErrors{}
		capMinor := fe.optInt64(r.PostForm, "spend_cap_minor")
		reshow := func(status int, errs map[string]string) {
			c.alertsView(w, r, t, status, alertForms{Cap: &typed, Errors: errs})
		}
		if _, ok := saveForm(c, w, r, fe, reshow, func() (quota.TenantSettings, error) {
			return c.cfg.Quota.SetTenantSpendCap(r.Context(), actor(r), t.ID, capMinor)
		}); !ok {
			return
		}
		redirect(w, r, alertsPath(t), "Spend cap saved.")
	})
}
