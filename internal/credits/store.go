package credits

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Store reads and writes credits in Postgres: plan settings, accounts,
// grants and the ledger. Safe for concurrent use; on a transaction, what
// it writes commits with it.
type Store struct {
	db postgres.Conn
}

// NewStore returns a Store on db: a pool, or a transaction.
func NewStore(db postgres.Conn) *Store { return &Store{db: db} }

// All is every tenant's credits as the check path needs them, by tenant
// ID: tenants whose plan has credit settings only.
type All map[string]*Hot

// LoadAll reads what the check path needs of every tenant on a credit
// plan: the plan's mode and overdraft, the account's line and consumed
// units, and the live grants that expire.
func (s *Store) LoadAll(ctx context.Context) (All, error) {
	rows, err := s.db.Query(ctx, `SELECT t.id::text, p.mode, p.overdraft, coalesce(a.line, 0), coalesce(a.consumed, 0)
		FROM tenants t JOIN credit_plan_settings p ON p.plan_id = t.plan_id
		LEFT JOIN credit_accounts a ON a.tenant_id = t.id`)
	all := All{}
	list, err := postgres.Collect(rows, err, func(r pgx.Row) (string, error) {
		var id string
		h := &Hot{}
		err := r.Scan(&id, &h.Mode, &h.Overdraft, &h.Line, &h.Consumed)
		all[id] = h
		return id, err
	}, "credits: load")
	if err != nil || len(list) == 0 {
		return all, err
	}
	rows, err = s.db.Query(ctx, `SELECT tenant_id::text, expires_at, remaining FROM credit_grants
		WHERE expired_at IS NULL AND expires_at IS NOT NULL AND remaining > 0 ORDER BY expires_at`)
	_, err = postgres.Collect(rows, err, func(r pgx.Row) (string, error) {
		var id string
		var at time.Time
		var remaining int64
		err := r.Scan(&id, &at, &remaining)
		if h := all[id]; h != nil {
			h.Expiring = append(h.Expiring, Expiring{AtUS: at.UnixMicro(), Remaining: remaining})
		}
		return id, err
	}, "credits: load expiring grants")
	for _, h := range all {
		h.Prepare()
	}
	return all, err
}

// PlanSettings returns plan planID's credit settings; ENOTFOUND for a
// plan without them (or no such plan).
func (s *Store) PlanSettings(ctx context.Context, planID int64) (PlanSettings, error) {
	return s.planSettings(ctx, planID, `SELECT mode, overdraft, low_threshold FROM credit_plan_settings WHERE plan_id = $1`,
		"has no credit settings")
}

// PlanSettingsOrOff returns plan planID's credit settings, mode off for a
// plan without them; ENOTFOUND for no such plan.
func (s *Store) PlanSettingsOrOff(ctx context.Context, planID int64) (PlanSettings, error) {
	return s.planSettings(ctx, planID, `SELECT coalesce(c.mode, 'off'), coalesce(c.overdraft, 0), coalesce(c.low_threshold, 0)
		FROM plans p LEFT JOIN credit_plan_settings c ON c.plan_id = p.id WHERE p.id = $1`, "not found")
}

// planSettings reads plan planID's settings with query (mode, overdraft
// and low threshold of plan $1); when it finds no row the error is
// ENOTFOUND, "plan <planID> " then notFound.
func (s *Store) planSettings(ctx context.Context, planID int64, query, notFound string) (PlanSettings, error) {
	ps := PlanSettings{PlanID: planID}
	err := s.db.QueryRow(ctx, query, planID).Scan(&ps.Mode, &ps.Overdraft, &ps.LowThreshold)
	if errors.Is(err, pgx.ErrNoRows) {
		return ps, tollgate.Errorf(tollgate.ENOTFOUND, "plan %d %s", planID, notFound)
	}
	if err != nil {
		return ps, fmt.Errorf("credits: plan %d settings: %w", planID, err)
	}
	return ps, nil
}

