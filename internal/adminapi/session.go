package adminapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/access"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/httpx"
)

// SessionCookie holds the session token for browsers (the web UI). API
// clients send the same token as "Authorization: Bearer …".
const SessionCookie = "tollgate_session"

// sessionAuth issues and verifies admin sessions.
type sessionAuth struct {
	store  *auth.Store
	secret []byte
	ttl    time.Duration
	now    func() time.Time
}

// sessionFrom returns the request's verified session.
func sessionFrom(ctx context.Context) (auth.Session, bool) { return access.SessionFrom(ctx) }

// actorOf returns who makes the request's changes.
func actorOf(r *http.Request) audit.Actor { return access.Actor(r.Context()) }

// sessionToken returns the token of the request: the bearer token if there
// is one, else the session cookie's.
func sessionToken(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		token, _ := strings.CutPrefix(h, "Bearer ")
		return strings.TrimSpace(token)
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		return c.Value
	}
	return ""
}

// identify puts the request's session, if it has a valid one, in its
// context. It rejects nothing: requireSession does. A request that
// carries no token keeps the session its context has: the console calls
// the API in-process on behalf of its signed-in user.
func (a *sessionAuth) identify(fail errorWriter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token := sessionToken(r)
			if token == "" {
				next.ServeHTTP(w, r)
				return
			}
			s, err := a.store.VerifySession(r.Context(), token, a.secret, a.now())
			switch tollgate.ErrorCode(err) {
			case "":
				r = r.WithContext(access.WithSession(r.Context(), s))
			case tollgate.EUNAUTHORIZED:
			default:
				fail(w, r, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// requireSession answers 401 to requests without a valid session.
func requireSession(fail errorWriter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, ok := sessionFrom(r.Context()); !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate-admin"`)
				fail(w, r, auth.ErrNoSession)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// secureRequest reports whether the client reached us over TLS, directly
// or through a proxy that says so. Trusting X-Forwarded-Proto here is
// safe: it can only make the cookie stricter.
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func setSessionCookie(w http.ResponseWriter, r *http.Request, token string, expires time.Time, now time.Time) {
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: token, Path: "/",
		Expires: expires, MaxAge: int((expires.Sub(now) + time.Second - 1) / time.Second),
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: secureRequest(r),
	})
}

func clearSessionCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: secureRequest(r),
	})
}

// clientIP is the address the request came from: the peer address, or,
// behind a proxy listed in TOLLGATE_TRUSTED_PROXIES (the server wraps its
// handler in httpx.TrustedProxies.Middleware), the client that proxy
// names in X-Forwarded-For. Headers from anyone else are ignored: a
// client could send one to escape the login limits.
func clientIP(r *http.Request) string { return httpx.ClientIP(r) }

type loginRequest struct {
	Email    string `json:"email"`
	Password string `json:"password"`
}

func (l *loginRequest) Validate() error {
	f := map[string]string{}
	if strings.TrimSpace(l.Email) == "" {
		f["email"] = "is required"
	}
	if l.Password == "" {
		f["password"] = "is required"
	} else if len(l.Password) > auth.MaxPasswordLen {
		f["password"] = "is too long"
	}
	return tollgate.Invalid(f)
}

// LoginResponse answers a successful POST /login.
type LoginResponse struct {
	Token     string    `json:"token"`
	TokenType string    `json:"token_type"`
	ExpiresAt time.Time `json:"expires_at"`
	User      auth.User `json:"user"`
}

// handleLogin serves POST /api/v1/login: email and password in, a session
// token out — in the body for API clients and in an HttpOnly cookie for
// browsers. Attempts are limited per client network and (network, email),
// and failed ones per email (see loginLimiter).
func handleLogin(log *slog.Logger, a *sessionAuth, logins *loginLimiter, db *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req loginRequest
		if err := httpx.Decode(r, MaxBody, &req); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		ip, email := clientIP(r), auth.NormalizeEmail(req.Email)
		if ok, retry := logins.allow(r.Context(), ip, email); !ok {
			secs := int64((retry + time.Second - 1) / time.Second)
			w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
			httpx.Error(w, r, log, tollgate.Errorf(tollgate.ERATELIMITED, "too many login attempts: try again in %d s", max(secs, 1)))
			return
		}
		u, err := a.store.Authenticate(r.Context(), req.Email, req.Password)
		if err != nil {
			if errors.Is(err, auth.ErrBadLogin) {
				logins.failed(r.Context(), ip, email)
			}
			httpx.Error(w, r, log, err)
			return
		}
		now := a.now()
		var token string
		var s auth.Session
		err = audit.Apply(r.Context(), db, audit.Actor{ID: u.ID, Name: u.Email}, func(tx pgx.Tx) ([]audit.Change, error) {
			var err error
			if token, s, err = auth.NewStore(tx).StartSession(r.Context(), u, a.secret, a.ttl, now); err != nil {
				return nil, err
			}
			return audit.One(audit.Change{Action: "user.login", TargetType: "user", TargetID: u.ID, TenantID: u.TenantID,
				After: map[string]string{"ip": ip, "session_id": s.ID}}), nil
		})
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		setSessionCookie(w, r, token, s.ExpiresAt, now)
		httpx.JSON(w, http.StatusOK, LoginResponse{Token: token, TokenType: "Bearer", ExpiresAt: s.ExpiresAt, User: u})
	})
}

// handleLogout serves POST /api/v1/logout: it ends the request's session,
// if it has one, and clears the cookie. It always succeeds.
func handleLogout(log *slog.Logger, db *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s, ok := sessionFrom(r.Context()); ok {
			err := audit.Apply(r.Context(), db, actorOf(r), func(tx pgx.Tx) ([]audit.Change, error) {
				if err := auth.NewStore(tx).EndSession(r.Context(), s.ID); err != nil {
					return nil, err
				}
				return audit.One(audit.Change{Action: "user.logout", TargetType: "user", TargetID: s.User.ID,
					TenantID: s.User.TenantID, After: map[string]string{"session_id": s.ID}}), nil
			})
			if err != nil {
				httpx.Error(w, r, log, err)
				return
			}
		}
		clearSessionCookie(w, r)
		w.WriteHeader(http.StatusNoContent)
	})
}

// MeResponse answers GET /me.
type MeResponse struct {
	User             auth.User `json:"user"`
	SessionExpiresAt time.Time `json:"session_expires_at"`
}

// handleMe serves GET /api/v1/me: who the session belongs to.
func handleMe() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := sessionFrom(r.Context())
		httpx.JSON(w, http.StatusOK, MeResponse{User: s.User, SessionExpiresAt: s.ExpiresAt})
	})
}
