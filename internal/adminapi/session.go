package adminapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/access"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/httpx"
)

// SessionCookie holds the session token for browsers (the web UI) that
// reach the admin server over plain HTTP. API clients send the same token
// as "Authorization: Bearer …".
const SessionCookie = "tollgate_session"

// SecureSessionCookie holds it instead when the server is reached over
// HTTPS (httpx.HTTPS: TLS, or a trusted proxy's X-Forwarded-Proto). The
// __Host- prefix makes browsers keep it only when it is Secure, has Path=/
// and no Domain, so neither a sibling subdomain nor a plain-HTTP page
// can plant or overwrite it; browsers refuse it without Secure, so plain
// HTTP keeps SessionCookie.
const SecureSessionCookie = "__Host-" + SessionCookie

// sessionAuth issues, verifies and ends admin sessions: the API's login
// and logout and the console's sign-in and sign-out forms all go through
// it (signIn, signOut).
type sessionAuth struct {
	store  *auth.Store
	ops    *auth.Ops
	logins *loginLimiter
	secret []byte
	ttl    time.Duration
	now    func() time.Time
}

// sessionFrom returns the request's verified session.
func sessionFrom(ctx context.Context) (auth.Session, bool) { return access.SessionFrom(ctx) }

// actorOf returns who makes the request's changes.
func actorOf(r *http.Request) audit.Actor { return access.Actor(r.Context()) }

// sessionToken returns the token of the request: the bearer token if there
// is one, else the session cookie's (SecureSessionCookie first, then
// SessionCookie). Over HTTPS only SecureSessionCookie counts:
// SessionCookie can be planted by a sibling subdomain or a plain-HTTP
// page, and would sign the victim in as whoever planted it.
func sessionToken(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		token, _ := strings.CutPrefix(h, "Bearer ")
		return strings.TrimSpace(token)
	}
	names := [...]string{SecureSessionCookie, SessionCookie}
	n := len(names)
	if httpx.HTTPS(r) {
		n = 1
	}
	for _, name := range names[:n] {
		if c, err := r.Cookie(name); err == nil && c.Value != "" {
			return c.Value
		}
	}
	return ""
}

