package adminapi

import (
	"log/slog"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/httpx"
)

// Admin users: operators create them, disable them and end their
// sessions, as with `admin users …`. Only operators see or change users;
// passwords never leave the store, except a generated one, once.

// handleUserList serves GET /users[?q=…&role=…&tenant=…], by email.
func handleUserList(log *slog.Logger, as *auth.Store) http.Handler {
	return handlePage(log, func(r *http.Request) (auth.UserFilter, error) {
		q := r.URL.Query()
		f := auth.UserFilter{Query: strings.TrimSpace(q.Get("q")), Role: auth.Role(q.Get("role")), TenantID: q.Get("tenant")}
		if f.Role != "" && !f.Role.Valid() {
			return f, tollgate.Invalid(map[string]string{"role": "must be operator, tenant_admin or tenant_viewer"})
		}
		return f, nil
	}, as.ListUsersPage)
}

// userCreateRequest is the body of POST /users. Without a password one is
// generated and returned once.
type userCreateRequest struct {
	Email    string    `json:"email"`
	Role     auth.Role `json:"role"`
	TenantID string    `json:"tenant_id"`
	Password *string   `json:"password"`
}

func (u *userCreateRequest) newUser() auth.NewUser {
	nu := auth.NewUser{Email: u.Email, Role: u.Role, TenantID: u.TenantID}
	if u.Password != nil {
		nu.Password = *u.Password
	}
	return nu
}

func (u *userCreateRequest) Validate() error {
	nu := u.newUser()
	if u.Password == nil {
		nu.Password = auth.GeneratePassword()
	}
	return nu.Validate()
}

// UserCreateResponse answers POST /users.
type UserCreateResponse struct {
	User auth.User `json:"user"`
	// Password is the generated password, shown this once; absent when
	// the request gave one.
	Password string `json:"password,omitempty"`
}

// handleUserCreate serves POST /users: 409 naming "email" when it is
// taken.
func handleUserCreate(log *slog.Logger, db *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req userCreateRequest
		if err := httpx.Decode(r, MaxBody, &req); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		nu := req.newUser()
		var res UserCreateResponse
		if req.Password == nil {
			nu.Password = auth.GeneratePassword()
			res.Password = nu.Password
		}
		var err error
		res.User, err = audit.Create(r.Context(), db, actorOf(r), "user.create", auth.UserAudit,
			func(tx pgx.Tx) (auth.User, error) { return auth.NewStore(tx).CreateUser(r.Context(), nu) })
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		w.Header().Set("Location", "/api/v1/users/"+res.User.ID)
		httpx.JSON(w, http.StatusCreated, res)
	})
}

// UserSessionsResponse answers the requests that end a user's sessions.
type UserSessionsResponse struct {
	User          auth.User `json:"user"`
	SessionsEnded int64     `json:"sessions_ended"`
}

// handleUserDisable serves POST /users/{userID}/disable: the user can no
// longer sign in and its sessions end at once. Operators cannot disable
// themselves (409), so that the last operator is not locked out by
// mistake.
func handleUserDisable(log *slog.Logger, db *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "userID")
		if s, _ := sessionFrom(r.Context()); s.User.ID == id {
			httpx.Error(w, r, log, tollgate.Errorf(tollgate.ECONFLICT, "you cannot disable yourself"))
			return
		}
		var res UserSessionsResponse
		err := audit.Apply(r.Context(), db, actorOf(r), func(tx pgx.Tx) ([]audit.Change, error) {
			as := auth.NewStore(tx)
			before, err := as.GetUser(r.Context(), id)
			if err != nil {
				return nil, err
			}
			if res.User, res.SessionsEnded, err = as.DisableUser(r.Context(), id); err != nil {
				return nil, err
			}
			return []audit.Change{auth.UserAudit("user.disable", &before, &res.User),
				auth.SessionsEndedAudit(res.User, res.SessionsEnded)}, nil
		})
		writeResult(w, r, log, res, err)
	})
}

// handleUserSessionsRevoke serves POST /users/{userID}/sessions/revoke:
// every session of the user ends at once; the user may sign in again.
func handleUserSessionsRevoke(log *slog.Logger, db *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "userID")
		var res UserSessionsResponse
		err := audit.Apply(r.Context(), db, actorOf(r), func(tx pgx.Tx) ([]audit.Change, error) {
			as := auth.NewStore(tx)
			var err error
			if res.User, err = as.GetUser(r.Context(), id); err != nil {
				return nil, err
			}
			if res.SessionsEnded, err = as.EndUserSessions(r.Context(), id); err != nil {
				return nil, err
			}
			return audit.One(auth.SessionsEndedAudit(res.User, res.SessionsEnded)), nil
		})
		writeResult(w, r, log, res, err)
	})
}
