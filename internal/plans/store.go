package plans

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Store keeps plans in Postgres. It is safe for concurrent use.
type Store struct {
	db postgres.Conn
	// now is the clock of price changes (see WithClock); nil for the
	// database's.
	now func() time.Time
}

// NewStore returns a Store on db: a pool, or a transaction.
func NewStore(db postgres.Conn) *Store { return &Store{db: db} }

const planColumns = `id, name, display_name, currency, base_fee_minor, included_units,
	overage_unit_minor, quota_mode, routes, archived_at, created_at, updated_at`

func scanPlan(row pgx.Row) (Plan, error) {
	var p Plan
	err := row.Scan(&p.ID, &p.Name, &p.DisplayName, &p.Currency, &p.BaseFeeMinor, &p.IncludedUnits,
		&p.OverageUnitMinor, &p.QuotaMode, &p.Routes, &p.ArchivedAt, &p.CreatedAt, &p.UpdatedAt)
	return p, err
}

// List returns every plan (archived ones too) with rules and tiers,
// ordered by name.
func (s *Store) List(ctx context.Context) ([]Plan, error) {
	return s.query(ctx, `SELECT `+planColumns+` FROM plans ORDER BY name`)
}

// query returns the plans sql selects (planColumns), with their rules and
// tiers.
func (s *Store) query(ctx context.Context, sql string, args ...any) ([]Plan, error) {
	rows, err := s.db.Query(ctx, sql, args...)
	list, err := postgres.Collect(rows, err, scanPlan, "plans: list")
	if err != nil {
		return nil, err
	}
	if err := s.loadChildren(ctx, list); err != nil {
		return nil, err
	}
	return list, nil
}

// loadChildren fills in the rules and tiers of list's plans.
func (s *Store) loadChildren(ctx context.Context, list []Plan) error {
	ids := make([]int64, len(list))
	byID := make(map[int64]*Plan, len(list))
	for i := range list {
		p := &list[i]
		p.Rules, p.Tiers = []Rule{}, []PriceTier{}
		ids[i], byID[p.ID] = p.ID, p
	}
	rules, err := LoadRules[int64](ctx, s.db, planRules, "plan_id = ANY($1)", ids)
	if err != nil {
		return err
	}
	for id, r := range rules {
		byID[id].Rules = r
	}
	rows, err := s.db.Query(ctx, `SELECT plan_id, up_to, unit_minor FROM plan_price_tiers
		WHERE plan_id = ANY($1) ORDER BY plan_id, position`, ids)
	if err != nil {
		return fmt.Errorf("plans: load tiers: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t PriceTier
		var planID int64
		if err := rows.Scan(&planID, &t.UpTo, &t.UnitMinor); err != nil {
			return fmt.Errorf("plans: scan tier: %w", err)
		}
		byID[planID].Tiers = append(byID[planID].Tiers, t)
	}
	return rows.Err()
}

// Get returns the plan with id, or ENOTFOUND.
func (s *Store) Get(ctx context.Context, id int64) (Plan, error) {
	return s.getWhere(ctx, "id = $1", id)
}

// GetByName returns the plan named name, or ENOTFOUND.
func (s *Store) GetByName(ctx context.Context, name string) (Plan, error) {
	return s.getWhere(ctx, "name = $1", name)
}

func (s *Store) getWhere(ctx context.Context, where string, arg any) (Plan, error) {
	p, err := scanPlan(s.db.QueryRow(ctx, `SELECT `+planColumns+` FROM plans WHERE `+where, arg))
	if errors.Is(err, pgx.ErrNoRows) {
		return Plan{}, tollgate.Errorf(tollgate.ENOTFOUND, "plan %v not found", arg)
	}
	if err != nil {
		return Plan{}, fmt.Errorf("plans: get: %w", err)
	}
	list := []Plan{p}
	if err := s.loadChildren(ctx, list); err != nil {
		return Plan{}, err
	}
	return list[0], nil
}

// Put creates the plan, or replaces the plan of the same name: its pricing,
// rules and tiers. Rules keep their identity by name, so limiter state
// carries over a change of limits. It returns the stored plan. A change
// of currency is refused as Update refuses it.
func (s *Store) Put(ctx context.Context, p Plan) (Plan, error) {
	return s.write(ctx, p, func(tx pgx.Tx, p Plan) (id int64, moved bool, err error) {
		if moved, err = checkCurrencyChange(ctx, tx, "name = $1", p.Name, p.Currency); err != nil {
			return 0, false, err
		}
		err = tx.QueryRow(ctx, `INSERT INTO plans (name, display_name, currency, base_fee_minor,
			included_units, overage_unit_minor, quota_mode, routes) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT (name) DO UPDATE SET display_name = EXCLUDED.display_name,
			currency = EXCLUDED.currency, base_fee_minor = EXCLUDED.base_fee_minor,
			included_units = EXCLUDED.included_units, overage_unit_minor = EXCLUDED.overage_unit_minor,
			quota_mode = EXCLUDED.quota_mode, routes = EXCLUDED.routes, updated_at = now() RETURNING id`,
			p.Name, p.DisplayName, p.Currency, p.BaseFeeMinor, p.IncludedUnits, p.OverageUnitMinor, p.QuotaMode, p.Routes).Scan(&id)
		if err != nil {
			return 0, false, fmt.Errorf("plans: put: %w", err)
		}
		return id, moved, nil
	})
}

// write stores p in one transaction, with its defaults and once valid: row
// writes the plans row of p (so defaulted) and returns its ID and whether
// it moved the plan to another currency, then p's rules and tiers replace
// those stored, and its prices are recorded in the plan's price history
// (recordPrices). It returns the stored plan.
func (s *Store) write(ctx context.Context, p Plan, row func(tx pgx.Tx, p Plan) (int64, bool, error)) (Plan, error) {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return Plan{}, err
	}
	var id int64
	err := postgres.Tx(ctx, s.db, func(tx pgx.Tx) error {
		var err error
		var moved bool
		if id, moved, err = row(tx, p); err != nil {
			return err
		}
		if err := replaceChildren(ctx, tx, id, p); err != nil {
			return err
		}
		return s.recordPrices(ctx, tx, id, p, moved)
	})
	if err != nil {
		return Plan{}, err
	}
	return s.Get(ctx, id)
}

