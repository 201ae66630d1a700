package ui

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
)

// tenantListPage is the data of the tenants page.
type tenantListPage struct {
	Query  string
	Status string
	PlanID int64
	Plans  []plans.Plan
	Rows   []tenantRow
	Next   string
	// The form that creates a tenant: its values and errors.
	Form   tenantForm
	Errors map[string]string
	Open   bool // the create form is open (it has errors)
}

type tenantRow struct {
	tenants.Tenant
	PlanName string
	Keys     tenants.KeyCount
}

type tenantForm struct {
	Name   string
	PlanID int64
}

// nextPage returns the URL of the page after the request's: path, the
// page's own address, with the request's query and the cursor of the
// page. The path is not the request's: a page shown again after a form
// was refused answers at the form's POST address, which serves no GET.
func nextPage(path string, r *http.Request, cursor *string) string {
	if cursor == nil {
		return ""
	}
	q := r.URL.Query()
	q.Set("cursor", *cursor)
	return path + "?" + q.Encode()
}

// listPage reads the page of list that the request's query asks for (its
// cursor and limit): its items, and the URL of the page after it at path
// ("" when there is none; see nextPage).
func listPage[T any](path string, r *http.Request, list func(ctx context.Context, pr page.Request) (page.Page[T], error)) ([]T, string, error) {
	pr, err := page.FromQuery(r.URL.Query())
	if err != nil {
		return nil, "", err
	}
	pg, err := list(r.Context(), pr)
	if err != nil {
		return nil, "", err
	}
	return pg.Items, nextPage(path, r, pg.NextCursor), nil
}

// tenantNames returns the names of the tenants of items (tenantOf each),
// by ID; an ID that names no tenant, such as "", has no name.
func tenantNames[T any](ctx context.Context, ts *tenants.Store, items []T, tenantOf func(T) string) (map[string]string, error) {
	ids := make([]string, len(items))
	for i, item := range items {
		ids[i] = tenantOf(item)
	}
	return ts.Names(ctx, ids)
}

// planNames returns every plan by ID, for naming tenants' plans.
func (c *Console) planNames(r *http.Request) (map[int64]plans.Plan, []plans.Plan, error) {
	list, err := c.plans.List(r.Context())
	if err != nil {
		return nil, nil, err
	}
	byID := make(map[int64]plans.Plan, len(list))
	for _, p := range list {
		byID[p.ID] = p
	}
	return byID, list, nil
}

// TenantList serves GET /tenants: search by name or ID, filter by status
// and plan, and the form that creates a tenant.
func (c *Console) TenantList() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.tenantList(w, r, http.StatusOK, tenantForm{}, nil)
	})
}

func (c *Console) tenantList(w http.ResponseWriter, r *http.Request, status int, form tenantForm, errs map[string]string) {
	q := r.URL.Query()
	p := tenantListPage{Query: strings.TrimSpace(q.Get("q")), Status: q.Get("status"), Form: form, Errors: errs, Open: len(errs) > 0}
	if s := q.Get("plan"); s != "" {
		p.PlanID, _ = strconv.ParseInt(s, 10, 64)
	}
	if p.Status != tenants.StatusActive && p.Status != tenants.StatusSuspended {
		p.Status = ""
	}
	if len(p.Query) > 200 {
		p.Query = p.Query[:200]
	}
	byID, list, err := c.planNames(r)
	if err != nil {
		c.Error(w, r, err)
		return
	}
	p.Plans = list
	found, next, err := listPage("/tenants", r, func(ctx context.Context, pr page.Request) (page.Page[tenants.Tenant], error) {
		return c.tenants.ListPage(ctx, tenants.Filter{Query: p.Query, Status: p.Status, PlanID: p.PlanID}, pr)
	})
	if err != nil {
		c.Error(w, r, err)
		return
	}
	ids := make([]string, len(found))
	for i, t := range found {
		ids[i] = t.ID
	}
	counts, err := c.tenants.KeyCounts(r.Context(), ids, c.now())
	if err != nil {
		c.Error(w, r, err)
		return
	}
	for _, t := range found {
		p.Rows = append(p.Rows, tenantRow{Tenant: t, PlanName: byID[t.PlanID].Name, Keys: counts[t.ID]})
	}
	p.Next = next
	c.render(w, r, status, "tenant_list", "tenants", p)
}

// TenantCreate serves POST /tenants: tenants.Ops.Create.
func (c *Console) TenantCreate() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fe := formErrors{}
		form := tenantForm{Name: strings.TrimSpace(r.PostForm.Get("name")), PlanID: fe.int64(r.PostForm, "plan_id", 0)}
		reshow := func(status int, errs map[string]string) { c.tenantList(w, r, status, form, errs) }
		t, ok := saveForm(c, w, r, fe, reshow, func() (tenants.Tenant, error) {
			return c.cfg.Tenants.Create(r.Context(), actor(r), tenants.CreateTenantInput{Name: form.Name, PlanID: form.PlanID})
		})
		if !ok {
			return
		}
		redirect(w, r, "/tenants/"+url.PathEscape(t.ID), "Tenant "+t.Name+" created.")
	})
}
