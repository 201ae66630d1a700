package ui

import (
	"net/http"
	"strings"

	"github.com/tollgate/tollgate/internal/auth"
)

// tokenListPage is the data of the service tokens page.
type tokenListPage struct {
	Rows   []tokenRow
	Next   string
	Form   tokenForm
	Errors map[string]string
	TTLs   []ttlChoice
}

type tokenRow struct {
	auth.ServiceToken
	Badge badge
}

type tokenForm struct {
	Name string
	TTLS int64
}

type ttlChoice struct {
	Seconds int64
	Label   string
}

var ttls = []ttlChoice{{30 * 86400, "30 days"}, {90 * 86400, "90 days"}, {365 * 86400, "1 year"}, {2 * 365 * 86400, "2 years"}}

// tokenSecretPage shows a new service token, once.
type tokenSecretPage struct {
	Token auth.ServiceToken
	JWT   string
}

// TokenList serves GET /service-tokens: the check API's callers'
// credentials, and the form that issues one.
func (c *Console) TokenList() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.tokenList(w, r, http.StatusOK, tokenForm{TTLS: 365 * 86400}, nil)
	})
}

func (c *Console) tokenList(w http.ResponseWriter, r *http.Request, status int, form tokenForm, errs map[string]string) {
	list, next, err := listPage("/service-tokens", r, c.auth.ListServiceTokensPage)
	if err != nil {
		c.Error(w, r, err)
		return
	}
	p := tokenListPage{Form: form, Errors: errs, TTLs: ttls, Next: next}
	now := c.now()
	for _, t := range list {
		row := tokenRow{ServiceToken: t, Badge: badge{"active", "ok", ""}}
		switch {
		case t.RevokedAt != nil:
			row.Badge = badge{"revoked", "bad", "revoked " + formatDateTime(*t.RevokedAt)}
		case t.ExpiresAt != nil && !t.ExpiresAt.After(now):
			row.Badge = badge{"expired", "neutral", ""}
		case t.ExpiresAt != nil && t.ExpiresAt.Sub(now) < 2*expiresSoon:
			row.Badge = badge{"expires soon", "warn", "expires " + formatDateTime(*t.ExpiresAt)}
		}
		p.Rows = append(p.Rows, row)
	}
	c.render(w, r, status, "token_list", "tokens", p)
}

// TokenIssue serves POST /service-tokens: auth.Ops.IssueServiceToken
// issues the token, and the page shows it once.
func (c *Console) TokenIssue() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fe := formErrors{}
		form := tokenForm{Name: strings.TrimSpace(r.PostForm.Get("name")), TTLS: fe.int64(r.PostForm, "ttl_s", 365*86400)}
		reshow := func(status int, errs map[string]string) { c.tokenList(w, r, status, form, errs) }
		res, ok := saveForm(c, w, r, fe, reshow, func() (auth.IssuedServiceToken, error) {
			return c.cfg.Auth.IssueServiceToken(r.Context(), actor(r), auth.IssueServiceTokenInput{Name: form.Name, TTLS: &form.TTLS})
		})
		if !ok {
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		c.render(w, r, http.StatusCreated, "token_secret", "tokens", tokenSecretPage{Token: res.ServiceToken, JWT: res.Token})
	})
}

// TokenRevoke serves POST /service-tokens/{tokenID}/revoke, after
// confirmation: the check API refuses the token within a second.
func (c *Console) TokenRevoke() http.Handler {
	return loadedHandler(c, pathNamed("tokenID", c.auth.GetServiceToken), func(w http.ResponseWriter, r *http.Request, t auth.ServiceToken) {
		c.confirmThen(w, r, "tokens", confirmPage{Heading: "Revoke service token " + t.Name + "?",
			Message: "The check API refuses it (401) within a second: callers using it can no longer check.",
			Button:  "Revoke token", Back: "/service-tokens"}, "Service token "+t.Name+" revoked.", func() error {
			_, err := c.cfg.Auth.RevokeServiceToken(r.Context(), actor(r), t.ID)
			return err
		})
	})
}