func replaceChildren(ctx context.Context, tx pgx.Tx, id int64, p Plan) error {
	if err := PutRules(ctx, tx, planRules, id, p.Rules); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM plan_price_tiers WHERE plan_id = $1`, id); err != nil {
		return fmt.Errorf("plans: replace tiers: %w", err)
	}
	for i, t := range p.Tiers {
		if _, err := tx.Exec(ctx, `INSERT INTO plan_price_tiers (plan_id, up_to, unit_minor, position)
			VALUES ($1, $2, $3, $4)`, id, t.UpTo, t.UnitMinor, i); err != nil {
			return fmt.Errorf("plans: put tier: %w", err)
		}
	}
	return nil
}

// translate maps constraint violations to caller errors.
func translate(err error, op string) error {
	if postgres.Is(err, postgres.UniqueViolation) {
		return &tollgate.Error{Code: tollgate.ECONFLICT, Message: "a plan with this name exists",
			Fields: map[string]string{"name": "is taken by another plan"}}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Create stores a new plan. A taken name is ECONFLICT naming "name".
func (s *Store) Create(ctx context.Context, p Plan) (Plan, error) {
	return s.write(ctx, p, func(tx pgx.Tx, p Plan) (id int64, moved bool, err error) {
		err = tx.QueryRow(ctx, `INSERT INTO plans (name, display_name, currency, base_fee_minor,
			included_units, overage_unit_minor, quota_mode, routes) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
			p.Name, p.DisplayName, p.Currency, p.BaseFeeMinor, p.IncludedUnits, p.OverageUnitMinor, p.QuotaMode, p.Routes).Scan(&id)
		if err != nil {
			return 0, false, translate(err, "plans: create")
		}
		return id, false, nil
	})
}

// Update replaces the plan with id: name, pricing, tiers and rules. Rules
// keep their identity (and limiter state) by name. It returns the stored
// plan; an unknown id is ENOTFOUND, a taken name ECONFLICT. New prices
// bill from the start of the current month (UTC): earlier months keep
// theirs (see Plan.In). The currency cannot change while a tenant is on
// the plan, or was on it in a month not yet closed (EINVALID naming
// "currency"): it has no history, so those months' statements would
// change currency. Nor can it while the plan has a self-serve top-up
// price or spend caps, amounts kept without a currency of their own
// (checkAmountsOutside).
func (s *Store) Update(ctx context.Context, id int64, p Plan) (Plan, error) {
	return s.write(ctx, p, func(tx pgx.Tx, p Plan) (int64, bool, error) {
		moved, err := checkCurrencyChange(ctx, tx, "id = $1", id, p.Currency)
		if err != nil {
			return 0, false, err
		}
		tag, err := tx.Exec(ctx, `UPDATE plans SET name = $2, display_name = $3, currency = $4,
			base_fee_minor = $5, included_units = $6, overage_unit_minor = $7, quota_mode = $8,
			routes = $9, updated_at = now() WHERE id = $1`,
			id, p.Name, p.DisplayName, p.Currency, p.BaseFeeMinor, p.IncludedUnits, p.OverageUnitMinor, p.QuotaMode, p.Routes)
		if err != nil {
			return 0, false, translate(err, "plans: update")
		}
		if tag.RowsAffected() == 0 {
			return 0, false, tollgate.Errorf(tollgate.ENOTFOUND, "plan %d not found", id)
		}
		return id, moved, nil
	})
}

