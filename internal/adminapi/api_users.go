package adminapi

import (
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/auth"
)

// Admin users: operators create them, disable them and end their
// sessions, as with `admin users …`. Only operators see or change users;
// passwords never leave the store, except a generated one, once.

// userFilter reads the query of GET /users (by email): q (part of an
// email), role and tenant (ID).
func userFilter(q url.Values) (auth.UserFilter, error) {
	f := auth.UserFilter{Query: strings.TrimSpace(q.Get("q")), Role: auth.Role(q.Get("role")), TenantID: q.Get("tenant")}
	if f.Role != "" && !f.Role.Valid() {
		return f, tollgate.Invalid(map[string]string{"role": "must be operator, tenant_admin or tenant_viewer"})
	}
	return f, nil
}

// UserCreateResponse answers POST /users.
type UserCreateResponse = auth.CreatedUser

// handleUserCreate serves POST /users: 409 naming "email" when it is
// taken. Without a password one is generated and returned once.
func handleUserCreate(log *slog.Logger, ops *auth.Ops) http.Handler {
	return handleCreate(log, decodeBody, func(r *http.Request, in auth.CreateUserInput) (auth.CreatedUser, error) {
		return ops.CreateUser(r.Context(), actorOf(r), in)
	}, func(res auth.CreatedUser) string { return "/users/" + res.User.ID })
}

// UserSessionsResponse answers the requests that end a user's sessions.
type UserSessionsResponse = auth.UserSessions

// handleUserDisable serves POST /users/{userID}/disable: the user can no
// longer sign in and its sessions end at once. Operators cannot disable
// themselves (409), so that the last operator is not locked out by
// mistake.
func handleUserDisable(log *slog.Logger, ops *auth.Ops) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, err := ops.DisableUser(r.Context(), actorOf(r), chi.URLParam(r, "userID"))
		writeResult(w, r, log, res, err)
	})
}

// handleUserSessionsRevoke serves POST /users/{userID}/sessions/revoke:
// every session of the user ends at once; the user may sign in again.
func handleUserSessionsRevoke(log *slog.Logger, ops *auth.Ops) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, err := ops.EndUserSessions(r.Context(), actorOf(r), chi.URLParam(r, "userID"))
		writeResult(w, r, log, res, err)
	})
}