// TenantSettings returns the credit settings of tenant tenantID's plan;
// ENOTFOUND when its plan has none.
func (s *Store) TenantSettings(ctx context.Context, tenantID string) (PlanSettings, error) {
	var planID int64
	if err := s.db.QueryRow(ctx, `SELECT plan_id FROM tenants WHERE id = $1::uuid`, tenantID).Scan(&planID); err != nil {
		return PlanSettings{}, notFoundTenant(tenantID, err)
	}
	return s.PlanSettings(ctx, planID)
}

func (s *Store) putPlan(ctx context.Context, ps PlanSettings) error {
	_, err := s.db.Exec(ctx, `INSERT INTO credit_plan_settings (plan_id, mode, overdraft, low_threshold) VALUES ($1, $2, $3, $4)
		ON CONFLICT (plan_id) DO UPDATE SET mode = EXCLUDED.mode, overdraft = EXCLUDED.overdraft,
		low_threshold = EXCLUDED.low_threshold, updated_at = now()`, ps.PlanID, ps.Mode, ps.Overdraft, ps.LowThreshold)
	if err != nil {
		return fmt.Errorf("credits: store plan %d settings: %w", ps.PlanID, err)
	}
	return nil
}

func (s *Store) deletePlan(ctx context.Context, planID int64) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM credit_plan_settings WHERE plan_id = $1`, planID); err != nil {
		return fmt.Errorf("credits: remove plan %d settings: %w", planID, err)
	}
	return nil
}

func notFoundTenant(tenantID string, err error) error {
	if errors.Is(err, pgx.ErrNoRows) || postgres.IsDataException(err) {
		return tollgate.Errorf(tollgate.ENOTFOUND, "tenant %s not found", tenantID)
	}
	return fmt.Errorf("credits: tenant %s: %w", tenantID, err)
}

// Account returns tenant tenantID's account (all zero when it never had
// credits); ENOTFOUND for no such tenant.
func (s *Store) Account(ctx context.Context, tenantID string) (Account, error) {
	if !tollgate.IsUUID(tenantID) {
		return Account{}, tollgate.Errorf(tollgate.ENOTFOUND, "tenant %s not found", tenantID)
	}
	a := Account{TenantID: tenantID, Position: "0-0"}
	err := s.db.QueryRow(ctx, `SELECT coalesce(a.line, 0), coalesce(a.consumed, 0), coalesce(a.debt, 0), coalesce(a.position, '0-0')
		FROM tenants t LEFT JOIN credit_accounts a ON a.tenant_id = t.id WHERE t.id = $1::uuid`, tenantID).
		Scan(&a.Line, &a.Consumed, &a.Debt, &a.Position)
	if err != nil {
		return Account{}, notFoundTenant(tenantID, err)
	}
	return a, nil
}

// account is the row of an account locked for a change (on a
// transaction), with its notification flags.
type account struct {
	Account
	lowNotified, exhaustedNotified bool
	// drainedThroughUS is the store's clock (µs) of the latest drain that
	// had recorded the whole log, as last saved (0: none).
	drainedThroughUS int64
	// logOrigin is the identity of the Redis whose log Position is of
	// (the one the drainer of one region last read; a Redis with another
	// is read from its log's beginning); "" when unknown.
	logOrigin string
}

// lockAccount makes tenant tenantID's account if it has none and locks
// it until the transaction ends: every change to a balance goes through
// it, so changes to one balance run one at a time.
func (s *Store) lockAccount(ctx context.Context, tenantID string) (account, error) {
	if !tollgate.IsUUID(tenantID) {
		return account{}, tollgate.Errorf(tollgate.ENOTFOUND, "tenant %s not found", tenantID)
	}
	if _, err := s.db.Exec(ctx, `INSERT INTO credit_accounts (tenant_id) SELECT id FROM tenants WHERE id = $1::uuid
		ON CONFLICT (tenant_id) DO NOTHING`, tenantID); err != nil {
		return account{}, fmt.Errorf("credits: open account of %s: %w", tenantID, err)
	}
	a := account{Account: Account{TenantID: tenantID}}
	var drained *time.Time
	err := s.db.QueryRow(ctx, `SELECT line, consumed, debt, position, low_notified, exhausted_notified, drained_through,
		coalesce(log_origin, '') FROM credit_accounts WHERE tenant_id = $1::uuid FOR UPDATE`, tenantID).
		Scan(&a.Line, &a.Consumed, &a.Debt, &a.Position, &a.lowNotified, &a.exhaustedNotified, &drained, &a.logOrigin)
	if err != nil {
		return account{}, notFoundTenant(tenantID, err)
	}
	if drained != nil {
		a.drainedThroughUS = drained.UnixMicro()
	}
	return a, nil
}

func (s *Store) saveAccount(ctx context.Context, a account) error {
	var drained *time.Time
	if a.drainedThroughUS != 0 {
		at := time.UnixMicro(a.drainedThroughUS).UTC()
		drained = &at
	}
	_, err := s.db.Exec(ctx, `UPDATE credit_accounts SET line = $2, consumed = $3, debt = $4, position = $5,
		low_notified = $6, exhausted_notified = $7, drained_through = $8, log_origin = nullif($9, ''), updated_at = now()
		WHERE tenant_id = $1::uuid`,
		a.TenantID, a.Line, a.Consumed, a.Debt, a.Position, a.lowNotified, a.exhaustedNotified, drained, a.logOrigin)
	if err != nil {
		return fmt.Errorf("credits: save account of %s: %w", a.TenantID, err)
	}
	return nil
}

const grantColumns = `id::text, tenant_id::text, amount, remaining, priority, expires_at, expired_at, cause, created_at`

func scanGrant(r pgx.Row) (Grant, error) {
	var g Grant
	err := r.Scan(&g.ID, &g.TenantID, &g.Amount, &g.Remaining, &g.Priority, &g.ExpiresAt, &g.ExpiredAt, &g.Cause, &g.CreatedAt)
	return g, err
}

// Grants returns tenant tenantID's grants: live ones in the order they are
// drawn (soonest-expiring first, then higher priority, then older), then
// expired ones, newest first.
func (s *Store) Grants(ctx context.Context, tenantID string) ([]Grant, error) {
	if !tollgate.IsUUID(tenantID) {
		return nil, tollgate.Errorf(tollgate.ENOTFOUND, "tenant %s not found", tenantID)
	}
	rows, err := s.db.Query(ctx, `SELECT `+grantColumns+` FROM credit_grants WHERE tenant_id = $1::uuid
		ORDER BY expired_at IS NOT NULL, expires_at NULLS LAST, priority DESC, created_at, id`, tenantID)
	return postgres.Collect(rows, err, scanGrant, "credits: list grants")
}

// liveGrants returns tenant tenantID's unexpired grants in draw order, locked.
func (s *Store) liveGrants(ctx context.Context, tenantID string) ([]Grant, error) {
	rows, err := s.db.Query(ctx, `SELECT `+grantColumns+` FROM credit_grants WHERE tenant_id = $1::uuid AND expired_at IS NULL
		ORDER BY expires_at NULLS LAST, priority DESC, created_at, id FOR UPDATE`, tenantID)
	return postgres.Collect(rows, err, scanGrant, "credits: live grants")
}

func (s *Store) insertGrant(ctx context.Context, g Grant) (Grant, error) {
	err := s.db.QueryRow(ctx, `INSERT INTO credit_grants (tenant_id, amount, remaining, priority, expires_at, cause, created_at)
		VALUES ($1::uuid, $2, $3, $4, $5, $6, $7) RETURNING id::text`,
		g.TenantID, g.Amount, g.Remaining, g.Priority, g.ExpiresAt, g.Cause, g.CreatedAt).Scan(&g.ID)
	if err != nil {
		return g, fmt.Errorf("credits: insert grant: %w", postgres.Translate(err))
	}
	return g, nil
}

func (s *Store) saveGrant(ctx context.Context, g Grant) error {
	if _, err := s.db.Exec(ctx, `UPDATE credit_grants SET remaining = $2, expired_at = $3 WHERE id = $1::uuid`,
		g.ID, g.Remaining, g.ExpiredAt); err != nil {
		return fmt.Errorf("credits: save grant %s: %w", g.ID, err)
	}
	return nil
}

func (s *Store) appendEntry(ctx context.Context, e Entry) error {
	_, err := s.db.Exec(ctx, `INSERT INTO credit_ledger (tenant_id, kind, units, balance, grant_id, cause, entry, at)
		VALUES ($1::uuid, $2, $3, $4, $5::uuid, $6, $7, $8)`, e.TenantID, e.Kind, e.Units, e.Balance, e.GrantID, e.Cause, e.LogEntry, e.At)
	if err != nil {
		return fmt.Errorf("credits: append to the ledger: %w", err)
	}
	return nil
}

// LedgerFilter narrows a ledger listing.
type LedgerFilter struct {
	// Kind is one of the Kind* values, or "" for all.
	Kind string
}

// Ledger returns one page of tenant tenantID's ledger, newest first.
func (s *Store) Ledger(ctx context.Context, tenantID string, f LedgerFilter, pr page.Request) (page.Page[Entry], error) {
	if !tollgate.IsUUID(tenantID) {
		return page.Page[Entry]{}, tollgate.Errorf(tollgate.ENOTFOUND, "tenant %s not found", tenantID)
	}
	var after struct {
		ID int64 `json:"i"`
	}
	have, err := pr.After(&after)
	if err != nil {
		return page.Page[Entry]{}, err
	}
	rows, err := s.db.Query(ctx, `SELECT id, tenant_id::text, kind, units, balance, grant_id::text, cause, entry, at
		FROM credit_ledger WHERE tenant_id = $1::uuid AND (NOT $2 OR id < $3) AND ($4 = '' OR kind = $4)
		ORDER BY id DESC LIMIT $5`, tenantID, have, after.ID, f.Kind, pr.Fetch())
	return postgres.CollectPage(pr, rows, err, func(r pgx.Row) (Entry, error) {
		var e Entry
		err := r.Scan(&e.ID, &e.TenantID, &e.Kind, &e.Units, &e.Balance, &e.GrantID, &e.Cause, &e.LogEntry, &e.At)
		return e, err
	}, "credits: ledger", func(e Entry) any {
		after.ID = e.ID
		return after
	})
}

// Month is a tenant's credits over a calendar month (UTC), from the
// ledger: what its statement shows.
type Month struct {
	// Granted, Used and Expired are units (Used is consumption less
	// refunds); Adjusted is the sum of adjustments (signed).
	Granted  int64 `json:"granted"`
	Used     int64 `json:"used"`
	Expired  int64 `json:"expired"`
	Adjusted int64 `json:"adjusted"`
	// Overage is the units admitted past the balance in overage mode
	// (billed with the plan's overage pricing); Unpaid the units holds
	// were settled for past the allowed overdraft in deny mode (never
	// billed: the balance stops at −overdraft).
	Overage int64 `json:"overage"`
	Unpaid  int64 `json:"unpaid"`
	// Opening and Closing are the ledger balance at the month's start
	// and end.
	Opening int64 `json:"opening"`
	Closing int64 `json:"closing"`
}

// Month returns tenant tenantID's credits in the month starting at start
// (UTC, the first of a month).
func (s *Store) Month(ctx context.Context, tenantID string, start time.Time) (Month, error) {
	end := start.AddDate(0, 1, 0)
	var m Month
	var used, refunded int64
	err := s.db.QueryRow(ctx, `SELECT
		coalesce(sum(units) FILTER (WHERE kind = 'grant' AND at >= $2), 0),
		coalesce(-sum(units) FILTER (WHERE kind = 'consumption' AND at >= $2), 0),
		coalesce(sum(units) FILTER (WHERE kind = 'refund' AND at >= $2), 0),
		coalesce(-sum(units) FILTER (WHERE kind = 'expiry' AND at >= $2), 0),
		coalesce(sum(units) FILTER (WHERE kind = 'adjustment' AND at >= $2), 0),
		coalesce(sum(units) FILTER (WHERE at < $2), 0),
		coalesce(sum(units), 0)
		FROM credit_ledger WHERE tenant_id = $1::uuid AND at < $3`, tenantID, start, end).
		Scan(&m.Granted, &used, &refunded, &m.Expired, &m.Adjusted, &m.Opening, &m.Closing)
	if err == nil {
		err = s.db.QueryRow(ctx, `SELECT coalesce(sum(overage), 0), coalesce(sum(unpaid), 0) FROM credit_hours
			WHERE tenant_id = $1::uuid AND hour >= $2 AND hour < $3`, tenantID, start, end).Scan(&m.Overage, &m.Unpaid)
	}
	if err != nil {
		return Month{}, fmt.Errorf("credits: month of %s: %w", tenantID, err)
	}
	m.Used = used - refunded
	return m, nil
}

// addHour adds overage and unpaid units to the hour of at.
func (s *Store) addHour(ctx context.Context, tenantID string, at time.Time, overage, unpaid int64) error {
	_, err := s.db.Exec(ctx, `INSERT INTO credit_hours (tenant_id, hour, overage, unpaid) VALUES ($1::uuid, $2, $3, $4)
		ON CONFLICT (tenant_id, hour) DO UPDATE SET overage = credit_hours.overage + EXCLUDED.overage,
		unpaid = credit_hours.unpaid + EXCLUDED.unpaid`, tenantID, at.UTC().Truncate(time.Hour), overage, unpaid)
	if err != nil {
		return fmt.Errorf("credits: add overage: %w", err)
	}
	return nil
}

// Hour is what a tenant's checks did with its balance in one hour (UTC):
// what statements price.
type Hour struct {
	Start time.Time
	// Drawn is the units drawn from the balance (consumption less
	// refunds, by the time of the draw); Overage the units admitted past
	// it; Unpaid the units settled past it in deny mode.
	Drawn, Overage, Unpaid int64
}

// Units is every unit of checks that drew on the balance in the hour:
// Drawn + Overage + Unpaid.
func (h Hour) Units() int64 { return h.Drawn + h.Overage + h.Unpaid }

// Hours returns tenant tenantID's credits by hour in [from, to), in time
// order, hours with nothing left out.
func (s *Store) Hours(ctx context.Context, tenantID string, from, to time.Time) ([]Hour, error) {
	rows, err := s.db.Query(ctx, `SELECT hour, sum(drawn), sum(overage), sum(unpaid) FROM (
			SELECT date_trunc('hour', at, 'UTC') AS hour, -sum(units) AS drawn, 0 AS overage, 0 AS unpaid FROM credit_ledger
			WHERE tenant_id = $1::uuid AND kind IN ('consumption', 'refund') AND at >= $2 AND at < $3 GROUP BY 1
			UNION ALL
			SELECT hour, 0, overage, unpaid FROM credit_hours WHERE tenant_id = $1::uuid AND hour >= $2 AND hour < $3
		) h GROUP BY hour HAVING sum(drawn) <> 0 OR sum(overage) <> 0 OR sum(unpaid) <> 0 ORDER BY hour`, tenantID, from, to)
	return postgres.Collect(rows, err, func(r pgx.Row) (Hour, error) {
		var h Hour
		err := r.Scan(&h.Start, &h.Drawn, &h.Overage, &h.Unpaid)
		h.Start = h.Start.UTC()
		return h, err
	}, "credits: hours")
}

// Tenants returns the IDs of the tenants whose balances the drainer
// looks after: those on a credit plan and those with an account.
func (s *Store) Tenants(ctx context.Context) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT t.id::text FROM tenants t JOIN credit_plan_settings p ON p.plan_id = t.plan_id
		UNION SELECT tenant_id::text FROM credit_accounts`)
	return postgres.Collect(rows, err, func(r pgx.Row) (string, error) {
		var id string
		return id, r.Scan(&id)
	}, "credits: tenants")
}

