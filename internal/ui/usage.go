package ui

import (
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/access"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
)

// shownMonth reads the month a usage page shows from ?month= (by default
// the month of now) and returns it with now. ok is false when it does not
// parse (EINVALID): the error page is written.
func (c *Console) shownMonth(w http.ResponseWriter, r *http.Request) (m usage.Month, now time.Time, ok bool) {
	now = c.now()
	m = usage.MonthOf(now)
	if s := r.URL.Query().Get("month"); s != "" {
		var err error
		if m, err = usage.ParseMonth(s); err != nil {
			c.Error(w, r, err)
			return m, now, false
		}
	}
	return m, now, true
}

// monthNav links a page to the months around the one it shows.
type monthNav struct {
	Month, Prev, Next usage.Month
	HasNext           bool
	Current           bool
}

func navOf(m usage.Month, now time.Time) monthNav {
	this := usage.MonthOf(now)
	return monthNav{Month: m, Prev: usage.MonthOf(m.Start().Add(-time.Hour)), Next: usage.MonthOf(m.End()),
		HasNext: m.Start().Before(this.Start()), Current: m.Start().Equal(this.Start())}
}

// monthRange is the whole of m: its totals come from the month rollup,
// which holds the month so far.
func monthRange(m usage.Month) usage.Range { return usage.Range{From: m.Start(), To: m.End()} }

// daysSoFar is m up to the end of the day under way at now (or the whole
// month once it is over): whole days, read from the day rollups.
func daysSoFar(m usage.Month, now time.Time) usage.Range {
	to := dayEnd(now)
	if m.End().Before(to) {
		to = m.End()
	}
	return usage.Range{From: m.Start(), To: to}
}

// dayEnd is the end of the UTC day under way at now.
func dayEnd(now time.Time) time.Time { return now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour) }

// hourEnd is the end of the hour under way at now.
func hourEnd(now time.Time) time.Time { return now.UTC().Truncate(time.Hour).Add(time.Hour) }

// tenantUsagePage is the data of a tenant's usage page.
type tenantUsagePage struct {
	Tenant      tenants.Tenant
	Nav         monthNav
	Consumption consumption
	Daily       chartHTML
	Hourly      chartHTML
	ByKey       chartHTML
	ByResource  chartHTML
	Keys        []keyUsageRow
	Resources   []usage.ResourceUsage
	Rejections  usage.Rejections
	Reasons     []countRow
	Rules       []countRow
	// The filter of the charts over time.
	KeyID, Resource string
	FilterLabel     string
}

type keyUsageRow struct {
	usage.KeyUsage
	Label string
}

type countRow struct {
	Name  string
	Count int64
}

func sortedCounts(m map[string]int64, empty string) []countRow {
	out := make([]countRow, 0, len(m))
	for k, v := range m {
		if k == "" {
			k = empty
		}
		out = append(out, countRow{k, v})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Count > out[j].Count || out[i].Count == out[j].Count && out[i].Name < out[j].Name
	})
	return out
}

