package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/testenv"
)

// noQueries is a database that fails the test if it is asked anything.
type noQueries struct{ t *testing.T }

func (n noQueries) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	n.t.Errorf("unexpected query: %s", sql)
	return pgconn.CommandTag{}, pgx.ErrTxClosed
}

func (n noQueries) Query(_ context.Context, sql string, _ ...any) (pgx.Rows, error) {
	n.t.Errorf("unexpected query: %s", sql)
	return nil, pgx.ErrTxClosed
}

func (n noQueries) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	n.t.Errorf("unexpected query: %s", sql)
	return errRow{}
}

func (n noQueries) Begin(context.Context) (pgx.Tx, error) {
	n.t.Error("unexpected transaction")
	return nil, pgx.ErrTxClosed
}

type errRow struct{}

func (errRow) Scan(...any) error { return pgx.ErrTxClosed }

// TestMalformedIDsAreNotFoundWithoutAQuery: an ID that is not a UUID names
// nothing; the store says so without asking the database.
func TestMalformedIDsAreNotFoundWithoutAQuery(t *testing.T) {
	ctx := context.Background()
	s := auth.NewStore(noQueries{t})
	now := time.Now()
	for _, id := range []string{"", "nope", "0B9F3D5E-8A44-4C1E-9D3A-5F6E7A8B9C0D", "0b9f3d5e-8a44-4c1e-9d3a-5f6e7a8b9c0d' OR '1'='1"} {
		calls := map[string]error{}
		_, calls["GetServiceToken"] = s.GetServiceToken(ctx, id)
		calls["RevokeServiceToken"] = s.RevokeServiceToken(ctx, id)
		_, calls["GetUser"] = s.GetUser(ctx, id)
		calls["SetPassword"] = s.SetPassword(ctx, id, "a long enough password")
		for name, err := range calls {
			if tollgate.ErrorCode(err) != tollgate.ENOTFOUND {
				t.Errorf("%s(%q) = %v, want not_found", name, id, err)
			}
		}
		if err := s.EndSession(ctx, id); err != nil {
			t.Errorf("EndSession(%q) = %v, want nil", id, err)
		}
		for _, c := range []jwt.RegisteredClaims{{Subject: id, ID: "0b9f3d5e-8a44-4c1e-9d3a-5f6e7a8b9c0d"}, {Subject: "0b9f3d5e-8a44-4c1e-9d3a-5f6e7a8b9c0d", ID: id}} {
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
	}
}

// TestIDLookupsUseIndexes: with sequential scans priced out, no lookup by
// ID scans a table, as comparing id::text with a parameter would.
func TestIDLookupsUseIndexes(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	u, err := auth.NewStore(db).CreateUser(ctx, auth.NewUser{Email: "ops@example.com", Password: "long enough pw", Role: auth.RoleOperator})
	testenv.Must(t, err)
	_, st, err := auth.NewStore(db).IssueServiceToken(ctx, "edge", time.Hour)
	testenv.Must(t, err)
	now := time.Now()
	token, sess, err := auth.NewStore(db).StartSession(ctx, u, secret, time.Hour, now)
	testenv.Must(t, err)

	tx, err := db.Begin(ctx)
	testenv.Must(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SET LOCAL enable_seqscan = off`)
	testenv.Must(t, err)
	s := auth.NewStore(tx)
	_, err = s.GetServiceToken(ctx, st.ID)
	testenv.Must(t, err)
	testenv.Must(t, s.RevokeServiceToken(ctx, st.ID))
	_, err = s.GetUser(ctx, u.ID)
	testenv.Must(t, err)
	_, err = s.VerifySession(ctx, token, secret, now)
	testenv.Must(t, err)
	testenv.Must(t, s.EndSession(ctx, sess.ID))
	testenv.Must(t, s.SetPassword(ctx, u.ID, "another long password"))
	// (Only the tables looked up: the foreign-key check on signing_keys
	// may reuse a plan the connection cached before enable_seqscan.)
	rows, err := tx.Query(ctx, `SELECT relname, seq_scan FROM pg_stat_xact_user_tables
		WHERE seq_scan > 0 AND relname IN ('service_tokens', 'users', 'admin_sessions')`)
	testenv.Must(t, err)
	scans, err := pgx.CollectRows(rows, pgx.RowToMap)
	testenv.Must(t, err)
	if len(scans) > 0 {
		t.Errorf("lookups by ID scanned tables: %v", scans)
	}
}
