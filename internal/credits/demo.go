package credits

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/internal/postgres"
)

// SeedDemo makes plan planID draw on credits (deny mode, credits.low at
// 2,000 units) unless it has settings, and gives the demo tenant tenantID
// (on it) a month of credits, once:
// a starter pack, a bonus that expired with units left, one that expires
// in five days, daily consumption drawn soonest-expiring first, and an
// adjustment. It does nothing for a tenant that already has an account.
// The counter the checks draw on is rebuilt from this ledger by the
// drainer. db is the seed's transaction.
func SeedDemo(ctx context.Context, db postgres.Conn, planID int64, tenantID string, now time.Time) error {
	if _, err := db.Exec(ctx, `INSERT INTO credit_plan_settings (plan_id, mode, overdraft, low_threshold)
		VALUES ($1, 'deny', 0, 2000) ON CONFLICT (plan_id) DO NOTHING`, planID); err != nil {
		return fmt.Errorf("credits: demo plan: %w", err)
	}
	var exists bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM credit_accounts WHERE tenant_id = $1::uuid)`, tenantID).Scan(&exists); err != nil {
		return fmt.Errorf("credits: demo: %w", err)
	}
	if exists {
		return nil
	}
	s := NewStore(db)
	b, err := s.openBook(ctx, tenantID)
	if err != nil {
		return err
	}
	day := 24 * time.Hour
	start := now.Add(-30 * day).Truncate(time.Hour)
	expired, expiring := start.Add(20*day), now.Add(5*day).Truncate(time.Hour)
	for _, g := range []Grant{
		{Amount: 20_000, Cause: "starter pack (invoice 1042)", CreatedAt: start},
		{Amount: 6_000, ExpiresAt: &expired, Priority: 1, Cause: "launch bonus", CreatedAt: start.Add(time.Hour)},
		{Amount: 4_000, ExpiresAt: &expiring, Cause: "referral bonus", CreatedAt: now.Add(-10 * day)},
	} {
		if _, err := b.grant(ctx, g, KindGrant); err != nil {
			return err
		}
	}
	for d := range 30 {
		at := start.Add(time.Duration(d)*day + 14*time.Hour)
		if !at.Before(now) {
			break
		}
		if _, err := b.expireDue(ctx, at); err != nil {
			return err
		}
		entry := fmt.Sprintf("demo-%d", d)
		if err := b.take(ctx, KindConsumption, int64(180+(d*37)%140), false, "check", &entry, at); err != nil {
			return err
		}
		if d == 12 {
			if _, err := b.giveBack(ctx, KindAdjustment, 250, true, "goodwill credit for the March 12 outage", nil, at.Add(time.Hour), nil); err != nil {
				return err
			}
		}
	}
	if _, err := b.expireDue(ctx, now); err != nil {
		return err
	}
	return b.save(ctx)
}
