package events

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Endpoint secrets are stored sealed with the secret keys
// (TOLLGATE_SECRET_KEY, as the service-token signing keys are): "sealed:"
// and the base64 of auth.SecretKeys.Seal's output, bound to the endpoint's
// ID, so that the current and previous secret may move between columns on
// rotation. A value starting "whsec_" is a secret an earlier version
// stored in the clear; SealSecrets seals those.
const sealedSecretPrefix = "sealed:"

// secretAAD binds a sealed secret to its endpoint.
func secretAAD(endpointID string) []byte { return []byte("tollgate webhook secret " + endpointID) }

// sealSecret returns secret sealed for endpoint endpointID.
func sealSecret(keys *auth.SecretKeys, endpointID, secret string) (string, error) {
	sealed, err := keys.Seal([]byte(secret), secretAAD(endpointID))
	if err != nil {
		return "", fmt.Errorf("events: seal the secret of endpoint %s: %w", endpointID, err)
	}
	return sealedSecretPrefix + base64.StdEncoding.EncodeToString(sealed), nil
}

// openSecret returns the secret stored for endpoint endpointID ("" for
// none) and whether it is sealed with the current key (a secret stored in
// the clear is not).
func openSecret(keys *auth.SecretKeys, endpointID, stored string) (secret string, current bool, err error) {
	if stored == "" || strings.HasPrefix(stored, secretPrefix) {
		return stored, false, nil
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(stored, sealedSecretPrefix))
	if err == nil {
		var plain []byte
		if plain, current, err = keys.Open(raw, secretAAD(endpointID)); err == nil {
			return string(plain), current, nil
		}
	}
	return "", false, fmt.Errorf("events: open the secret of endpoint %s: %w", endpointID, err)
}

// SealSecrets seals with the current secret key every endpoint secret
// (current and previous) stored in the clear or sealed with a previous
// key, and returns how many endpoints it rewrote. `admin serve` runs it at
// start and `admin migrate up` after migrating: after an upgrade from a
// version that stored secrets in the clear, and after TOLLGATE_SECRET_KEY
// was rotated (the old key in TOLLGATE_SECRET_KEY_PREVIOUS). Safe to run
// from several processes at once (rows are locked).
func SealSecrets(ctx context.Context, db postgres.Conn, keys *auth.SecretKeys) (int, error) {
	if keys == nil {
		return 0, auth.ErrNoSecretKey
	}
	n := 0
	err := postgres.Tx(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id::text, secret, coalesce(previous_secret, '') FROM webhook_endpoints
			ORDER BY id FOR UPDATE`)
		if err != nil {
			return err
		}
		type stored struct{ id, secret, previous string }
		all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stored, error) {
			var s stored
			return s, r.Scan(&s.id, &s.secret, &s.previous)
		})
		if err != nil {
			return err
		}
		for _, s := range all {
			secret, cur, err := openSecret(keys, s.id, s.secret)
			if err != nil {
				return err
			}
			previous, prevCur, err := openSecret(keys, s.id, s.previous)
			if err != nil {
				return err
			}
			if cur && (s.previous == "" || prevCur) {
				continue
			}
			if secret, err = sealSecret(keys, s.id, secret); err != nil {
				return err
			}
			var prev *string
			if previous != "" {
				sealed, err := sealSecret(keys, s.id, previous)
				if err != nil {
					return err
				}
				prev = &sealed
			}
			if _, err := tx.Exec(ctx, `UPDATE webhook_endpoints SET secret = $2, previous_secret = $3 WHERE id = $1`,
				s.id, secret, prev); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("events: seal endpoint secrets: %w", err)
	}
	return n, nil
}
