package auth

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/postgres"
)

// AdminAudience is the audience of admin session tokens. Service tokens
// (audience tollgate-check) are never accepted by the admin server, nor
// session tokens by the check API.
const AdminAudience = "tollgate-admin"

// MinSessionSecretLen is the shortest HS256 secret accepted, in bytes: the
// size of the hash, as RFC 7518 §3.2 requires.
const MinSessionSecretLen = 32

// Admin sessions are JWTs signed with HS256 under a secret only the admin
// server holds (TOLLGATE_ADMIN_JWT_SECRET): the server that issues a token
// is the only one that verifies it, so a shared secret suffices and keeps
// the service-token signing keys, whose public halves every API node
// loads, to their one purpose. The algorithm is pinned on verification.
// Each token names a row of admin_sessions (jti), checked on every
// request: logout, a password change, a disabled user or a deleted user
// end it at once.

// Session is a verified admin session.
type Session struct {
	ID        string
	User      User
	ExpiresAt time.Time
}

// StartSession records a session for the user that lasts ttl from now and
// returns its signed token.
func (s *Store) StartSession(ctx context.Context, u User, secret []byte, ttl time.Duration, now time.Time) (string, Session, error) {
	now = now.UTC().Truncate(time.Second)
	exp := now.Add(ttl)
	var id string
	err := s.db.QueryRow(ctx, `INSERT INTO admin_sessions (user_id, created_at, expires_at) VALUES ($1, $2, $3)
		RETURNING id`, u.ID, now, exp).Scan(&id)
	if err != nil {
		return "", Session{}, fmt.Errorf("auth: start session: %w", err)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Issuer:    Issuer,
		Subject:   u.ID,
		Audience:  jwt.ClaimStrings{AdminAudience},
		ID:        id,
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(exp),
	})
	signed, err := tok.SignedString(secret)
	if err != nil {
		return "", Session{}, fmt.Errorf("auth: sign session: %w", err)
	}
	return signed, Session{ID: id, User: u, ExpiresAt: exp}, nil
}

// ErrNoSession is returned for any session token that does not verify;
// callers get no detail on why.
var ErrNoSession = tollgate.Errorf(tollgate.EUNAUTHORIZED, "missing, invalid or expired session")

// SessionClockSkew is how far apart the clocks of admin processes may be:
// a token issued by a process whose clock runs ahead has its iat and nbf
// in the future of the others, and is accepted that far ahead. The token's
// exp is given the same leeway, but VerifySession also checks the
// session's expiry as stored, without any, so a session ends on time.
const SessionClockSkew = 30 * time.Second

// ParseSessionToken checks the token's signature (HS256 only), issuer,
// audience, expiry, not-before and issued-at at now (the times with
// SessionClockSkew of leeway), and returns its subject (the user ID) and
// ID (the session ID).
func ParseSessionToken(token string, secret []byte, now time.Time) (userID, sessionID string, err error) {
	var claims jwt.RegisteredClaims
	parsed, err := jwt.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(Issuer),
		jwt.WithAudience(AdminAudience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(SessionClockSkew),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	if err != nil || !parsed.Valid || claims.ID == "" || claims.Subject == "" {
		return "", "", ErrNoSession
	}
	return claims.Subject, claims.ID, nil
}

// VerifySession parses the token and returns its session if the session
// is neither revoked nor expired at now (exactly: the stored expiry has no
// leeway) and its user is enabled.
func (s *Store) VerifySession(ctx context.Context, token string, secret []byte, now time.Time) (Session, error) {
	userID, sessionID, err := ParseSessionToken(token, secret, now)
	if err != nil {
		return Session{}, err
	}
	if !postgres.IsUUID(userID) || !postgres.IsUUID(sessionID) {
		return Session{}, ErrNoSession
	}
	var sess Session
	var revoked *time.Time
	u := &sess.User
	err = s.db.QueryRow(ctx, `SELECT s.id, s.expires_at, s.revoked_at, u.id, u.email, u.role,
		coalesce(u.tenant_id::text, ''), u.created_at, u.updated_at, u.disabled_at
		FROM admin_sessions s JOIN users u ON u.id = s.user_id
		WHERE s.id = $1::uuid AND u.id = $2::uuid`, sessionID, userID).
		Scan(&sess.ID, &sess.ExpiresAt, &revoked, &u.ID, &u.Email, &u.Role, &u.TenantID, &u.CreatedAt,
			&u.UpdatedAt, &u.DisabledAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrNoSession
	}
	if err != nil {
		return Session{}, fmt.Errorf("auth: verify session: %w", err)
	}
	if revoked != nil || !now.Before(sess.ExpiresAt) || u.DisabledAt != nil {
		return Session{}, ErrNoSession
	}
	return sess, nil
}

// EndSession revokes the session with id; ending it twice, or ending a
// session that does not exist, is not an error.
func (s *Store) EndSession(ctx context.Context, id string) error {
	if !postgres.IsUUID(id) {
		return nil
	}
	if _, err := s.db.Exec(ctx, `UPDATE admin_sessions SET revoked_at = coalesce(revoked_at, now())
		WHERE id = $1::uuid`, id); err != nil {
		return fmt.Errorf("auth: end session: %w", err)
	}
	return nil
}
