package adminapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/tenants"
)

// Keys live under their tenant: /tenants/{tenantID}/keys/{keyID}. Every
// lookup is by both IDs, so a key is only ever reached through its own
// tenant. Responses carry the key's record (display prefix, never the hash);
// the secret appears once, in the answer to the request that made it.

// handleKeyList serves GET /tenants/{tenantID}/keys, newest first.
func handleKeyList(log *slog.Logger, ts *tenants.Store) http.Handler {
	return handleTenantPage(log, ts, ts.ListKeysPage)
}

// handleTenantPage serves one page of a list below /tenants/{tenantID}:
// 404 for a tenant that does not exist, else a page of list.
func handleTenantPage[T any](log *slog.Logger, ts *tenants.Store,
	list func(ctx context.Context, tenantID string, pr page.Request) (page.Page[T], error)) http.Handler {
	return handlePage(log, func(r *http.Request) (string, error) {
		id := chi.URLParam(r, "tenantID")
		_, err := ts.Get(r.Context(), id)
		return id, err
	}, list)
}

// keyIn reads the key tenantID/keyID on a change's transaction.
func keyIn(ctx context.Context, tenantID, keyID string) func(pgx.Tx) (tenants.Key, error) {
	return func(tx pgx.Tx) (tenants.Key, error) { return tenants.NewStore(tx).GetKey(ctx, tenantID, keyID) }
}

type keyCreateRequest struct {
	Name      string            `json:"name"`
	Metadata  map[string]string `json:"metadata"`
	ExpiresAt *time.Time        `json:"expires_at"`

	now time.Time
}

func (k *keyCreateRequest) spec() tenants.KeySpec {
	return tenants.KeySpec{Name: k.Name, Metadata: k.Metadata, ExpiresAt: k.ExpiresAt, MaxLive: tenants.MaxLiveKeys}
}

func (k *keyCreateRequest) Validate() error {
	f := map[string]string{}
	tenants.ValidateKeyName("name", k.Name, f)
	tenants.ValidateMetadata("metadata", k.Metadata, f)
	if k.ExpiresAt != nil && !k.ExpiresAt.After(k.now) {
		f["expires_at"] = "must be in the future"
	}
	return tollgate.Invalid(f)
}

// KeySecretResponse answers requests that make a key: the only time its
// secret is shown.
type KeySecretResponse struct {
	Key    tenants.Key `json:"key"`
	Secret string      `json:"secret"`
	// Previous is the rotated key, now expiring (rotation only).
	Previous *tenants.Key `json:"previous,omitempty"`
}

// handleKeyCreate serves POST /tenants/{tenantID}/keys: 409 when the
// tenant has tenants.MaxLiveKeys live keys already.
func handleKeyCreate(log *slog.Logger, db *pgxpool.Pool, now func() time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := keyCreateRequest{now: now()}
		if err := httpx.Decode(r, MaxBody, &req); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		var secret string
		k, err := audit.Create(r.Context(), db, actorOf(r), "key.create", tenants.KeyAudit,
			func(tx pgx.Tx) (k tenants.Key, err error) {
				secret, k, err = tenants.NewStore(tx).CreateKey(r.Context(), chi.URLParam(r, "tenantID"), req.spec())
				return k, err
			})
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		w.Header().Set("Location", "/api/v1/tenants/"+k.TenantID+"/keys/"+k.ID)
		httpx.JSON(w, http.StatusCreated, KeySecretResponse{Key: k, Secret: secret})
	})
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
	return k.change().Validate()
}

// handleKeyUpdate serves PATCH /tenants/{tenantID}/keys/{keyID}: name,
// metadata and expiry. An expiry in the past ends the key at once. Only
// operators may clear or extend an expiry, or change an expired key's
// (403 for tenant admins): that could undo a rotation's grace period or an
// operator's expiry, or bring a key back.
func handleKeyUpdate(log *slog.Logger, db *pgxpool.Pool, now func() time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req keyUpdateRequest
		if err := httpx.Decode(r, MaxBody, &req); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		tenantID, keyID := chi.URLParam(r, "tenantID"), chi.URLParam(r, "keyID")
		c := req.change()
		s, _ := sessionFrom(r.Context())
		c.ShortenOnly = s.User.Role != auth.RoleOperator
		after, err := audit.Update(r.Context(), db, actorOf(r), "key.update", tenants.KeyAudit,
			keyIn(r.Context(), tenantID, keyID),
			func(tx pgx.Tx, _ tenants.Key) (tenants.Key, error) {
				return tenants.NewStore(tx).UpdateKey(r.Context(), tenantID, keyID, c, now())
			})
		writeResult(w, r, log, after, err)
	})
}

