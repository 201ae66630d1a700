package credits

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
)

// IdempotencyKeyHeader is the HTTP header that carries a grant's or an
// adjustment's idempotency key, and the field that problems with a key
// name (EINVALID, ECONFLICT), wherever the key came from.
const IdempotencyKeyHeader = "Idempotency-Key"

// MaxIdempotencyKeyLen is the longest idempotency key, in characters.
const MaxIdempotencyKeyLen = 200

// IdempotencyKeyProblem says what is wrong with key as an idempotency key,
// "" when nothing is: a key is 1 to MaxIdempotencyKeyLen printable ASCII
// characters (space to tilde), such as a UUID or an order's reference.
func IdempotencyKeyProblem(key string) string {
	const problem = "must be 1 to 200 printable ASCII characters"
	if len(key) == 0 || len(key) > MaxIdempotencyKeyLen {
		return problem
	}
	for i := 0; i < len(key); i++ {
		if key[i] < ' ' || key[i] > '~' {
			return problem
		}
	}
	return ""
}

// checkKey adds a problem with key, when it is set, to f.
func checkKey(key string, f map[string]string) {
	if key == "" {
		return
	}
	if p := IdempotencyKeyProblem(key); p != "" {
		f[IdempotencyKeyHeader] = p
	}
}

// errKeyReused is the answer to a key sent again with another request.
func errKeyReused() error {
	return &tollgate.Error{Code: tollgate.ECONFLICT,
		Message: "this Idempotency-Key was already used for another request to this tenant; send a new key with a new request",
		Fields:  map[string]string{IdempotencyKeyHeader: "was used for another request"}}
}

// once makes change, the change to tenant tenantID's balance that action
// names ("credits.grant", "credits.adjust") with the values request
// holds, at most once for key; without a key, every time. The first
// request with a key claims it in the transaction change runs in, so a
// concurrent one with the same key waits until it ends: if it made the
// change, that one answers what it made (replayed true, change not run,
// nothing audited), or ECONFLICT when its action or values differ; if it
// failed, the key was never claimed and the next request tries anew. An
// unknown tenant is ENOTFOUND, claiming nothing. change runs its audited
// change on db (a transaction when there is a key).
func once[T any](ctx context.Context, db postgres.Conn, tenantID, key, action string, request []byte,
	change func(db postgres.Conn) (T, error)) (v T, replayed bool, err error) {
	if key == "" {
		v, err = change(db)
		return v, false, err
	}
	hash := sha256.Sum256(append([]byte(action+"\n"), request...))
	err = postgres.Tx(ctx, db, func(tx pgx.Tx) error {
		// A key belongs to a tenant that exists: its row references it.
		if _, err := tenants.NewStore(tx).Get(ctx, tenantID); err != nil {
			return err
		}
		s := NewStore(tx)
		claimed, err := s.claimKey(ctx, tenantID, key, action, hash[:])
		if err != nil {
			return err
		}
		if !claimed {
			replayed = true
			return s.keyed(ctx, tenantID, key, action, hash[:], &v)
		}
		if v, err = change(tx); err != nil {
			return err
		}
		return s.keepResult(ctx, tenantID, key, v)
	})
	return v, replayed, err
}

// claimKey makes tenantID's key the key of a request (action, hash) in
// the store's transaction: false when another transaction made it
// before, once that one committed (the primary key makes a concurrent
// claim wait for it).
func (s *Store) claimKey(ctx context.Context, tenantID, key, action string, hash []byte) (bool, error) {
	tag, err := s.db.Exec(ctx, `INSERT INTO credit_idempotency_keys (tenant_id, key, action, request_hash)
		VALUES ($1::uuid, $2, $3, $4) ON CONFLICT (tenant_id, key) DO NOTHING`, tenantID, key, action, hash)
	if err != nil {
		return false, fmt.Errorf("credits: claim idempotency key: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// keyed reads into result what the request that claimed tenantID's key
// made; ECONFLICT (errKeyReused) when that request was not action with
// the values of hash.
func (s *Store) keyed(ctx context.Context, tenantID, key, action string, hash []byte, result any) error {
	var (
		madeBy string
		made   []byte
		answer []byte
	)
	err := s.db.QueryRow(ctx, `SELECT action, request_hash, result FROM credit_idempotency_keys
		WHERE tenant_id = $1::uuid AND key = $2`, tenantID, key).Scan(&madeBy, &made, &answer)
	switch {
	case errors.Is(err, pgx.ErrNoRows), err == nil && answer == nil:
		// A claim commits with its answer, and one rolled back leaves no
		// row: neither can happen.
		return fmt.Errorf("credits: idempotency key of %s claimed without an answer", tenantID)
	case err != nil:
		return fmt.Errorf("credits: read idempotency key: %w", err)
	}
	if madeBy != action || string(made) != string(hash) {
		return errKeyReused()
	}
	if err := json.Unmarshal(answer, result); err != nil {
		return fmt.Errorf("credits: idempotency key's answer: %w", err)
	}
	return nil
}

// keepResult stores result as the answer of the request that claimed
// tenantID's key.
func (s *Store) keepResult(ctx context.Context, tenantID, key string, result any) error {
	answer, err := json.Marshal(result)
	if err == nil {
		_, err = s.db.Exec(ctx, `UPDATE credit_idempotency_keys SET result = $3::jsonb WHERE tenant_id = $1::uuid AND key = $2`,
			tenantID, key, string(answer))
	}
	if err != nil {
		return fmt.Errorf("credits: keep idempotency key's answer: %w", err)
	}
	return nil
}