// identify puts the request's session, if its token (bearer or cookie)
// is a valid one, in its context; a request without a valid token has no
// session, whatever its context held. It rejects nothing:
// requireSession does.
func (a *sessionAuth) identify(fail errorWriter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := access.WithoutSession(r.Context())
			if token := sessionToken(r); token != "" {
				s, err := a.store.VerifySession(ctx, token, a.secret, a.now())
				switch tollgate.ErrorCode(err) {
				case "":
					ctx = access.WithSession(ctx, s)
				case tollgate.EUNAUTHORIZED:
				default:
					fail(w, r, err)
					return
				}
			}
			next.ServeHTTP(w, r.WithContext(ctx))
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

// secureRequest reports whether the client may have reached us over
// TLS, directly or through a proxy that says so. Believing anyone's
// X-Forwarded-Proto here is safe: it only makes the plain-HTTP cookie
// stricter. The cookie's name follows httpx.HTTPS, which believes trusted
// proxies only.
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// sessionCookie returns the session cookie for r without its value and
// lifetime: SecureSessionCookie (Secure, Path=/, no Domain) over HTTPS,
// else SessionCookie.
func sessionCookie(r *http.Request) *http.Cookie {
	if httpx.HTTPS(r) {
		return &http.Cookie{Name: SecureSessionCookie, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: true}
	}
	return &http.Cookie{Name: SessionCookie, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: secureRequest(r)}
}

// setSessionCookie sets the session cookie for r (sessionCookie).
func setSessionCookie(w http.ResponseWriter, r *http.Request, token string, expires time.Time, now time.Time) {
	c := sessionCookie(r)
	c.Value, c.Expires, c.MaxAge = token, expires, int((expires.Sub(now)+time.Second-1)/time.Second)
	http.SetCookie(w, c)
}

// clearSessionCookie clears both session cookies.
func clearSessionCookie(w http.ResponseWriter, r *http.Request) {
	clearCookie(w, r, SecureSessionCookie)
	clearCookie(w, r, SessionCookie)
}

// clearCookie expires the session cookie called name, with the
// attributes a browser requires to replace it.
func clearCookie(w http.ResponseWriter, r *http.Request, name string) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: name == SecureSessionCookie || secureRequest(r),
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

func validateLogin(email, password string) error {
	f := map[string]string{}
	if strings.TrimSpace(email) == "" {
		f["email"] = "is required"
	}
	if password == "" {
		f["password"] = "is required"
	} else if len(password) > auth.MaxPasswordLen {
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

// loginThrottled refuses a login attempt over the login limits: an
// ERATELIMITED error, and when to try again.
type loginThrottled struct {
	err   error
	retry time.Duration
}

func (e *loginThrottled) Error() string { return e.err.Error() }
func (e *loginThrottled) Unwrap() error { return e.err }

// signIn signs a user in with email and password: the attempt is limited
// per client network and (network, email), and failed ones per email (see
// loginLimiter); the session is started (auth.Ops.StartSession, audited)
// and its token set in an HttpOnly cookie on w. Over the limits the error
// is a *loginThrottled.
func (a *sessionAuth) signIn(w http.ResponseWriter, r *http.Request, email, password string) (LoginResponse, error) {
	if err := validateLogin(email, password); err != nil {
		return LoginResponse{}, err
	}
	ip := clientIP(r)
	if ok, retry := a.logins.allow(r.Context(), ip, auth.NormalizeEmail(email)); !ok {
		secs := max(int64((retry+time.Second-1)/time.Second), 1)
		return LoginResponse{}, &loginThrottled{retry: time.Duration(secs) * time.Second,
			err: tollgate.Errorf(tollgate.ERATELIMITED, "too many login attempts: try again in %d s", secs)}
	}
	u, err := a.store.Authenticate(r.Context(), email, password)
	if err != nil {
		if errors.Is(err, auth.ErrBadLogin) {
			a.logins.failed(r.Context(), ip, auth.NormalizeEmail(email))
		}
		return LoginResponse{}, err
	}
	now := a.now()
	token, s, err := a.ops.StartSession(r.Context(), u, ip, auth.SessionConfig{Secret: a.secret, TTL: a.ttl}, now)
	if err != nil {
		return LoginResponse{}, err
	}
	setSessionCookie(w, r, token, s.ExpiresAt, now)
	return LoginResponse{Token: token, TokenType: "Bearer", ExpiresAt: s.ExpiresAt, User: u}, nil
}

// signOut ends the request's session, if it has one (auth.Ops.EndSession,
// audited), and clears the cookie.
func (a *sessionAuth) signOut(w http.ResponseWriter, r *http.Request) error {
	if s, ok := sessionFrom(r.Context()); ok {
		if err := a.ops.EndSession(r.Context(), actorOf(r), s); err != nil {
			return err
		}
	}
	clearSessionCookie(w, r)
	return nil
}

// consoleSessions is sessionAuth as the console's sign-in and sign-out
// forms use it (ui.Sessions).
type consoleSessions struct{ a *sessionAuth }

func (c consoleSessions) SignIn(w http.ResponseWriter, r *http.Request, email, password string) error {
	_, err := c.a.signIn(w, r, email, password)
	return err
}

func (c consoleSessions) SignOut(w http.ResponseWriter, r *http.Request) error {
	return c.a.signOut(w, r)
}

// handleLogin serves POST /api/v1/login: email and password in, a session
// token out — in the body for API clients and in an HttpOnly cookie for
// browsers (see signIn). Over the login limits it is 429 with
// Retry-After.
func handleLogin(log *slog.Logger, a *sessionAuth) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req loginRequest
		if err := decodeBody(r, &req); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		res, err := a.signIn(w, r, req.Email, req.Password)
		var throttled *loginThrottled
		if errors.As(err, &throttled) {
			w.Header().Set("Retry-After", strconv.FormatInt(int64(throttled.retry/time.Second), 10))
		}
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		httpx.JSON(w, r, log, http.StatusOK, res)
	})
}

// handleLogout serves POST /api/v1/logout: it ends the request's session,
// if it has one, and clears the cookie. It always succeeds.
func handleLogout(log *slog.Logger, a *sessionAuth) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := a.signOut(w, r); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// MeResponse answers GET /me.
type MeResponse struct {
	User             auth.User `json:"user"`
	SessionExpiresAt time.Time `json:"session_expires_at"`
}

// handleMe serves GET /api/v1/me: who the session belongs to.
func handleMe(log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := sessionFrom(r.Context())
		httpx.JSON(w, r, log, http.StatusOK, MeResponse{User: s.User, SessionExpiresAt: s.ExpiresAt})
	})
}
