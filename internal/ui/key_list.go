package ui

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/access"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
)

// expiresSoon is how close an expiry must be for a key's badge to warn.
const expiresSoon = 7 * 24 * time.Hour

// keyListPage is the data of a tenant's keys page, and of the operator's
// page of every tenant's keys (Tenant nil).
type keyListPage struct {
	Tenant *tenants.Tenant
	Prefix string
	Rows   []keyRow
	Next   string
	// CanManage: the user may issue, rotate and revoke (tenant admins and
	// operators).
	CanManage bool
	Form      keyForm
	Errors    map[string]string
	Graces    []grace
}

type keyRow struct {
	tenants.Key
	TenantName string
	Badges     []badge
	Live       bool
	Sparkline  chartHTML
	Checks24h  int64
}

type keyForm struct {
	Name      string
	ExpiresAt string
}

// badge is a status label.
type badge struct {
	Label, Class, Title string
}

// grace is a choice of rotation grace period.
type grace struct {
	Seconds int64
	Label   string
	Default bool
}

var graces = []grace{
	{0, "none: the old key stops at once", false},
	{3600, "1 hour", false},
	{24 * 3600, "24 hours", true},
	{7 * 24 * 3600, "7 days", false},
	{30 * 24 * 3600, "30 days", false},
}

// keyBadges returns the badges of k at now: its state (active, revoked,
// expired, in its rotation grace, expiring soon) and whether a rule
// denied it in the last hour.
func keyBadges(k tenants.Key, a *usage.KeyActivity, now time.Time) (badges []badge, live bool) {
	switch {
	case k.RevokedAt != nil:
		badges = append(badges, badge{"revoked", "bad", "revoked " + formatDateTime(*k.RevokedAt)})
	case k.ExpiresAt != nil && !k.ExpiresAt.After(now):
		badges = append(badges, badge{"expired", "neutral", "expired " + formatDateTime(*k.ExpiresAt)})
	case k.RotatedAt != nil:
		live = true
		badges = append(badges, badge{"rotation grace", "info", "rotated; works until " + formatDateTime(derefTime(k.ExpiresAt))})
	case k.ExpiresAt != nil && k.ExpiresAt.Sub(now) < expiresSoon:
		live = true
		badges = append(badges, badge{"expires soon", "warn", "expires " + formatDateTime(*k.ExpiresAt)})
	default:
		live = true
		badges = append(badges, badge{"active", "ok", ""})
	}
	if a != nil && a.RateLimited {
		badges = append(badges, badge{"rate-limited", "warn", "a rule denied checks with this key in the last hour"})
	}
	return badges, live
}

// KeyList serves GET /tenants/{tenantID}/keys: the tenant's keys, newest
// first, filtered by display prefix, each with its last 24 hours.
func (c *Console) KeyList() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.keyList(w, r, http.StatusOK, keyForm{}, nil)
	})
}

// AllKeys serves GET /keys (operators): every tenant's keys.
func (c *Console) AllKeys() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.keyList(w, r, http.StatusOK, keyForm{}, nil)
	})
}

func (c *Console) keyList(w http.ResponseWriter, r *http.Request, status int, form keyForm, errs map[string]string) {
	ctx := r.Context()
	q := r.URL.Query()
	pr, err := page.FromQuery(q)
	if err != nil {
		c.Error(w, r, err)
		return
	}
	p := keyListPage{Prefix: strings.TrimSpace(q.Get("prefix")), Form: form, Errors: errs, Graces: graces}
	if len(p.Prefix) > 64 {
		p.Prefix = p.Prefix[:64]
	}
	f := tenants.KeyFilter{Prefix: p.Prefix}
	u := session(r).User
	nav, path := "keys", "/keys"
	if id := chi.URLParam(r, "tenantID"); id != "" {
		t, err := c.tenants.Get(ctx, id)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		p.Tenant, f.TenantID = &t, t.ID
		path = "/tenants/" + url.PathEscape(t.ID) + "/keys"
		p.CanManage = access.Tenant(u, t.ID, access.ManageKeys) == nil
		if u.Role == "operator" {
			nav = "tenants"
		}
	} else {
		p.CanManage = access.Operator(u) == nil
	}
	pg, err := c.tenants.SearchKeys(ctx, f, pr)
	if err != nil {
		c.Error(w, r, err)
		return
	}
	refs := make([]usage.KeyRef, len(pg.Items))
	tenantIDs := make([]string, len(pg.Items))
	for i, k := range pg.Items {
		refs[i] = usage.KeyRef{TenantID: k.TenantID, KeyID: k.ID}
		tenantIDs[i] = k.TenantID
	}
	now := c.now()
	activity, err := c.usage.KeysActivity(ctx, refs, now)
	if err != nil {
		c.Error(w, r, err)
		return
	}
	names := map[string]string{}
	if p.Tenant == nil {
		if names, err = c.tenants.Names(ctx, tenantIDs); err != nil {
			c.Error(w, r, err)
			return
		}
	}
	for _, k := range pg.Items {
		a := activity[k.ID]
		row := keyRow{Key: k, TenantName: names[k.TenantID]}
		row.Badges, row.Live = keyBadges(k, a, now)
		var hours [24]int64
		if a != nil {
			hours = a.Hours
		}
		for _, n := range hours {
			row.Checks24h += n
		}
		row.Sparkline = sparkline("spark-"+k.ID, hours, now)
		p.Rows = append(p.Rows, row)
	}
	p.Next = nextPage(path, r, pg.NextCursor)
	c.render(w, r, status, "key_list", nav, p)
}