// TenantUsage serves GET /tenants/{tenantID}/usage[?month=&key=&resource=]:
// the month's checks over time (all, or one key's or resource's), by key
// and by resource, the units against the included ones, and the denials.
func (c *Console) TenantUsage() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		ctx := r.Context()
		m, now, ok := c.shownMonth(w, r)
		if !ok {
			return
		}
		q := r.URL.Query()
		p := tenantUsagePage{Tenant: t, Nav: navOf(m, now), KeyID: q.Get("key"), Resource: strings.TrimSpace(q.Get("resource"))}
		if p.KeyID != "" && p.KeyID != "none" && !postgres.IsUUID(p.KeyID) {
			p.KeyID = ""
		}
		rng := monthRange(m)
		pl, err := c.plans.Get(ctx, t.PlanID)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		if p.Consumption, err = c.consumption(r, t, pl, m); err != nil {
			c.Error(w, r, err)
			return
		}
		keys, err := c.usage.TopKeys(ctx, t.ID, rng, 10)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		ids := make([]string, 0, len(keys))
		for _, k := range keys {
			ids = append(ids, k.KeyID)
		}
		byID, err := c.tenants.KeysByID(ctx, ids)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		var keyBars []bar
		for _, k := range keys {
			row := keyUsageRow{KeyUsage: k, Label: "no key"}
			if kk, ok := byID[k.KeyID]; ok && kk.TenantID == t.ID {
				row.Label = kk.Prefix + "…"
				if kk.Name != "" {
					row.Label += " " + kk.Name
				}
			}
			if k.KeyID == p.KeyID || (p.KeyID == "none" && k.KeyID == "") {
				p.FilterLabel = "key " + row.Label
			}
			p.Keys = append(p.Keys, row)
			keyBars = append(keyBars, bar{Label: row.Label, Allowed: k.Allowed, Denied: k.Denied})
		}
		if p.Resources, err = c.usage.TopResources(ctx, t.ID, rng, 10); err != nil {
			c.Error(w, r, err)
			return
		}
		var resBars []bar
		for _, res := range p.Resources {
			resBars = append(resBars, bar{Label: res.Resource, Allowed: res.Allowed, Denied: res.Denied})
		}
		if p.Resource != "" {
			p.FilterLabel = strings.TrimSpace(p.FilterLabel + " resource " + p.Resource)
		}
		d := usage.Dimensions{KeyID: p.KeyID, Resource: p.Resource}
		if p.KeyID == "none" {
			d.KeyID = usage.NoKey
		}
		daily, err := c.usage.SeriesOf(ctx, t.ID, d, usage.GranularityDay, daysSoFar(m, now))
		if err != nil {
			c.Error(w, r, err)
			return
		}
		p.Daily = usageChart("usage-daily", "Checks per day in "+m.String(), daily, usage.GranularityDay, wide)
		if p.Nav.Current {
			hourly, err := c.usage.SeriesOf(ctx, t.ID, d, usage.GranularityHour,
				usage.Range{From: now.Truncate(time.Hour).Add(-47 * time.Hour), To: now})
			if err != nil {
				c.Error(w, r, err)
				return
			}
			p.Hourly = usageChart("usage-hourly", "Checks per hour, last 48 hours", hourly, usage.GranularityHour, wide)
		}
		p.ByKey = barsChart("usage-keys", "Checks by key in "+m.String(), "key", keyBars)
		p.ByResource = barsChart("usage-resources", "Checks by resource in "+m.String(), "resource", resBars)
		if p.Rejections, err = c.usage.Rejections(ctx, t.ID, rng); err != nil {
			c.Error(w, r, err)
			return
		}
		p.Reasons = sortedCounts(p.Rejections.ByReason, "")
		p.Rules = sortedCounts(p.Rejections.ByRule, "before any rule (key, tenant)")
		c.render(w, r, http.StatusOK, "tenant_usage", tenantNav(r, "usage"), p)
	})
}

// tenantNav is the nav entry of a tenant page: the tenant's own for its
// users, Tenants for operators.
func tenantNav(r *http.Request, own string) string {
	if access.Operator(session(r).User) == nil {
		return "tenants"
	}
	return own
}

// statementListPage is the data of a tenant's statements page.
type statementListPage struct {
	Tenant tenants.Tenant
	Months []billing.MonthUsage
	Now    usage.Month
}

// StatementList serves GET /tenants/{tenantID}/statements: the months
// with usage or a statement, newest first.
func (c *Console) StatementList() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		months, err := c.billing.TenantMonths(r.Context(), t.ID)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		now := usage.MonthOf(c.now())
		if len(months) == 0 || !months[0].Month.Start().Equal(now.Start()) {
			months = append([]billing.MonthUsage{{Month: now}}, months...)
		}
		c.render(w, r, http.StatusOK, "statement_list", tenantNav(r, "statements"), statementListPage{Tenant: t, Months: months, Now: now})
	})
}

// statementPage is the data of a statement's page.
type statementPage struct {
	Tenant    tenants.Tenant
	Statement billing.Statement
	Lines     []statementLine
	CSV       string
}

type statementLine struct {
	billing.UsageLine
	Key string
}

