package tenants

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/postgres"
)

// KeyFilter narrows a key search; zero fields match every key.
type KeyFilter struct {
	// TenantID keeps only the tenant's keys.
	TenantID string
	// Prefix keeps keys whose display prefix starts with it ("tg_4fT9").
	Prefix string
}

// SearchKeys returns one page of the keys matching f, of every tenant
// unless f names one, newest first.
func (s *Store) SearchKeys(ctx context.Context, f KeyFilter, pr page.Request) (page.Page[Key], error) {
	return s.keysPage(ctx, f, pr, "search keys", true)
}

// keysPage returns one page of the keys matching f, newest first; op names
// the call in errors. With anyTenant, f without a tenant matches every
// tenant's keys and a tenant ID that cannot exist matches none; without
// it, f must name a tenant and one that cannot exist is ENOTFOUND.
func (s *Store) keysPage(ctx context.Context, f KeyFilter, pr page.Request, op string, anyTenant bool) (page.Page[Key], error) {
	var after postgres.NewestFirst
	have, err := after.After(pr)
	if err != nil {
		return page.Page[Key]{}, err
	}
	if (f.TenantID != "" || !anyTenant) && !postgres.IsUUID(f.TenantID) {
		if !anyTenant {
			return page.Page[Key]{}, errTenantNotFound(f.TenantID)
		}
		return page.Make(pr, []Key{}, func(Key) any { return after }), nil
	}
	prefix := postgres.LikeEscape(f.Prefix) + "%"
	rows, err := s.db.Query(ctx, `SELECT `+keyColumns+` FROM api_keys
		WHERE ($1::uuid IS NULL OR tenant_id = $1::uuid) AND ($2 = '' OR prefix LIKE $3)
		AND (NOT $4 OR (created_at, id) < ($5, $6::uuid))
		ORDER BY created_at DESC, id DESC LIMIT $7`,
		postgres.OptionalID(f.TenantID), f.Prefix, prefix, have, after.CreatedAt, postgres.OptionalID(after.ID), pr.Fetch())
	return postgres.CollectPage(pr, rows, err, scanKey, "tenants: "+op, func(k Key) any {
		return postgres.NewestFirst{CreatedAt: k.CreatedAt, ID: k.ID}
	})
}

// KeyCount counts a tenant's keys.
type KeyCount struct {
	// Live keys are neither revoked nor expired.
	Live  int64
	Total int64
}

// KeyCounts returns the key counts of the tenants (at now), by tenant ID;
// a tenant without keys is absent.
func (s *Store) KeyCounts(ctx context.Context, tenantIDs []string, now time.Time) (map[string]KeyCount, error) {
	return byIDs(ctx, s.db, "tenants: key counts", tenantIDs, `SELECT tenant_id::text, count(*) FILTER (WHERE revoked_at IS NULL
			AND (expires_at IS NULL OR expires_at > $2)), count(*)
		FROM api_keys WHERE tenant_id = ANY($1::uuid[]) GROUP BY tenant_id`,
		func(r pgx.Row) (id string, c KeyCount, err error) { return id, c, r.Scan(&id, &c.Live, &c.Total) }, now)
}

// Census counts tenants and keys.
type Census struct {
	Tenants, SuspendedTenants int64
	// LiveKeys are neither revoked nor expired; UsedKeys were used since
	// the time asked about.
	LiveKeys, UsedKeys int64
}

// Count returns how many tenants and live keys there are at now, and how
// many keys were used since usedSince (last-used times are written every
// few seconds by the API processes).
func (s *Store) Count(ctx context.Context, now, usedSince time.Time) (Census, error) {
	var c Census
	err := s.db.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM tenants), (SELECT count(*) FROM tenants WHERE status = 'suspended'),
		(SELECT count(*) FROM api_keys WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $1)),
		(SELECT count(*) FROM api_keys WHERE last_used_at >= $2)`, now, usedSince).
		Scan(&c.Tenants, &c.SuspendedTenants, &c.LiveKeys, &c.UsedKeys)
	if err != nil {
		return c, fmt.Errorf("tenants: count: %w", err)
	}
	return c, nil
}

// Names returns the names of the tenants with ids, by ID; unknown IDs
// are absent.
func (s *Store) Names(ctx context.Context, ids []string) (map[string]string, error) {
	return byIDs(ctx, s.db, "tenants: names", ids, `SELECT id::text, name FROM tenants WHERE id = ANY($1::uuid[])`,
		func(r pgx.Row) (id, name string, err error) { return id, name, r.Scan(&id, &name) })
}

// KeysByID returns the keys with ids (of any tenant), by ID.
func (s *Store) KeysByID(ctx context.Context, ids []string) (map[string]Key, error) {
	return byIDs(ctx, s.db, "tenants: keys by id", ids, `SELECT `+keyColumns+` FROM api_keys WHERE id = ANY($1::uuid[])`,
		func(r pgx.Row) (string, Key, error) {
			k, err := scanKey(r)
			return k.ID, k, err
		})
}

// byIDs runs query, whose $1 is the IDs among ids that can name a row (as
// uuid[]) and whose further parameters are args, and returns its rows by
// the ID scan reads from each; op names the call in errors. When no ID
// can name a row there is no query and the map is empty.
func byIDs[T any](ctx context.Context, db postgres.Conn, op string, ids []string, query string,
	scan func(pgx.Row) (string, T, error), args ...any) (map[string]T, error) {
	out := map[string]T{}
	valid := make([]string, 0, len(ids))
	for _, id := range ids {
		if postgres.IsUUID(id) {
			valid = append(valid, id)
		}
	}
	if len(valid) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, query, append([]any{valid}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer rows.Close()
	for rows.Next() {
		id, v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		out[id] = v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

// CountByPlan returns how many tenants are on each plan, by plan ID.
func (s *Store) CountByPlan(ctx context.Context) (map[int64]int64, error) {
	out := map[int64]int64{}
	rows, err := s.db.Query(ctx, `SELECT plan_id, count(*) FROM tenants GROUP BY plan_id`)
	if err != nil {
		return nil, fmt.Errorf("tenants: count by plan: %w", err)
	}
	var id, n int64
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		out[id] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tenants: count by plan: %w", err)
	}
	return out, nil
}

// SetStart moves a tenant's creation and its first plan's start back to
// at, for a tenant with a single plan change (demo and imported tenants
// whose history starts before they were entered); otherwise ECONFLICT.
func (s *Store) SetStart(ctx context.Context, tenantID string, at time.Time) error {
	if !postgres.IsUUID(tenantID) {
		return errTenantNotFound(tenantID)
	}
	return postgres.Tx(ctx, s.db, func(tx pgx.Tx) error {
		var changes int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM tenant_plan_changes WHERE tenant_id = $1::uuid`, tenantID).
			Scan(&changes); err != nil {
			return fmt.Errorf("tenants: set start: %w", err)
		}
		if changes != 1 {
			return tollgate.Errorf(tollgate.ECONFLICT, "tenant %s has %d plan changes: only a single one can be moved", tenantID, changes)
		}
		if _, err := tx.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = $2 WHERE tenant_id = $1::uuid`, tenantID, at); err != nil {
			return fmt.Errorf("tenants: set start: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE tenants SET created_at = least(created_at, $2) WHERE id = $1::uuid`, tenantID, at); err != nil {
			return fmt.Errorf("tenants: set start: %w", err)
		}
		return nil
	})
}
