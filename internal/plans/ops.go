package plans

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/region"
)

// Ops makes every change to plans. Each change is one method: a typed
// input, the actor who makes it, validation that names the offending
// fields (*tollgate.Error with Fields), and its own transaction
// (audit.Apply) in which exactly one audit entry is written. The admin
// API, the console and the CLI call these and nothing else to change a
// plan; whether the actor may is decided before (internal/access). Safe
// for concurrent use.
type Ops struct {
	db      postgres.Conn
	regions region.Config
	now     func() time.Time // the clock of price changes; nil for the database's
}

// NewOps returns the plan operations on db (a pool), for a deployment of
// one region (see InRegions).
func NewOps(db postgres.Conn) *Ops { return &Ops{db: db} }

// InRegions returns the operations for a deployment of the regions c
// names: only then do they accept a rule's global region scope.
func (o *Ops) InRegions(c region.Config) *Ops {
	r := *o
	r.regions = c
	return &r
}

// WithClock returns the operations with price changes taking effect from
// the month now is in (see Store.WithClock): tests set a change's month
// with it.
func (o *Ops) WithClock(now func() time.Time) *Ops {
	r := *o
	r.now = now
	return &r
}

// store returns the plan store on tx, with o's clock.
func (o *Ops) store(tx pgx.Tx) *Store {
	s := NewStore(tx)
	s.now = o.now
	return s
}

// validate checks in as Create and Update take it.
func (o *Ops) validate(in PlanInput) error {
	if err := in.Validate(); err != nil {
		return err
	}
	f := map[string]string{}
	ValidateRegions(o.regions, "rules", in.Rules, f)
	return tollgate.Invalid(f)
}

// PlanInput is a whole plan as a change gives it: the body of POST /plans
// and PUT /plans/{planID}, and the console's plan form. Rules' ids are
// read-only and ignored.
type PlanInput struct {
	Name             string      `json:"name"`
	DisplayName      string      `json:"display_name"`
	Currency         string      `json:"currency"`
	BaseFeeMinor     int64       `json:"base_fee_minor"`
	IncludedUnits    int64       `json:"included_units"`
	OverageUnitMinor int64       `json:"overage_unit_minor"`
	QuotaMode        QuotaMode   `json:"quota_mode"`
	Tiers            []PriceTier `json:"tiers"`
	Rules            []Rule      `json:"rules"`
	Routes           []string    `json:"routes"`
}

// plan returns the plan in describes.
func (in PlanInput) plan() Plan {
	return Plan{Name: in.Name, DisplayName: in.DisplayName, Currency: in.Currency, BaseFeeMinor: in.BaseFeeMinor,
		IncludedUnits: in.IncludedUnits, OverageUnitMinor: in.OverageUnitMinor, QuotaMode: in.QuotaMode,
		Tiers: in.Tiers, Rules: in.Rules, Routes: in.Routes}
}

// Validate checks every field: known algorithm, period > 0, burst ≥ 1,
// resource pattern syntax, route templates, non-negative integer money.
// Field names are the JSON paths ("rules[1].burst", "routes[2]").
func (in PlanInput) Validate() error { return in.plan().WithDefaults().Validate() }

// Create makes a plan (plan.create). A taken name is ECONFLICT.
func (o *Ops) Create(ctx context.Context, by audit.Actor, in PlanInput) (Plan, error) {
	if err := o.validate(in); err != nil {
		return Plan{}, err
	}
	return audit.Create(ctx, o.db, by, "plan.create", PlanAudit,
		func(tx pgx.Tx) (Plan, error) { return o.store(tx).Create(ctx, in.plan()) })
}

// Update replaces plan id as a whole (plan.update): checks see the change
// within a second. An unknown plan is ENOTFOUND.
func (o *Ops) Update(ctx context.Context, by audit.Actor, id int64, in PlanInput) (Plan, error) {
	if err := o.validate(in); err != nil {
		return Plan{}, err
	}
	return audit.Update(ctx, o.db, by, "plan.update", PlanAudit, o.get(ctx, id),
		func(tx pgx.Tx, _ Plan) (Plan, error) { return o.store(tx).Update(ctx, id, in.plan()) })
}

// SetRoutes replaces the route templates of plan id (plan.routes), in
// their order, and nothing else: checks count usage under them within a
// second. Bad templates are EINVALID naming "routes[k]"; an unknown plan
// is ENOTFOUND.
func (o *Ops) SetRoutes(ctx context.Context, by audit.Actor, id int64, routes []string) (Plan, error) {
	if routes == nil {
		routes = []string{}
	}
	f := map[string]string{}
	ValidateRoutes("routes", routes, f)
	if err := tollgate.Invalid(f); err != nil {
		return Plan{}, err
	}
	return audit.Update(ctx, o.db, by, "plan.routes", PlanAudit, o.get(ctx, id),
		func(tx pgx.Tx, _ Plan) (Plan, error) { return o.store(tx).SetRoutes(ctx, id, routes) })
}

// PutRule adds rule to plan id, or replaces the rule of the same name in
// place (plan.rule), and changes nothing else: checks see it within a
// second. An invalid rule is EINVALID naming "rules[k].field"; an unknown
// plan is ENOTFOUND.
func (o *Ops) PutRule(ctx context.Context, by audit.Actor, id int64, rule Rule) (Plan, error) {
	return audit.Update(ctx, o.db, by, "plan.rule", PlanAudit, o.get(ctx, id),
		func(tx pgx.Tx, p Plan) (Plan, error) {
			p.Rules = MergeRules(p.Rules, []Rule{rule})
			p = p.WithDefaults()
			if err := p.Validate(); err != nil {
				return Plan{}, err
			}
			f := map[string]string{}
			ValidateRegions(o.regions, "rules", p.Rules, f)
			if err := tollgate.Invalid(f); err != nil {
				return Plan{}, err
			}
			return o.store(tx).Update(ctx, id, p)
		})
}

// SetArchived archives plan id (plan.archive) or brings it back
// (plan.unarchive).
func (o *Ops) SetArchived(ctx context.Context, by audit.Actor, id int64, archived bool) (Plan, error) {
	action := "plan.unarchive"
	if archived {
		action = "plan.archive"
	}
	return audit.Update(ctx, o.db, by, action, PlanAudit, o.get(ctx, id),
		func(tx pgx.Tx, _ Plan) (Plan, error) { return o.store(tx).SetArchived(ctx, id, archived) })
}

// Delete removes plan id (plan.delete): only a plan no tenant is or ever
// was on; otherwise ECONFLICT (archive it instead).
func (o *Ops) Delete(ctx context.Context, by audit.Actor, id int64) error {
	return audit.Delete(ctx, o.db, by, "plan.delete", PlanAudit, o.get(ctx, id),
		func(tx pgx.Tx, _ Plan) error { return o.store(tx).Delete(ctx, id) })
}

// get reads plan id on a change's transaction.
func (o *Ops) get(ctx context.Context, id int64) func(pgx.Tx) (Plan, error) {
	return func(tx pgx.Tx) (Plan, error) { return o.store(tx).Get(ctx, id) }
}
