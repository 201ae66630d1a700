package ui

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/tenants"
)

// keySecretPage shows a key's secret, the only time it is shown: the
// answer to the form that made the key, never a page one can come back
// to. Previous is the rotated key (rotation only).
type keySecretPage struct {
	Tenant   tenants.Tenant
	Key      tenants.Key
	Secret   string
	Previous *tenants.Key
}

func keysPath(tenantID string) string { return "/tenants/" + url.PathEscape(tenantID) + "/keys" }

// showSecret renders the page with the secret, kept out of every cache
// and history: it must not be shown again.
func (c *Console) showSecret(w http.ResponseWriter, r *http.Request, p keySecretPage) {
	w.Header().Set("Cache-Control", "no-store")
	c.render(w, r, http.StatusCreated, "key_secret", "keys", p)
}

// KeyIssue serves POST /tenants/{tenantID}/keys: tenants.Ops.CreateKey
// issues the key, and the page shows its secret once.
func (c *Console) KeyIssue() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		fe := formErrors{}
		form := keyForm{Name: strings.TrimSpace(r.PostForm.Get("name")), ExpiresAt: strings.TrimSpace(r.PostForm.Get("expires_at"))}
		in := tenants.CreateKeyInput{Name: form.Name, ExpiresAt: fe.dateTime(r.PostForm, "expires_at")}
		reshow := func(status int, errs map[string]string) { c.keyList(w, r, status, form, errs) }
		res, ok := saveForm(c, w, r, fe, reshow, func() (tenants.IssuedKey, error) {
			return c.cfg.Tenants.CreateKey(r.Context(), actor(r), t.ID, in)
		})
		if !ok {
			return
		}
		c.showSecret(w, r, keySecretPage{Tenant: t, Key: res.Key, Secret: res.Secret})
	})
}

// KeyRotate serves POST /tenants/{tenantID}/keys/{keyID}/rotate: a new key
// replaces the old one, which keeps working for the chosen grace period.
func (c *Console) KeyRotate() http.Handler {
	return c.tenantHandler(func(w http.ResponseWriter, r *http.Request, t tenants.Tenant) {
		fe := formErrors{}
		in := tenants.RotateKeyInput{GracePeriodS: fe.optInt64(r.PostForm, "grace_period_s")}
		if err := fe.err(); err != nil {
			c.Error(w, r, err)
			return
		}
		res, err := c.cfg.Tenants.RotateKey(r.Context(), actor(r), t.ID, chi.URLParam(r, "keyID"), in)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		c.showSecret(w, r, keySecretPage{Tenant: t, Key: res.Key, Secret: res.Secret, Previous: res.Previous})
	})
}

// KeyRevoke serves POST /tenants/{tenantID}/keys/{keyID}/revoke, after
// confirmation: checks with the key are denied within a second.
func (c *Console) KeyRevoke() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tenantID, keyID := chi.URLParam(r, "tenantID"), chi.URLParam(r, "keyID")
		k, err := c.tenants.GetKey(ctx, tenantID, keyID)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		back := safeNext(r.PostForm.Get("back"))
		if back == "/" {
			back = keysPath(tenantID)
		}
		c.confirmThen(w, r, "keys", confirmPage{Heading: "Revoke key " + k.Prefix + "…?",
			Message: "Every check with " + keyLabel(k) + " will be denied (key_revoked) within a second. This cannot be undone.",
			Button:  "Revoke key", Back: back}, "Key "+k.Prefix+"… revoked: checks with it are denied.", func() error {
			_, err := c.cfg.Tenants.RevokeKey(ctx, actor(r), tenantID, keyID)
			return err
		})
	})
}

// keyLabel names a key for people: its name and display prefix.
func keyLabel(k tenants.Key) string {
	if k.Name == "" {
		return "key " + k.Prefix + "…"
	}
	return "key " + k.Prefix + "… (" + k.Name + ")"
}
