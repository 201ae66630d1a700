package quota

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
)

// Ops makes every change to quota settings, one method per change, each in
// its own transaction with exactly one audit entry (audit.Update). Whether
// the actor may make it is decided before (internal/access), except the
// one rule that is the feature's own: a tenant's user may lower the
// tenant's spend cap, never raise it.
type Ops struct {
	db postgres.Conn
}

// NewOps returns the quota operations on db (a pool).
func NewOps(db postgres.Conn) *Ops { return &Ops{db: db} }

// PlanSettingsInput is the body of PUT /plans/{planID}/quota.
type PlanSettingsInput struct {
	Thresholds           []Threshold `json:"thresholds"`
	SpendCapDefaultMinor *int64      `json:"spend_cap_default_minor"`
	SpendCapMaxMinor     *int64      `json:"spend_cap_max_minor"`
}

// Validate names every bad field.
func (in PlanSettingsInput) Validate() error {
	f := map[string]string{}
	validateThresholds("thresholds", in.Thresholds, f)
	validCap("spend_cap_default_minor", in.SpendCapDefaultMinor, f)
	validCap("spend_cap_max_minor", in.SpendCapMaxMinor, f)
	if in.SpendCapDefaultMinor != nil && in.SpendCapMaxMinor != nil && *in.SpendCapDefaultMinor > *in.SpendCapMaxMinor {
		f["spend_cap_default_minor"] = "must be at most spend_cap_max_minor"
	}
	return tollgate.Invalid(f)
}

func validCap(field string, v *int64, f map[string]string) {
	if v != nil && (*v < 0 || *v > 1<<53) {
		f[field] = "must be a non-negative integer (minor units) up to 2^53"
	}
}

// SetPlan replaces plan planID's quota settings (plan.quota). An unknown
// plan is ENOTFOUND.
func (o *Ops) SetPlan(ctx context.Context, by audit.Actor, planID int64, in PlanSettingsInput) (PlanSettings, error) {
	if err := in.Validate(); err != nil {
		return PlanSettings{}, err
	}
	get := func(tx pgx.Tx) (PlanSettings, error) {
		if _, err := plans.NewStore(tx).Get(ctx, planID); err != nil {
			return PlanSettings{}, err
		}
		return NewStore(tx).PlanSettings(ctx, planID)
	}
	return audit.Update(ctx, o.db, by, "plan.quota", planAudit, get, func(tx pgx.Tx, _ PlanSettings) (PlanSettings, error) {
		ps := PlanSettings{PlanID: planID, Thresholds: in.Thresholds, SpendCapDefaultMinor: in.SpendCapDefaultMinor,
			SpendCapMaxMinor: in.SpendCapMaxMinor}
		if ps.Thresholds == nil {
			ps.Thresholds = []Threshold{}
		}
		return ps, NewStore(tx).putPlan(ctx, ps)
	})
}

// TenantSettingsInput is the body of PUT /tenants/{tenantID}/quota:
// thresholds null (or absent) for the plan's, spend_cap_minor null for the
// plan's default.
type TenantSettingsInput struct {
	Thresholds    []Threshold `json:"thresholds"`
	SpendCapMinor *int64      `json:"spend_cap_minor"`
}

// SetTenant replaces tenant tenantID's own quota settings (tenant.quota).
// The cap may not exceed the plan's spend_cap_max_minor; a tenant's user
// (by.Operator false) may only lower the cap in force. An unknown tenant
// is ENOTFOUND.
func (o *Ops) SetTenant(ctx context.Context, by audit.Actor, tenantID string, in TenantSettingsInput) (TenantSettings, error) {
	return o.setTenant(ctx, by, tenantID, func(TenantSettings) TenantSettingsInput { return in })
}

// SetTenantThresholds replaces tenant tenantID's own thresholds (nil: the
// plan's apply) and keeps its spend cap (tenant.quota), as SetTenant.
func (o *Ops) SetTenantThresholds(ctx context.Context, by audit.Actor, tenantID string, ts []Threshold) (TenantSettings, error) {
	return o.setTenant(ctx, by, tenantID, func(before TenantSettings) TenantSettingsInput {
		return TenantSettingsInput{Thresholds: ts, SpendCapMinor: before.SpendCapMinor}
	})
}