// Balance is a tenant's credits as operators and the tenant see them.
type Balance struct {
	TenantID string `json:"tenant_id"`
	// Balance is the ledger's (line − consumed): what the drainer has
	// recorded, up to a second behind the checks.
	Balance  int64   `json:"balance"`
	Line     int64   `json:"line"`
	Consumed int64   `json:"consumed"`
	Debt     int64   `json:"debt"`
	Grants   []Grant `json:"grants"`
	// Settings are the tenant's plan's credit settings; nil when its plan
	// does not draw on credits.
	Settings *PlanSettings `json:"settings"`
	// Escrows are the regions' shares of the balance in a deployment of
	// several (none in one region).
	Escrows []Escrow `json:"escrows"`
}

// Balance returns tenant tenantID's account, grants and plan settings;
// ENOTFOUND for no such tenant.
func (s *Store) Balance(ctx context.Context, tenantID string) (Balance, error) {
	a, err := s.Account(ctx, tenantID)
	if err != nil {
		return Balance{}, err
	}
	b := Balance{TenantID: tenantID, Balance: a.Balance(), Line: a.Line, Consumed: a.Consumed, Debt: a.Debt}
	if b.Grants, err = s.Grants(ctx, tenantID); err != nil {
		return Balance{}, err
	}
	if b.Grants == nil {
		b.Grants = []Grant{}
	}
	if b.Escrows, err = s.Escrows(ctx, tenantID); err != nil {
		return Balance{}, err
	}
	if b.Escrows == nil {
		b.Escrows = []Escrow{}
	}
	ps, err := s.TenantSettings(ctx, tenantID)
	switch {
	case err == nil:
		b.Settings = &ps
	case tollgate.ErrorCode(err) != tollgate.ENOTFOUND:
		return Balance{}, err
	}
	return b, nil
}

