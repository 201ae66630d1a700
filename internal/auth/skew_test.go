package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestSessionClockSkew: a token from an admin process whose clock runs a
// little ahead is accepted; one from too far ahead is not; a session still
// ends exactly when it expires.
func TestSessionClockSkew(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	sign := func(issued time.Time) string {
		t.Helper()
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{Issuer: auth.Issuer, Subject: "u", ID: "s",
			Audience: jwt.ClaimStrings{auth.AdminAudience}, IssuedAt: jwt.NewNumericDate(issued),
			NotBefore: jwt.NewNumericDate(issued), ExpiresAt: jwt.NewNumericDate(issued.Add(time.Hour))}).SignedString(secret)
		testenv.Must(t, err)
		return s
	}
	for _, tt := range []struct {
		ahead time.Duration
		ok    bool
	}{{0, true}, {5 * time.Second, true}, {auth.SessionClockSkew, true}, {auth.SessionClockSkew + 2*time.Second, false}, {time.Hour, false}} {
		_, _, err := auth.ParseSessionToken(sign(now.Add(tt.ahead)), secret, now)
		if (err == nil) != tt.ok {
			t.Errorf("token issued %v ahead: err = %v, want ok %v", tt.ahead, err, tt.ok)
		}
	}

	ctx := context.Background()
	s := auth.NewStore(testenv.DB(t))
	u, err := s.CreateUser(ctx, auth.NewUser{Email: "ops@example.com", Password: "long enough pw", Role: auth.RoleOperator})
	testenv.Must(t, err)
	token, sess, err := s.StartSession(ctx, u, secret, time.Hour, now.Add(20*time.Second)) // another replica, ahead
	testenv.Must(t, err)
	if _, err := s.VerifySession(ctx, token, secret, now); err != nil {
		t.Errorf("a fresh session from a replica 20 s ahead: %v", err)
	}
	if _, err := s.VerifySession(ctx, token, secret, sess.ExpiresAt.Add(-time.Second)); err != nil {
		t.Errorf("a session just before it expires: %v", err)
	}
	if _, err := s.VerifySession(ctx, token, secret, sess.ExpiresAt); err != auth.ErrNoSession {
		t.Errorf("a session at its expiry = %v, want ErrNoSession", err)
	}
}