// checkCurrencyChange refuses to give the plan where selects (by id or
// name) the currency currency while it bills a month not yet closed: a
// tenant is on it, or its plan history has it in a month that is not
// closed. Statements of open months take the plan's currency as it is
// now (prices have a history, the currency none), so such a change would
// reprice those months in another currency, and mix currencies in a
// month whose other spans are on other plans, which no statement can
// show and which keeps the month from being closed for every tenant. Closed months' statements are frozen
// and keep their currency. It locks the plan's row (FOR UPDATE), which
// waits for moves to the plan in flight (tenants.Store.SetPlan and the
// tenant and plan history inserts lock it shared) and keeps new ones out
// until the change commits. A plan that does not exist yet has nothing
// to check.
func checkCurrencyChange(ctx context.Context, tx pgx.Tx, where string, arg any, currency string) (moved bool, err error) {
	var id int64
	var stored string
	err = tx.QueryRow(ctx, `SELECT id, currency FROM plans WHERE `+where+` FOR UPDATE`, arg).Scan(&id, &stored)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && stored == currency) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("plans: currency: %w", err)
	}
	var onIt, billing bool
	// A span of the plan is from its change to the tenant's next one (or
	// on, for the tenant's current plan); it bills every UTC month it
	// overlaps.
	err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE plan_id = $1), EXISTS (
		SELECT 1 FROM (
			SELECT c.plan_id, c.effective_at AS span_from,
				lead(c.effective_at) OVER (PARTITION BY c.tenant_id ORDER BY c.effective_at, c.id) AS span_to
			FROM tenant_plan_changes c
			WHERE c.tenant_id IN (SELECT tenant_id FROM tenant_plan_changes WHERE plan_id = $1)) s
		WHERE s.plan_id = $1 AND (s.span_to IS NULL OR (s.span_to > s.span_from AND EXISTS (
			SELECT 1 FROM generate_series(date_trunc('month', s.span_from AT TIME ZONE 'UTC'),
				date_trunc('month', (s.span_to - interval '1 microsecond') AT TIME ZONE 'UTC'), interval '1 month') AS m(month)
			WHERE m.month::date NOT IN (SELECT month FROM usage_closed_months)))))`, id).Scan(&onIt, &billing)
	if err != nil {
		return false, fmt.Errorf("plans: currency: %w", err)
	}
	var why, remedy string
	switch {
	case onIt:
		why, remedy = "tenants are on this plan", "create a plan in "+currency+" and move them to it at the start of a month"
	case billing:
		why, remedy = "tenants were on this plan in a month that is not closed yet", "close that month first"
	default:
		return true, checkAmountsOutside(ctx, tx, id, stored, currency)
	}
	return false, &tollgate.Error{Code: tollgate.EINVALID,
		Message: "the plan's currency cannot change while " + why + ", whose statements would change currency: " + remedy,
		Fields:  map[string]string{"currency": "cannot change from " + stored + " while " + why + ": " + remedy}}
}

// checkAmountsOutside refuses to move plan id from currency from to
// currency to while it has an amount of money kept outside the plans
// table, which has no currency of its own and would be read in the new
// one (2 cents read as 2 won): its self-serve top-up price (plan_billing,
// billing's) and its tenants' default and largest spend caps
// (quota_plan_settings, quota's). The operator clears them, changes the
// currency, then sets them again in the new one. The rows are read FOR
// SHARE, so that a change to them waits for the currency's to commit;
// a first row's insert waits anyway for the plan's row, which the caller
// holds FOR UPDATE. A plan without them has nothing to check.
func checkAmountsOutside(ctx context.Context, tx pgx.Tx, id int64, from, to string) error {
	var topUp, capDefault, capMax *int64
	err := tx.QueryRow(ctx, `SELECT top_up_unit_minor FROM plan_billing WHERE plan_id = $1 FOR SHARE`, id).Scan(&topUp)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("plans: currency: top-up price: %w", err)
	}
	err = tx.QueryRow(ctx, `SELECT spend_cap_default_minor, spend_cap_max_minor FROM quota_plan_settings WHERE plan_id = $1 FOR SHARE`, id).
		Scan(&capDefault, &capMax)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("plans: currency: spend caps: %w", err)
	}
	var held, clear []string
	if topUp != nil {
		held = append(held, fmt.Sprintf("a self-serve top-up price (top_up_unit_minor %d)", *topUp))
		clear = append(clear, "the top-up price (admin plans billing --top-up-unit-minor none; top_up_unit_minor null in the plan's billing settings)")
	}
	if capDefault != nil || capMax != nil {
		held = append(held, fmt.Sprintf("spend caps for its tenants (spend_cap_default_minor %s, spend_cap_max_minor %s)",
			formatMinor(capDefault), formatMinor(capMax)))
		clear = append(clear, "the spend caps (admin plans quota without --spend-cap-default and --spend-cap-max; null in the plan's quota settings)")
	}
	if len(held) == 0 {
		return nil
	}
	why := "the plan has " + strings.Join(held, " and ") + " in minor units of " + from + ", which " + to + " would read as its own"
	remedy := "clear " + strings.Join(clear, " and ") + ", change the currency, then set them again in " + to
	return &tollgate.Error{Code: tollgate.EINVALID,
		Message: "the plan's currency cannot change while " + why + ": " + remedy,
		Fields:  map[string]string{"currency": "cannot change from " + from + " while " + why + ": " + remedy}}
}

// formatMinor writes an optional amount: "null" for none.
func formatMinor(v *int64) string {
	if v == nil {
		return "null"
	}
	return strconv.FormatInt(*v, 10)
}

// SetRoutes replaces the plan's route templates (valid ones: see
// ValidateRoutes) and returns the stored plan; an unknown id is
// ENOTFOUND.
func (s *Store) SetRoutes(ctx context.Context, id int64, routes []string) (Plan, error) {
	tag, err := s.db.Exec(ctx, `UPDATE plans SET routes = $2, updated_at = now() WHERE id = $1`, id, routes)
	if err != nil {
		return Plan{}, fmt.Errorf("plans: set routes: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return Plan{}, tollgate.Errorf(tollgate.ENOTFOUND, "plan %d not found", id)
	}
	return s.Get(ctx, id)
}

// SetArchived archives the plan (archived true) or restores it. An archived
// plan keeps its tenants but cannot be assigned to more. Archiving twice
// keeps the first time.
func (s *Store) SetArchived(ctx context.Context, id int64, archived bool) (Plan, error) {
	tag, err := s.db.Exec(ctx, `UPDATE plans SET archived_at = CASE WHEN $2 THEN coalesce(archived_at, now()) END,
		updated_at = now() WHERE id = $1`, id, archived)
	if err != nil {
		return Plan{}, fmt.Errorf("plans: archive: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return Plan{}, tollgate.Errorf(tollgate.ENOTFOUND, "plan %d not found", id)
	}
	return s.Get(ctx, id)
}

// Delete removes a plan that no tenant is on or ever was (its history is
// billing record). Otherwise it is ECONFLICT: archive the plan instead.
func (s *Store) Delete(ctx context.Context, id int64) error {
	var inUse, inHistory bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE plan_id = $1),
		EXISTS (SELECT 1 FROM tenant_plan_changes WHERE plan_id = $1)`, id).Scan(&inUse, &inHistory)
	if err != nil {
		return fmt.Errorf("plans: delete: %w", err)
	}
	switch {
	case inUse:
		return tollgate.Errorf(tollgate.ECONFLICT, "plan %d is in use by a tenant: archive it instead", id)
	case inHistory:
		return tollgate.Errorf(tollgate.ECONFLICT, "plan %d is in a tenant's plan history: archive it instead", id)
	}
	tag, err := s.db.Exec(ctx, `DELETE FROM plans WHERE id = $1`, id)
	if postgres.Is(err, postgres.ForeignKeyViolation) { // a tenant took it meanwhile
		return tollgate.Errorf(tollgate.ECONFLICT, "plan %d is in use: archive it instead", id)
	}
	if err != nil {
		return fmt.Errorf("plans: delete: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return tollgate.Errorf(tollgate.ENOTFOUND, "plan %d not found", id)
	}
	return nil
}

// Filter narrows a plan listing.
type Filter struct {
	// Archived, when set, keeps only archived (true) or active (false) plans.
	Archived *bool
}

// ListPage returns one page of plans matching f, ordered by name.
func (s *Store) ListPage(ctx context.Context, f Filter, pr page.Request) (page.Page[Plan], error) {
	var after postgres.ByName
	if _, err := pr.After(&after); err != nil {
		return page.Page[Plan]{}, err
	}
	list, err := s.query(ctx, `SELECT `+planColumns+` FROM plans
		WHERE name > $1 AND ($2::boolean IS NULL OR (archived_at IS NOT NULL) = $2)
		ORDER BY name LIMIT $3`, after.Name, f.Archived, pr.Fetch())
	if err != nil {
		return page.Page[Plan]{}, err
	}
	return page.Make(pr, list, func(p Plan) any { return postgres.ByName{Name: p.Name} }), nil
}
