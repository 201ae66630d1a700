package tenants

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/postgres"
)

// EventKeyExpiring is emitted 7 days and 1 day before a key expires.
const EventKeyExpiring = "key.expiring"

// KeyExpiringData is the payload of key.expiring: DaysLeft is the notice
// (7 or 1), ExpiresAt the key's expiry.
type KeyExpiringData struct {
	KeyID     string    `json:"key_id"`
	Name      string    `json:"name"`
	Prefix    string    `json:"prefix"`
	ExpiresAt time.Time `json:"expires_at"`
	DaysLeft  int       `json:"days_left"`
}

// ExpiryLeads are the notices of key.expiring, longest first.
var ExpiryLeads = []int{7, 1}

// KeyExpiryInterval is how often `admin serve` looks for keys to tell of.
const KeyExpiryInterval = time.Minute

// NotifyExpiringKeys emits key.expiring for every live key (not revoked,
// not rotated: key.rotated told of those) that expires within 7 days or 1
// day of now and was not told of that notice for that expiry. A key found
// within 1 day gets the 1-day notice only. Each notice is emitted once per
// key and expiry, however many processes run this at once
// (key_expiry_notices' primary key); an expiry changed later is told
// anew. It returns how many it emitted.
func NotifyExpiringKeys(ctx context.Context, db postgres.Conn, now time.Time) (int, error) {
	now = now.UTC()
	rows, err := db.Query(ctx, `SELECT k.id::text, k.tenant_id::text, k.name, k.prefix, k.expires_at
		FROM api_keys k
		WHERE k.revoked_at IS NULL AND k.rotated_at IS NULL AND k.expires_at > $1 AND k.expires_at <= $2
			AND NOT EXISTS (SELECT 1 FROM key_expiry_notices n WHERE n.key_id = k.id AND n.expires_at = k.expires_at
				AND n.lead_days = CASE WHEN k.expires_at <= $3 THEN 1 ELSE 7 END)
		ORDER BY k.expires_at, k.id LIMIT 1000`,
		now, now.Add(7*24*time.Hour), now.Add(24*time.Hour))
	if err != nil {
		return 0, fmt.Errorf("tenants: expiring keys: %w", err)
	}
	type due struct {
		tenantID string
		data     KeyExpiringData
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (due, error) {
		var d due
		return d, r.Scan(&d.data.KeyID, &d.tenantID, &d.data.Name, &d.data.Prefix, &d.data.ExpiresAt)
	})
	if err != nil {
		return 0, fmt.Errorf("tenants: expiring keys: %w", err)
	}
	n := 0
	for _, d := range list {
		d.data.ExpiresAt = d.data.ExpiresAt.UTC()
		d.data.DaysLeft = 7
		if !d.data.ExpiresAt.After(now.Add(24 * time.Hour)) {
			d.data.DaysLeft = 1
		}
		err := postgres.Tx(ctx, db, func(tx pgx.Tx) error {
			// A key first seen within a day is past its 7-day notice
			// too: that one is recorded, untold.
			tag, err := tx.Exec(ctx, `INSERT INTO key_expiry_notices (key_id, expires_at, lead_days, notified_at)
				SELECT $1::uuid, $2, l, $4 FROM unnest($3::int[]) AS l
				ON CONFLICT DO NOTHING`, d.data.KeyID, d.data.ExpiresAt, leadsAbove(d.data.DaysLeft), now)
			if err != nil {
				return err
			}
			tag, err = tx.Exec(ctx, `INSERT INTO key_expiry_notices (key_id, expires_at, lead_days, notified_at)
				VALUES ($1::uuid, $2, $3, $4) ON CONFLICT DO NOTHING`, d.data.KeyID, d.data.ExpiresAt, d.data.DaysLeft, now)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			n++
			return emit(ctx, tx, now, EventKeyExpiring, d.tenantID, d.data)
		})
		if err != nil {
			return n, fmt.Errorf("tenants: key.expiring of key %s: %w", d.data.KeyID, err)
		}
	}
	return n, nil
}

// leadsAbove returns the leads above days: the notices a key within days
// of its expiry is past.
func leadsAbove(days int) []int32 {
	out := []int32{}
	for _, l := range ExpiryLeads {
		if l > days {
			out = append(out, int32(l))
		}
	}
	return out
}

// RunKeyExpiry calls NotifyExpiringKeys every interval until ctx ends,
// logging failures: the job `admin serve` runs. now is the clock.
func RunKeyExpiry(ctx context.Context, db postgres.Conn, interval time.Duration, now func() time.Time, log *slog.Logger) {
	for {
		if n, err := NotifyExpiringKeys(ctx, db, now()); err != nil && ctx.Err() == nil {
			log.Warn("key expiry notices failed; retrying later", "err", err)
		} else if n > 0 {
			log.Info("key expiry notices", "emitted", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