// handleKeyRevoke serves POST /tenants/{tenantID}/keys/{keyID}/revoke:
// checks with the key are denied (key_revoked) within a second.
func handleKeyRevoke(log *slog.Logger, db *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenantID, keyID := chi.URLParam(r, "tenantID"), chi.URLParam(r, "keyID")
		after, err := audit.Update(r.Context(), db, actorOf(r), "key.revoke", tenants.KeyAudit,
			keyIn(r.Context(), tenantID, keyID),
			func(tx pgx.Tx, _ tenants.Key) (tenants.Key, error) {
				return tenants.NewStore(tx).RevokeTenantKey(r.Context(), tenantID, keyID)
			})
		writeResult(w, r, log, after, err)
	})
}

// DefaultRotationGrace is how long a rotated key keeps working when the
// request does not say: a day to roll the new key out.
const DefaultRotationGrace = 24 * time.Hour

type keyRotateRequest struct {
	// GracePeriodS is how long the old key keeps working, in seconds.
	GracePeriodS *int64 `json:"grace_period_s"`
}

func (k *keyRotateRequest) grace() time.Duration {
	if k.GracePeriodS == nil {
		return DefaultRotationGrace
	}
	return time.Duration(*k.GracePeriodS) * time.Second
}

// maxGracePeriodS is tenants.MaxRotationGrace in whole seconds. Requests
// are compared in seconds: converting a huge grace_period_s to a
// time.Duration first would overflow and wrap to a small, valid-looking
// value.
const maxGracePeriodS = int64(tenants.MaxRotationGrace / time.Second)

func (k *keyRotateRequest) Validate() error {
	if g := k.GracePeriodS; g != nil && (*g < 0 || *g > maxGracePeriodS) {
		return tollgate.Invalid(map[string]string{"grace_period_s": "must be from 0 to 2592000 (30 days)"})
	}
	return nil
}

// rotatedKey is a key as the audit log records its rotation: with when it
// was rotated and what replaced it, which the API's key record leaves out.
type rotatedKey struct {
	tenants.Key
	RotatedAt  *time.Time `json:"rotated_at"`
	ReplacedBy string     `json:"replaced_by"`
}

func asRotated(k tenants.Key) rotatedKey {
	return rotatedKey{Key: k, RotatedAt: k.RotatedAt, ReplacedBy: k.ReplacedBy}
}

// handleKeyRotate serves POST /tenants/{tenantID}/keys/{keyID}/rotate: a
// new key with the same name and metadata; the old one keeps working for
// the grace period (its expires_at becomes now + grace). A key is rotated
// at most once: 409 for a key rotated before, revoked or expired, and when
// the tenant has tenants.MaxLiveKeys live keys already.
func handleKeyRotate(log *slog.Logger, db *pgxpool.Pool, now func() time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req keyRotateRequest
		if err := decodeOptional(r, &req); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		tenantID, keyID := chi.URLParam(r, "tenantID"), chi.URLParam(r, "keyID")
		var res KeySecretResponse
		err := audit.Apply(r.Context(), db, actorOf(r), func(tx pgx.Tx) ([]audit.Change, error) {
			ts := tenants.NewStore(tx)
			before, err := ts.GetKey(r.Context(), tenantID, keyID)
			if err != nil {
				return nil, err
			}
			secret, fresh, old, err := ts.RotateKey(r.Context(), tenantID, keyID,
				tenants.Rotation{Grace: req.grace(), Now: now(), MaxLive: tenants.MaxLiveKeys})
			if err != nil {
				return nil, err
			}
			res = KeySecretResponse{Key: fresh, Secret: secret, Previous: &old}
			rotated := tenants.KeyAudit("key.rotate", &before, &old)
			rotated.Before, rotated.After = asRotated(before), asRotated(old)
			return []audit.Change{tenants.KeyAudit("key.create", nil, &fresh), rotated}, nil
		})
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		w.Header().Set("Location", "/api/v1/tenants/"+res.Key.TenantID+"/keys/"+res.Key.ID)
		httpx.JSON(w, http.StatusCreated, res)
	})
}
