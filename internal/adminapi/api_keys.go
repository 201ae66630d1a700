package adminapi

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/tenants"
)

// Keys live under their tenant: /tenants/{tenantID}/keys/{keyID}. Every
// lookup is by both IDs, so a key is only ever reached through its own
// tenant. Responses carry the key's record (display prefix, never the hash);
// the secret appears once, in the answer to the request that made it.

// KeySecretResponse answers requests that make a key: the only time its
// secret is shown.
type KeySecretResponse = tenants.IssuedKey

// handleKeyCreate serves POST /tenants/{tenantID}/keys: 409 when the
// tenant has tenants.MaxLiveKeys live keys, or HeldKeysPerLive times as
// many in the snapshot, already.
func handleKeyCreate(log *slog.Logger, ops *tenants.Ops) http.Handler {
	return handleCreate(log, decodeBody, tenantChange(ops.CreateKey), issuedKeyPath)
}

// handleKeyGet serves GET /tenants/{tenantID}/keys/{keyID}.
func handleKeyGet(log *slog.Logger, ts *tenants.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, err := ts.GetKey(r.Context(), chi.URLParam(r, "tenantID"), chi.URLParam(r, "keyID"))
		writeResult(w, r, log, k, err)
	})
}

// keyUpdateRequest is the body of PATCH /tenants/{tenantID}/keys/{keyID}:
// absent fields stay as they are; "expires_at": null removes the expiry
// (operators only).
type keyUpdateRequest struct {
	Name      *string            `json:"name"`
	Metadata  *map[string]string `json:"metadata"`
	ExpiresAt nullableTime       `json:"expires_at"`
}

func (k *keyUpdateRequest) change() tenants.KeyChange {
	c := tenants.KeyChange{Name: k.Name, Metadata: k.Metadata}
	if k.ExpiresAt.Set {
		c.ExpiresAt = &k.ExpiresAt.Time
	}
	return c
}

func (k *keyUpdateRequest) Validate() error {
	if k.Name == nil && k.Metadata == nil && !k.ExpiresAt.Set {
		return tollgate.Invalid(map[string]string{"body": "set at least one of name, metadata, expires_at"})
	}
	return nil
}

// handleKeyUpdate serves PATCH /tenants/{tenantID}/keys/{keyID}: name,
// metadata and expiry. An expiry in the past ends the key at once. Only
// operators may clear or extend an expiry, or change an expired key's
// (403 for tenant admins): that could undo a rotation's grace period or an
// operator's expiry, or bring a key back.
func handleKeyUpdate(log *slog.Logger, ops *tenants.Ops) http.Handler {
	return handleBody(log, decodeValid, func(r *http.Request, req keyUpdateRequest) (tenants.Key, error) {
		return ops.UpdateKey(r.Context(), actorOf(r), chi.URLParam(r, "tenantID"), chi.URLParam(r, "keyID"), req.change())
	}, func(w http.ResponseWriter, r *http.Request, k tenants.Key) { httpx.JSON(w, r, log, http.StatusOK, k) })
}

// handleKeyRevoke serves POST /tenants/{tenantID}/keys/{keyID}/revoke:
// checks with the key are denied (key_revoked) within a second.
func handleKeyRevoke(log *slog.Logger, ops *tenants.Ops) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, err := ops.RevokeKey(r.Context(), actorOf(r), chi.URLParam(r, "tenantID"), chi.URLParam(r, "keyID"))
		writeResult(w, r, log, k, err)
	})
}

// handleKeyRotate serves POST /tenants/{tenantID}/keys/{keyID}/rotate: a
// new key with the same name and metadata; the old one keeps working for
// the grace period (its expires_at becomes now + grace). A key is rotated
// at most once: 409 for a key rotated before, revoked or expired, and when
// the tenant has tenants.MaxLiveKeys live keys (or HeldKeysPerLive times
// as many in the snapshot) already.
func handleKeyRotate(log *slog.Logger, ops *tenants.Ops) http.Handler {
	return handleCreate(log, decodeOptional, func(r *http.Request, in tenants.RotateKeyInput) (tenants.IssuedKey, error) {
		return ops.RotateKey(r.Context(), actorOf(r), chi.URLParam(r, "tenantID"), chi.URLParam(r, "keyID"), in)
	}, issuedKeyPath)
}

// issuedKeyPath is the path of a key just made, below its tenant.
func issuedKeyPath(res tenants.IssuedKey) string {
	return "/tenants/" + res.Key.TenantID + "/keys/" + res.Key.ID
}
