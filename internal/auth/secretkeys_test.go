package auth_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/testkeys"
)

// issuedUnderTestKeys issues a service token to name on a fresh
// database, whose first signing key it makes and seals with the test
// secret keys (testkeys.SecretKeys), and returns the database and what
// was issued.
func issuedUnderTestKeys(t *testing.T, name string) (db *pgxpool.Pool, token string, st auth.ServiceToken) {
	t.Helper()
	db = testenv.DB(t)
	token, st, err := auth.NewStore(db).WithSecretKeys(testkeys.SecretKeys(t)).IssueServiceToken(context.Background(), name, time.Hour)
	testenv.Must(t, err)
	return db, token, st
}

// TestSigningKeysAreSealedAtRest: the private key in the database is not
// the key; a token signed with it verifies; a store without the secret key
// cannot sign; a wrong secret key cannot open it.
func TestSigningKeysAreSealedAtRest(t *testing.T) {
	ctx := context.Background()
	db, token, _ := issuedUnderTestKeys(t, "edge")

	var kid string
	var pub, stored []byte
	testenv.Must(t, db.QueryRow(ctx, `SELECT kid, public_key, private_key FROM signing_keys`).Scan(&kid, &pub, &stored))
	if len(stored) == ed25519.PrivateKeySize || bytes.Contains(stored, pub) {
		t.Fatalf("private_key is stored in the clear (%d bytes)", len(stored))
	}
	public, err := auth.NewStore(db).PublicKeys(ctx)
	testenv.Must(t, err)
	if _, _, err := auth.VerifyServiceToken(token, public, time.Now()); err != nil {
		t.Fatalf("token signed with the sealed key does not verify: %v", err)
	}

	if _, _, err := auth.NewStore(db).IssueServiceToken(ctx, "nokey", time.Hour); !errors.Is(err, auth.ErrNoSecretKey) {
		t.Errorf("issuing without a secret key: %v, want ErrNoSecretKey", err)
	}
	wrong, err := auth.ParseSecretKeys(auth.GenerateSecretKey())
	testenv.Must(t, err)
	if _, _, err := auth.NewStore(db).WithSecretKeys(wrong).IssueServiceToken(ctx, "wrong", time.Hour); err == nil {
		t.Error("a wrong secret key opened the signing key")
	}
	for _, bad := range []string{"", "short", "dG9vIHNob3J0"} {
		if _, err := auth.ParseSecretKeys(bad); err == nil {
			t.Errorf("ParseSecretKeys(%q) accepted a bad key", bad)
		}
	}
}

// TestResealAfterRotation: after the secret key rotates (the old one kept
// as previous), tokens still issue; resealing moves every signing key to
// the new key, after which the old key is no longer needed. A key an
// earlier version stored in the clear is sealed on first use.
func TestResealAfterRotation(t *testing.T) {
	ctx := context.Background()
	oldKey, newKey := testenv.SecretKey, auth.GenerateSecretKey()
	db, _, _ := issuedUnderTestKeys(t, "before")

	rotated, err := auth.ParseSecretKeys(newKey, oldKey)
	testenv.Must(t, err)
	s := auth.NewStore(db).WithSecretKeys(rotated)
	_, _, err = s.IssueServiceToken(ctx, "during", time.Hour)
	testenv.Must(t, err)
	n, err := s.ResealSigningKeys(ctx)
	testenv.Must(t, err)
	if n != 1 {
		t.Errorf("resealed %d keys, want 1", n)
	}
	if n, err := s.ResealSigningKeys(ctx); err != nil || n != 0 {
		t.Errorf("second reseal: %d, %v; want 0 (all sealed with the current key)", n, err)
	}
	onlyNew, err := auth.ParseSecretKeys(newKey)
	testenv.Must(t, err)
	if _, _, err := auth.NewStore(db).WithSecretKeys(onlyNew).IssueServiceToken(ctx, "after", time.Hour); err != nil {
		t.Errorf("after resealing, the new key alone cannot sign: %v", err)
	}

	// A signing key in the clear, as an earlier version stored it.
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	testenv.Must(t, err)
	_, err = db.Exec(ctx, `UPDATE signing_keys SET retired_at = now()`)
	testenv.Must(t, err)
	_, err = db.Exec(ctx, `INSERT INTO signing_keys (kid, public_key, private_key) VALUES ('legacy', $1, $2)`, []byte(pub), []byte(priv))
	testenv.Must(t, err)
	_, st, err := auth.NewStore(db).WithSecretKeys(onlyNew).IssueServiceToken(ctx, "legacy", time.Hour)
	testenv.Must(t, err)
	var stored []byte
	testenv.Must(t, db.QueryRow(ctx, `SELECT private_key FROM signing_keys WHERE kid = 'legacy'`).Scan(&stored))
	if st.KID != "legacy" || bytes.Equal(stored, priv) {
		t.Errorf("legacy key: signed with %q, stored %d bytes; want it used and sealed", st.KID, len(stored))
	}
}

