package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/testkeys"
)

// TestMalformedIDsAreNotFoundWithoutAQuery: an ID that is not a UUID names
// nothing; the store says so without asking the database.
func TestMalformedIDsAreNotFoundWithoutAQuery(t *testing.T) {
	ctx := context.Background()
	s := auth.NewStore(testenv.NoQueries(t))
	now := time.Now()
	testenv.WantNotFound(t, func(id string) map[string]error {
		calls := map[string]error{}
		_, calls["GetServiceToken"] = s.GetServiceToken(ctx, id)
		calls["RevokeServiceToken"] = s.RevokeServiceToken(ctx, id)
		_, calls["GetUser"] = s.GetUser(ctx, id)
		calls["SetPassword"] = s.SetPassword(ctx, id, "a long enough password")
		if err := s.EndSession(ctx, id); err != nil {
			t.Errorf("EndSession(%q) = %v, want nil", id, err)
		}
		for _, c := range []jwt.RegisteredClaims{{Subject: id, ID: testenv.GoodID}, {Subject: testenv.GoodID, ID: id}} {
			c.Issuer, c.Audience = auth.Issuer, jwt.ClaimStrings{auth.AdminAudience}
			c.IssuedAt, c.ExpiresAt = jwt.NewNumericDate(now), jwt.NewNumericDate(now.Add(time.Hour))
			token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
			testenv.Must(t, err)
			if _, err := s.VerifySession(ctx, token, secret, now); err != auth.ErrNoSession {
				t.Errorf("VerifySession(sub %q, jti %q) = %v, want ErrNoSession", c.Subject, c.ID, err)
			}
		}
		_, err := s.CreateUser(ctx, auth.NewUser{Email: "v@example.com", Password: "a long enough password",
			Role: auth.RoleTenantViewer, TenantID: id})
		if testenv.Fields(err)["tenant_id"] == "" {
			t.Errorf("CreateUser(tenant %q) = %v, want a problem with tenant_id", id, err)
		}
		return calls
	})
}

// TestIDLookupsUseIndexes: with sequential scans priced out, no lookup by
// ID scans a table, as comparing id::text with a parameter would.
func TestIDLookupsUseIndexes(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	u, err := auth.NewStore(db).CreateUser(ctx, auth.NewUser{Email: "ops@example.com", Password: "long enough pw", Role: auth.RoleOperator})
	testenv.Must(t, err)
	_, st, err := auth.NewStore(db).WithSecretKeys(testkeys.SecretKeys(t)).IssueServiceToken(ctx, "edge", time.Hour)
	testenv.Must(t, err)
	now := time.Now()
	token, sess, err := auth.NewStore(db).StartSession(ctx, u, secret, time.Hour, now)
	testenv.Must(t, err)

	// Only the tables looked up count: the foreign-key check on
	// signing_keys may reuse a plan the connection cached before
	// enable_seqscan.
	testenv.NoSeqScans(t, db, func(tx pgx.Tx) {
		s := auth.NewStore(tx)
		_, err := s.GetServiceToken(ctx, st.ID)
		testenv.Must(t, err)
		testenv.Must(t, s.RevokeServiceToken(ctx, st.ID))
		_, err = s.GetUser(ctx, u.ID)
		testenv.Must(t, err)
		_, err = s.VerifySession(ctx, token, secret, now)
		testenv.Must(t, err)
		testenv.Must(t, s.EndSession(ctx, sess.ID))
		testenv.Must(t, s.SetPassword(ctx, u.ID, "another long password"))
	}, "service_tokens", "users", "admin_sessions")
}