// SetTenantSpendCap sets tenant tenantID's own spend cap (nil: the plan's
// default) and keeps its thresholds (tenant.quota), as SetTenant.
func (o *Ops) SetTenantSpendCap(ctx context.Context, by audit.Actor, tenantID string, capMinor *int64) (TenantSettings, error) {
	return o.setTenant(ctx, by, tenantID, func(before TenantSettings) TenantSettingsInput {
		return TenantSettingsInput{Thresholds: before.Thresholds, SpendCapMinor: capMinor}
	})
}

// setTenant stores what change makes of the tenant's settings, read in
// the change's own transaction.
func (o *Ops) setTenant(ctx context.Context, by audit.Actor, tenantID string, change func(before TenantSettings) TenantSettingsInput) (TenantSettings, error) {
	var plan PlanSettings
	get := func(tx pgx.Tx) (TenantSettings, error) {
		t, err := tenants.NewStore(tx).Get(ctx, tenantID)
		if err != nil {
			return TenantSettings{}, err
		}
		// The tenant's row FOR SHARE waits for a plan move in flight
		// (tenants.SetPlan locks it FOR UPDATE) and keeps one from
		// starting until this commits: the cap is checked against the
		// plan the tenant is on, in that plan's currency, and a move to
		// another currency sees the cap (and refuses).
		if err := tx.QueryRow(ctx, `SELECT plan_id FROM tenants WHERE id = $1::uuid FOR SHARE`, t.ID).Scan(&t.PlanID); err != nil {
			return TenantSettings{}, fmt.Errorf("quota: lock the tenant: %w", err)
		}
		if plan, err = NewStore(tx).PlanSettings(ctx, t.PlanID); err != nil {
			return TenantSettings{}, err
		}
		return NewStore(tx).TenantSettings(ctx, tenantID)
	}
	return audit.Update(ctx, o.db, by, "tenant.quota", tenantAudit, get, func(tx pgx.Tx, before TenantSettings) (TenantSettings, error) {
		in := change(before)
		f := map[string]string{}
		validateThresholds("thresholds", in.Thresholds, f)
		validCap("spend_cap_minor", in.SpendCapMinor, f)
		if err := tollgate.Invalid(f); err != nil {
			return TenantSettings{}, err
		}
		if err := checkCap(by, plan, before, in.SpendCapMinor); err != nil {
			return TenantSettings{}, err
		}
		ts := TenantSettings{TenantID: tenantID, Thresholds: in.Thresholds, SpendCapMinor: in.SpendCapMinor}
		return ts, NewStore(tx).putTenant(ctx, ts)
	})
}

// checkCap refuses a cap above the plan's maximum and, for a tenant's
// user, any cap above the one in force or the removal of a cap.
func checkCap(by audit.Actor, plan PlanSettings, before TenantSettings, capMinor *int64) error {
	if limit := plan.SpendCapMaxMinor; limit != nil && capMinor != nil && *capMinor > *limit {
		return tollgate.Invalid(map[string]string{"spend_cap_minor": "must be at most the plan's spend_cap_max_minor, " + strconv.FormatInt(*limit, 10)})
	}
	if by.Operator {
		return nil
	}
	current := before.SpendCapMinor
	if current == nil {
		current = plan.SpendCapDefaultMinor
	}
	if current == nil {
		current = plan.SpendCapMaxMinor
	}
	// Keeping the plan's cap (no cap of its own before or after) raises
	// nothing.
	keeps := capMinor == nil && before.SpendCapMinor == nil
	if current != nil && !keeps && (capMinor == nil || *capMinor > *current) {
		return tollgate.Invalid(map[string]string{"spend_cap_minor": "may only be lowered (at most " + strconv.FormatInt(*current, 10) + ")"})
	}
	return nil
}

func planAudit(action string, before, after *PlanSettings) audit.Change {
	ps := audit.Subject(before, after)
	return audit.Change{Action: action, TargetType: "plan", TargetID: strconv.FormatInt(ps.PlanID, 10),
		Before: before, After: after}
}

func tenantAudit(action string, before, after *TenantSettings) audit.Change {
	ts := audit.Subject(before, after)
	return audit.Change{Action: action, TargetType: "tenant", TargetID: ts.TenantID, TenantID: ts.TenantID,
		Before: before, After: after}
}