// ValidateLedgerFilter names a bad kind.
func ValidateLedgerFilter(f LedgerFilter) error {
	switch f.Kind {
	case "", KindGrant, KindConsumption, KindExpiry, KindRefund, KindAdjustment:
		return nil
	}
	return tollgate.Invalid(map[string]string{"kind": "must be grant, consumption, expiry, refund or adjustment"})
}

// ledgerDrawn returns the units the drainer drew on tenantID's balance
// for the hold whose draws' cause is cause ("hold <id>") where the store
// had counted them past the balance: past a region's escrow, or on a
// balance that was unknown (the draws' causes note ledgerDraw).
func (s *Store) ledgerDrawn(ctx context.Context, tenantID, cause string) (int64, error) {
	var n int64
	err := s.db.QueryRow(ctx, `SELECT coalesce(-sum(units), 0)::bigint FROM credit_ledger
		WHERE tenant_id = $1::uuid AND kind = 'consumption' AND cause LIKE 'hold %' AND split_part(cause, ' (', 1) = $2
		AND cause LIKE '% (' || $3 || '%'`, tenantID, cause, ledgerDraw).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("credits: a hold's draws by the ledger: %w", err)
	}
	return n, nil
}

// holdDraws returns what the consumption rows of cause (a hold's, "hold
// <id>", with or without a note after it) drew, by grant, in draw order.
func (s *Store) holdDraws(ctx context.Context, tenantID, cause string) ([]drawnFrom, error) {
	rows, err := s.db.Query(ctx, `SELECT grant_id::text, -units FROM credit_ledger
		WHERE tenant_id = $1::uuid AND kind = 'consumption' AND cause LIKE 'hold %' AND split_part(cause, ' (', 1) = $2
		ORDER BY id`, tenantID, cause)
	return postgres.Collect(rows, err, func(r pgx.Row) (drawnFrom, error) {
		var f drawnFrom
		return f, r.Scan(&f.GrantID, &f.Units)
	}, "credits: a hold's draws")
}
