package tenants

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/region"
)

// Ops makes every change to tenants and their keys. Each change is one
// method: a typed input, the actor who makes it, validation that names
// the offending fields (*tollgate.Error with Fields), and its own
// transaction (audit.Apply) in which exactly one audit entry is written.
// The admin API, the console and the CLI call these and nothing else to
// change a tenant or a key; whether the actor may is decided before
// (internal/access), and only the role facts a change depends on are
// read from the actor (audit.Actor.Operator). Safe for concurrent use.
type Ops struct {
	db      postgres.Conn
	now     func() time.Time
	regions region.Config
}

// InRegions returns the operations for a deployment of the regions c
// names: only then do override rules take a global region scope.
func (o *Ops) InRegions(c region.Config) *Ops {
	r := *o
	r.regions = c
	return &r
}

// NewOps returns the tenant operations on db (a pool), with the clock now
// (time.Now when nil), for a deployment of one region (see InRegions).
func NewOps(db postgres.Conn, now func() time.Time) *Ops {
	if now == nil {
		now = time.Now
	}
	return &Ops{db: db, now: now}
}

// CreateTenantInput is a new tenant: the body of POST /tenants.
type CreateTenantInput struct {
	Name   string `json:"name"`
	PlanID int64  `json:"plan_id"`
}

// Validate names each invalid field; the name is trimmed first.
func (in *CreateTenantInput) Validate() error {
	f := map[string]string{}
	in.Name = strings.TrimSpace(in.Name)
	if in.Name == "" || len(in.Name) > 200 {
		f["name"] = "must be 1–200 characters"
	}
	if in.PlanID <= 0 {
		f["plan_id"] = "is required"
	}
	return tollgate.Invalid(f)
}

// Create makes a tenant (tenant.create). The plan must exist and not be
// archived.
func (o *Ops) Create(ctx context.Context, by audit.Actor, in CreateTenantInput) (Tenant, error) {
	if err := in.Validate(); err != nil {
		return Tenant{}, err
	}
	return audit.Create(ctx, o.db, by, "tenant.create", TenantAudit,
		func(tx pgx.Tx) (Tenant, error) { return NewStore(tx).Create(ctx, in.Name, in.PlanID) })
}

// SetPlanInput moves a tenant to another plan: the body of POST
// /tenants/{tenantID}/plan.
type SetPlanInput struct {
	PlanID int64 `json:"plan_id"`
	// EffectiveAt is when the new plan starts counting for billing; now
	// when nil. It may lie in the past (after the latest change, and
	// after the latest month closed for billing), not in the future: the
	// limits change at once. A move to a plan of another currency must
	// take effect at the start of a month (00:00 UTC on the 1st), since a
	// month is billed in one currency: give the start of this month.
	EffectiveAt *time.Time `json:"effective_at"`
}

// maxClockSkew is how far in the future effective_at may be, for clients
// whose clocks run a little ahead.
const maxClockSkew = time.Minute

func (in SetPlanInput) validate(now time.Time) error {
	f := map[string]string{}
	if in.PlanID <= 0 {
		f["plan_id"] = "is required"
	}
	if in.EffectiveAt != nil {
		tollgate.CheckTime(f, "effective_at", *in.EffectiveAt)
		if in.EffectiveAt.After(now.Add(maxClockSkew)) {
			f["effective_at"] = "must not be in the future: a plan change takes effect at once"
		}
	}
	return tollgate.Invalid(f)
}

