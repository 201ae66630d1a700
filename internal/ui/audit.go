package ui

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/page"
)

// auditPage is the data of the audit log page.
type auditPage struct {
	Filter                        url.Values
	Actor, Action, Target, Tenant string
	From, To                      string
	Rows                          []auditRow
	Next                          string
	Errors                        map[string]string
}

type auditRow struct {
	audit.Entry
	TenantName    string
	Before, After string
}

// AuditList serves GET /audit: every change, newest first, filtered like
// the API's GET /api/v1/audit (actor, action or action prefix "key.*",
// target "key" or "key:<id>", tenant, time).
func (c *Console) AuditList() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		pr, err := page.FromQuery(q)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		p := auditPage{Actor: strings.TrimSpace(q.Get("actor")), Action: strings.TrimSpace(q.Get("action")),
			Target: strings.TrimSpace(q.Get("target")), Tenant: strings.TrimSpace(q.Get("tenant")),
			From: q.Get("from"), To: q.Get("to"), Errors: map[string]string{}}
		f := audit.Filter{Actor: p.Actor, Action: p.Action, TenantID: p.Tenant}
		f.TargetType, f.TargetID, _ = strings.Cut(p.Target, ":")
		if p.Tenant != "" {
			if t, err := c.tenants.Find(r.Context(), p.Tenant); err == nil {
				f.TenantID = t.ID
			}
		}
		fe := formErrors{}
		if t := fe.dateTime(q, "from"); t != nil {
			f.From = *t
		}
		if t := fe.dateTime(q, "to"); t != nil {
			f.To = *t
		}
		if err := audit.ValidateFilter(f); err != nil {
			for k, v := range fieldErrors(err) {
				fe[k] = v
			}
		}
		var pg page.Page[audit.Entry]
		if len(fe) == 0 {
			if pg, err = c.audit.List(r.Context(), f, pr); err != nil {
				c.Error(w, r, err)
				return
			}
		}
		p.Errors = fe
		names, err := tenantNames(r.Context(), c.tenants, pg.Items, func(e audit.Entry) string { return e.TenantID })
		if err != nil {
			c.Error(w, r, err)
			return
		}
		for _, e := range pg.Items {
			p.Rows = append(p.Rows, auditRow{Entry: e, TenantName: names[e.TenantID], Before: compactJSON(e.Before), After: compactJSON(e.After)})
		}
		p.Next = nextPage("/audit", r, pg.NextCursor)
		c.render(w, r, http.StatusOK, "audit", "audit", p)
	})
}

// compactJSON shows a JSON value on one line; null as "".
func compactJSON(raw []byte) string {
	s := strings.TrimSpace(string(raw))
	if s == "null" || s == "" {
		return ""
	}
	return s
}