// TestUnreadableSigningKeysRetired: after the secret key is lost, signing
// with the keys it sealed fails; retiring them lets tokens issue again
// (with a new key) while the tokens they signed keep verifying, and
// resealing passes over them.
func TestUnreadableSigningKeysRetired(t *testing.T) {
	ctx := context.Background()
	db, before, st := issuedUnderTestKeys(t, "before") // under the keys about to be lost

	replacement, err := auth.ParseSecretKeys(auth.GenerateSecretKey())
	testenv.Must(t, err)
	s := auth.NewStore(db).WithSecretKeys(replacement)
	if _, _, err := s.IssueServiceToken(ctx, "refused", time.Hour); !errors.Is(err, auth.ErrKeyNotConfigured) {
		t.Errorf("issuing with the key lost: %v, want ErrKeyNotConfigured", err)
	}
	if _, err := s.ResealSigningKeys(ctx); !errors.Is(err, auth.ErrKeyNotConfigured) {
		t.Errorf("resealing an unretired key no key opens: %v, want ErrKeyNotConfigured", err)
	}
	retired, err := s.RetireUnreadableSigningKeys(ctx)
	testenv.Must(t, err)
	if len(retired) != 1 || retired[0] != st.KID {
		t.Fatalf("retired %v, want [%s]", retired, st.KID)
	}
	after, fresh, err := s.IssueServiceToken(ctx, "after", time.Hour)
	testenv.Must(t, err)
	if fresh.KID == st.KID {
		t.Errorf("the token after the retirement is signed with the retired key %s", st.KID)
	}
	public, err := auth.NewStore(db).PublicKeys(ctx)
	testenv.Must(t, err)
	for name, token := range map[string]string{"before": before, "after": after} {
		if _, _, err := auth.VerifyServiceToken(token, public, time.Now()); err != nil {
			t.Errorf("the token issued %s the retirement does not verify: %v", name, err)
		}
	}
	if n, err := s.ResealSigningKeys(ctx); err != nil || n != 0 {
		t.Errorf("reseal after the retirement: %d, %v; want 0 (the retired key passed over, the new one current)", n, err)
	}
	if again, err := s.RetireUnreadableSigningKeys(ctx); err != nil || len(again) != 0 {
		t.Errorf("retiring again: %v, %v; want none", again, err)
	}
}

// TestBadSecretKeyNamesItsPosition: a key ParseSecretKeys cannot read is
// named by its place, so that the caller can name the setting.
func TestBadSecretKeyNamesItsPosition(t *testing.T) {
	_, err := auth.ParseSecretKeys(auth.GenerateSecretKey(), auth.GenerateSecretKey(), "short")
	var bad *auth.BadSecretKeyError
	if !errors.As(err, &bad) || bad.Position != 3 {
		t.Errorf("ParseSecretKeys with a bad third key: %v, want a BadSecretKeyError at position 3", err)
	}
}
