// Package auth issues and verifies the credentials of Tollgate's own
// callers: service tokens for the check API (JWTs signed with Ed25519,
// algorithm pinned to EdDSA).
package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Claims of service tokens.
const (
	Issuer        = "tollgate"
	CheckAudience = "tollgate-check"
)

// ServiceToken is the record of a token issued to a check-API caller.
type ServiceToken struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	KID       string     `json:"kid"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// Store keeps signing keys, service tokens and admin users in Postgres.
type Store struct {
	db      postgres.Conn
	secrets *SecretKeys
}

// NewStore returns a Store on db: a pool, or a transaction. Issuing
// service tokens also needs WithSecretKeys.
func NewStore(db postgres.Conn) *Store { return &Store{db: db} }

// WithSecretKeys returns the store sealing and opening signing keys with
// keys.
func (s *Store) WithSecretKeys(keys *SecretKeys) *Store {
	c := *s
	c.secrets = keys
	return &c
}

// signingKeyAAD binds a sealed signing key to its row.
func signingKeyAAD(kid string) []byte { return []byte("tollgate signing key " + kid) }

// signingKey returns the newest unretired key, creating one when none
// exists. Private keys are stored sealed with the secret keys; one stored
// in the clear by an earlier version is sealed on first use.
func (s *Store) signingKey(ctx context.Context) (kid string, priv ed25519.PrivateKey, err error) {
	if s.secrets == nil {
		return "", nil, ErrNoSecretKey
	}
	var raw []byte
	err = s.db.QueryRow(ctx, `SELECT kid, private_key FROM signing_keys WHERE retired_at IS NULL
		ORDER BY created_at DESC LIMIT 1`).Scan(&kid, &raw)
	if err == nil {
		if !isSealed(raw) {
			if err := s.sealSigningKey(ctx, kid, raw); err != nil {
				return "", nil, err
			}
			return kid, ed25519.PrivateKey(raw), nil
		}
		plain, _, err := s.secrets.open(raw, signingKeyAAD(kid))
		if err != nil {
			return "", nil, fmt.Errorf("auth: signing key %s: %w", kid, err)
		}
		return kid, ed25519.PrivateKey(plain), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return "", nil, fmt.Errorf("auth: signing key: %w", err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", nil, fmt.Errorf("auth: generate signing key: %w", err)
	}
	idBytes := make([]byte, 9)
	_, _ = rand.Read(idBytes)
	kid = base64.RawURLEncoding.EncodeToString(idBytes)
	sealed, err := s.secrets.seal(priv, signingKeyAAD(kid))
	if err != nil {
		return "", nil, err
	}
	if _, err := s.db.Exec(ctx, `INSERT INTO signing_keys (kid, public_key, private_key) VALUES ($1, $2, $3)`,
		kid, []byte(pub), sealed); err != nil {
		return "", nil, fmt.Errorf("auth: store signing key: %w", err)
	}
	return kid, priv, nil
}

func (s *Store) sealSigningKey(ctx context.Context, kid string, plain []byte) error {
	sealed, err := s.secrets.seal(plain, signingKeyAAD(kid))
	if err != nil {
		return err
	}
	if _, err := s.db.Exec(ctx, `UPDATE signing_keys SET private_key = $2 WHERE kid = $1`, kid, sealed); err != nil {
		return fmt.Errorf("auth: seal signing key %s: %w", kid, err)
	}
	return nil
}

// ResealSigningKeys seals every stored signing key with the current
// secret key: after TOLLGATE_SECRET_KEY changed (the old one moved to
// TOLLGATE_SECRET_KEY_PREVIOUS), and for keys stored in the clear by an
// earlier version. It returns how many it rewrote; the rest were sealed
// with the current key already, or are retired keys no configured key
// opens (Resealed.Unreadable). An unretired key no configured key opens
// is an error (ErrKeyNotConfigured when it was sealed with a key that is
// not configured): configure that key, or, if it is lost, retire the keys
// it sealed (RetireUnreadableSigningKeys).
func (s *Store) ResealSigningKeys(ctx context.Context) (int, error) {
	r, err := s.resealSigningKeys(ctx)
	return r.Resealed, err
}

// Resealed is what resealing the signing keys did.
type Resealed struct {
	// Resealed counts the keys sealed again with the current secret key,
	// Current those that were sealed with it already.
	Resealed int `json:"resealed"`
	Current  int `json:"current"`
	// Unreadable lists the retired keys that no configured secret key
	// opens (sealed with one that is lost), by kid: they sign nothing
	// more, and are left as they are.
	Unreadable []string `json:"unreadable_retired,omitempty"`
}

func (s *Store) resealSigningKeys(ctx context.Context) (Resealed, error) {
	var res Resealed
	if s.secrets == nil {
		return res, ErrNoSecretKey
	}
	rows, err := s.db.Query(ctx, `SELECT kid, private_key, retired_at IS NOT NULL FROM signing_keys ORDER BY kid FOR UPDATE`)
	if err != nil {
		return res, fmt.Errorf("auth: read signing keys: %w", err)
	}
	type stored struct {
		kid     string
		raw     []byte
		retired bool
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stored, error) {
		var st stored
		return st, r.Scan(&st.kid, &st.raw, &st.retired)
	})
	if err != nil {
		return res, fmt.Errorf("auth: read signing keys: %w", err)
	}
	for _, st := range all {
		plain := st.raw
		if isSealed(st.raw) {
			var current bool
			plain, current, err = s.secrets.open(st.raw, signingKeyAAD(st.kid))
			switch {
			case err != nil && st.retired:
				// Retired: nothing opens it to sign, and nothing need.
				res.Unreadable = append(res.Unreadable, st.kid)
				continue
			case err != nil:
				return res, fmt.Errorf("auth: signing key %s: %w", st.kid, err)
			case current:
				res.Current++
				continue
			}
		}
		if err := s.sealSigningKey(ctx, st.kid, plain); err != nil {
			return res, err
		}
		res.Resealed++
	}
	return res, nil
}

// RetireUnreadableSigningKeys retires every unretired signing key that no
// configured secret key opens — sealed with a secret key that was lost —
// and returns their kids, oldest first (none when every key opens). The
// tokens they signed keep verifying, their public keys being kept in the
// clear; the next token issued is signed with a new key (signingKey makes
// one when none is left). Keys stored in the clear by an earlier version
// open without a key and are kept.
func (s *Store) RetireUnreadableSigningKeys(ctx context.Context) ([]string, error) {
	if s.secrets == nil {
		return nil, ErrNoSecretKey
	}
	rows, err := s.db.Query(ctx, `SELECT kid, private_key FROM signing_keys WHERE retired_at IS NULL
		ORDER BY created_at, kid FOR UPDATE`)
	if err != nil {
		return nil, fmt.Errorf("auth: read signing keys: %w", err)
	}
	type stored struct {
		kid string
		raw []byte
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stored, error) {
		var st stored
		return st, r.Scan(&st.kid, &st.raw)
	})
	if err != nil {
		return nil, fmt.Errorf("auth: read signing keys: %w", err)
	}
	unreadable := []string{}
	for _, st := range all {
		if !isSealed(st.raw) {
			continue
		}
		if _, _, err := s.secrets.open(st.raw, signingKeyAAD(st.kid)); err != nil {
			unreadable = append(unreadable, st.kid)
		}
	}
	if len(unreadable) == 0 {
		return unreadable, nil
	}
	if _, err := s.db.Exec(ctx, `UPDATE signing_keys SET retired_at = now() WHERE kid = ANY($1)`, unreadable); err != nil {
		return nil, fmt.Errorf("auth: retire signing keys: %w", err)
	}
	return unreadable, nil
}

// IssueServiceToken records a token named name valid for ttl (0 = one
// year) and returns it signed. The token is shown once; only its record is
// kept.
func (s *Store) IssueServiceToken(ctx context.Context, name string, ttl time.Duration) (string, ServiceToken, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return "", ServiceToken{}, tollgate.Invalid(map[string]string{"name": "must be 1–200 characters"})
	}
	if ttl <= 0 {
		ttl = 365 * 24 * time.Hour
	}
	kid, priv, err := s.signingKey(ctx)
	if err != nil {
		return "", ServiceToken{}, err
	}
	var st ServiceToken
	now := time.Now().UTC().Truncate(time.Second)
	exp := now.Add(ttl)
	err = s.db.QueryRow(ctx, `INSERT INTO service_tokens (name, kid, created_at, expires_at) VALUES ($1, $2, $3, $4)
		RETURNING id, name, kid, created_at, expires_at, revoked_at`, name, kid, now, exp).
		Scan(&st.ID, &st.Name, &st.KID, &st.CreatedAt, &st.ExpiresAt, &st.RevokedAt)
	if err != nil {
		return "", ServiceToken{}, fmt.Errorf("auth: issue service token: %w", err)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{
		Issuer:    Issuer,
		Subject:   "service:" + name,
		Audience:  jwt.ClaimStrings{CheckAudience},
		ID:        st.ID,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(exp),
	})
	tok.Header["kid"] = kid
	signed, err := tok.SignedString(priv)
	if err != nil {
		return "", ServiceToken{}, fmt.Errorf("auth: sign service token: %w", err)
	}
	return signed, st, nil
}

// RevokeServiceToken revokes the token with id.
func (s *Store) RevokeServiceToken(ctx context.Context, id string) error {
	return postgres.ExecByID(ctx, s.db, `UPDATE service_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1::uuid`, id,
		errServiceTokenNotFound(id), "auth: revoke service token")
}

func errServiceTokenNotFound(id string) error {
	return tollgate.Errorf(tollgate.ENOTFOUND, "service token %s not found", id)
}

// ListServiceTokens returns every service token record, newest first.
func (s *Store) ListServiceTokens(ctx context.Context) ([]ServiceToken, error) {
	rows, err := s.db.Query(ctx, `SELECT id, name, kid, created_at, expires_at, revoked_at
		FROM service_tokens ORDER BY created_at DESC, id`)
	return postgres.Collect(rows, err, func(r pgx.Row) (ServiceToken, error) {
		var st ServiceToken
		err := r.Scan(&st.ID, &st.Name, &st.KID, &st.CreatedAt, &st.ExpiresAt, &st.RevokedAt)
		return st, err
	}, "auth: list service tokens")
}

// PublicKeys returns the public half of every signing key by kid.
func (s *Store) PublicKeys(ctx context.Context) (map[string]ed25519.PublicKey, error) {
	rows, err := s.db.Query(ctx, `SELECT kid, public_key FROM signing_keys`)
	if err != nil {
		return nil, fmt.Errorf("auth: public keys: %w", err)
	}
	defer rows.Close()
	out := map[string]ed25519.PublicKey{}
	for rows.Next() {
		var kid string
		var pub []byte
		if err := rows.Scan(&kid, &pub); err != nil {
			return nil, fmt.Errorf("auth: public keys: %w", err)
		}
		out[kid] = ed25519.PublicKey(pub)
	}
	return out, rows.Err()
}

// ErrBadToken is returned for any token that does not verify; callers get
// no detail on why.
var ErrBadToken = tollgate.Errorf(tollgate.EUNAUTHORIZED, "missing or invalid service token")

// VerifyServiceToken checks the token's signature (EdDSA only, key chosen
// by kid among keys), issuer, audience and expiry at now, and returns its
// ID (jti) and expiry.
func VerifyServiceToken(token string, keys map[string]ed25519.PublicKey, now time.Time) (id string, expires time.Time, err error) {
	var claims jwt.RegisteredClaims
	parsed, err := jwt.ParseWithClaims(token, &claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		key, ok := keys[kid]
		if !ok {
			return nil, errors.New("unknown kid")
		}
		return key, nil
	},
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}),
		jwt.WithIssuer(Issuer),
		jwt.WithAudience(CheckAudience),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	if err != nil || !parsed.Valid || claims.ID == "" {
		return "", time.Time{}, ErrBadToken
	}
	return claims.ID, claims.ExpiresAt.Time, nil
}

const serviceTokenColumns = `id, name, kid, created_at, expires_at, revoked_at`

func scanServiceToken(row pgx.Row) (ServiceToken, error) {
	var st ServiceToken
	err := row.Scan(&st.ID, &st.Name, &st.KID, &st.CreatedAt, &st.ExpiresAt, &st.RevokedAt)
	return st, err
}

// GetServiceToken returns the record of the token with id, or ENOTFOUND.
func (s *Store) GetServiceToken(ctx context.Context, id string) (ServiceToken, error) {
	return postgres.ByID(ctx, s.db, `SELECT `+serviceTokenColumns+` FROM service_tokens WHERE id = $1::uuid`, id,
		scanServiceToken, errServiceTokenNotFound(id), "auth: get service token")
}

// ListServiceTokensPage returns one page of service token records, newest
// first.
func (s *Store) ListServiceTokensPage(ctx context.Context, pr page.Request) (page.Page[ServiceToken], error) {
	var after postgres.NewestFirst
	have, err := after.After(pr)
	if err != nil {
		return page.Page[ServiceToken]{}, err
	}
	rows, err := s.db.Query(ctx, `SELECT `+serviceTokenColumns+` FROM service_tokens
		WHERE NOT $1 OR (created_at, id) < ($2, $3::uuid)
		ORDER BY created_at DESC, id DESC LIMIT $4`, have, after.CreatedAt, postgres.OptionalID(after.ID), pr.Fetch())
	return postgres.CollectPage(pr, rows, err, scanServiceToken, "auth: list service tokens", func(st ServiceToken) any {
		return postgres.NewestFirst{CreatedAt: st.CreatedAt, ID: st.ID}
	})
}