// StatementView serves GET /tenants/{tenantID}/statements/{month}: the
// statement as the API serves it (open, or frozen once the month is
// closed), with a link to its CSV.
func (c *Console) StatementView() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		m, err := usage.ParseMonth(chi.URLParam(r, "month"))
		if err != nil {
			c.Error(w, r, tollgate.Errorf(tollgate.ENOTFOUND, "no statement for %s", chi.URLParam(r, "month")))
			return
		}
		st, err := c.billing.Statement(r.Context(), t.ID, m)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		p := statementPage{Tenant: t, Statement: st,
			CSV: "/api/v1/statements/" + url.PathEscape(t.ID) + "/" + m.String() + "?format=csv"}
		for _, l := range st.Lines {
			key := "no key"
			if l.KeyID != "" {
				key = l.KeyPrefix + "…"
				if l.KeyName != "" {
					key += " " + l.KeyName
				}
			}
			p.Lines = append(p.Lines, statementLine{UsageLine: l, Key: key})
		}
		c.render(w, r, http.StatusOK, "statement", tenantNav(r, "statements"), p)
	})
}

// usagePage is the data of the operator's usage page.
type usagePage struct {
	Nav      monthNav
	Totals   metering.Counts
	Daily    chartHTML
	Top      []tenantUsageRow
	Tenants  int64
	ClosedAt *time.Time
	// Closable: the month has ended and is not closed yet.
	Closable bool
	CSV      string
}

type tenantUsageRow struct {
	usage.TenantTotal
	Name string
}

// Usage serves GET /usage[?month=] (operators): every tenant's checks in
// the month, the tenants that used most, the month's statements as CSV,
// and closing the month.
func (c *Console) Usage() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		m, now, ok := c.shownMonth(w, r)
		if !ok {
			return
		}
		rng := monthRange(m)
		p := usagePage{Nav: navOf(m, now), CSV: "/api/v1/statements?month=" + m.String() + "&format=csv"}
		var err error
		if p.Totals, err = c.usage.Overall(ctx, rng); err != nil {
			c.Error(w, r, err)
			return
		}
		daily, err := c.usage.OverallSeries(ctx, usage.GranularityDay, daysSoFar(m, now))
		if err != nil {
			c.Error(w, r, err)
			return
		}
		p.Daily = usageChart("all-daily", "Checks per day in "+m.String()+", every tenant and anonymous caller", daily, usage.GranularityDay, wide)
		top, n, err := c.usage.MonthTenants(ctx, m, 20)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		p.Tenants = n
		names, err := tenantNames(ctx, c.tenants, top, func(t usage.TenantTotal) string { return t.TenantID })
		if err != nil {
			c.Error(w, r, err)
			return
		}
		for _, t := range top {
			p.Top = append(p.Top, tenantUsageRow{TenantTotal: t, Name: names[t.TenantID]})
		}
		if p.ClosedAt, err = c.usage.ClosedAt(ctx, m); err != nil {
			c.Error(w, r, err)
			return
		}
		p.Closable = p.ClosedAt == nil && !now.Before(m.End())
		c.render(w, r, http.StatusOK, "usage", "usage", p)
	})
}

// MonthClose serves POST /months/{month}/close (operators), after
// confirmation: billing.Ops.CloseMonth freezes every tenant's statement of
// the month.
func (c *Console) MonthClose() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, err := usage.ParseMonth(chi.URLParam(r, "month"))
		if err != nil {
			c.Error(w, r, err)
			return
		}
		back := "/usage?month=" + m.String()
		if !confirmed(r) {
			c.askConfirmation(w, r, "usage", confirmPage{Heading: "Close " + m.String() + "?",
				Message: "Every tenant's statement of " + m.String() + " is computed and frozen; usage that arrives later is reported as late, not billed. Close a month once the usage worker has caught up. This cannot be undone.",
				Button:  "Close the month", Back: back})
			return
		}
		res, err := c.cfg.Billing.CloseMonth(r.Context(), actor(r), m, nil)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		msg := m.String() + " closed: " + formatInt(int64(res.Statements)) + " statements frozen."
		if res.AlreadyClosed {
			msg = m.String() + " was closed already; nothing changed."
		}
		redirect(w, r, back, msg)
	})
}