// SetPlan moves tenant id to another plan (tenant.plan_change), recorded
// in its plan history; the entry holds the plan and when it took effect.
// ECONFLICT naming effective_at when that falls in or before a closed
// month, EINVALID naming it when a move to a plan of another currency
// does not take effect at the start of a month (see Store.SetPlan).
func (o *Ops) SetPlan(ctx context.Context, by audit.Actor, id string, in SetPlanInput) (Tenant, error) {
	now := o.now()
	if err := in.validate(now); err != nil {
		return Tenant{}, err
	}
	effective := now
	if in.EffectiveAt != nil {
		effective = *in.EffectiveAt
	}
	describe := func(action string, before, after *Tenant) audit.Change {
		c := TenantAudit(action, before, after)
		c.Before = map[string]any{"plan_id": before.PlanID}
		c.After = map[string]any{"plan_id": after.PlanID, "effective_at": effective.UTC()}
		return c
	}
	return audit.Update(ctx, o.db, by, "tenant.plan_change", describe, o.tenant(ctx, id),
		func(tx pgx.Tx, _ Tenant) (Tenant, error) {
			ts := NewStore(tx)
			if err := ts.SetPlan(ctx, id, in.PlanID, effective); err != nil {
				return Tenant{}, err
			}
			return ts.Get(ctx, id)
		})
}

// Suspend suspends tenant id (tenant.suspend): its checks are denied
// (tenant_suspended) within a second.
func (o *Ops) Suspend(ctx context.Context, by audit.Actor, id string) (Tenant, error) {
	return o.setStatus(ctx, by, id, "tenant.suspend", StatusSuspended, events.TenantSuspended)
}

// Resume makes suspended tenant id active again (tenant.resume).
func (o *Ops) Resume(ctx context.Context, by audit.Actor, id string) (Tenant, error) {
	return o.setStatus(ctx, by, id, "tenant.resume", StatusActive, events.TenantResumed)
}

// setStatus sets tenant id's status, emitting event when it changes.
func (o *Ops) setStatus(ctx context.Context, by audit.Actor, id, action, status, event string) (Tenant, error) {
	return audit.Update(ctx, o.db, by, action, TenantAudit, o.tenant(ctx, id),
		func(tx pgx.Tx, before Tenant) (Tenant, error) {
			t, err := NewStore(tx).SetStatus(ctx, id, status)
			if err != nil || before.Status == t.Status {
				return t, err
			}
			return t, emit(ctx, tx, o.now(), event, id, TenantStatusData{TenantID: id, Name: t.Name, Status: t.Status})
		})
}

// Overrides is a tenant's override rules: the body of GET and PUT
// /tenants/{tenantID}/overrides, and what the audit entry of a change to
// them holds.
type Overrides struct {
	Rules []plans.Rule `json:"rules"`
}

// Validate names each invalid field ("rules[i].field"); a nil list is
// refused (an empty one removes every override).
func (in Overrides) Validate() error {
	if in.Rules == nil {
		return tollgate.Invalid(map[string]string{"rules": "is required (an empty list removes every override)"})
	}
	return ValidateOverrides(in.Rules)
}

// SetOverrides replaces tenant id's override rules as a whole
// (tenant.overrides_set): each replaces the plan rule of its name for
// this tenant, or adds a rule.
func (o *Ops) SetOverrides(ctx context.Context, by audit.Actor, id string, in Overrides) (Overrides, error) {
	if err := in.Validate(); err != nil {
		return Overrides{}, err
	}
	f := map[string]string{}
	plans.ValidateRegions(o.regions, "rules", in.Rules, f)
	if err := tollgate.Invalid(f); err != nil {
		return Overrides{}, err
	}
	describe := func(action string, before, after *[]plans.Rule) audit.Change {
		return audit.Change{Action: action, TargetType: "tenant", TargetID: id, TenantID: id,
			Before: Overrides{Rules: *before}, After: Overrides{Rules: *after}}
	}
	after, err := audit.Update(ctx, o.db, by, "tenant.overrides_set", describe,
		func(tx pgx.Tx) ([]plans.Rule, error) { return NewStore(tx).Overrides(ctx, id) },
		func(tx pgx.Tx, _ []plans.Rule) ([]plans.Rule, error) {
			return NewStore(tx).SetOverrides(ctx, id, in.Rules)
		})
	return Overrides{Rules: after}, err
}

// tenant reads tenant id on a change's transaction.
func (o *Ops) tenant(ctx context.Context, id string) func(pgx.Tx) (Tenant, error) {
	return func(tx pgx.Tx) (Tenant, error) { return NewStore(tx).Get(ctx, id) }
}
