package billing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
)

// MaxDunningGrace is the longest dunning grace a plan may have.
const MaxDunningGrace = 365 * 24 * time.Hour

// PlanBilling is a plan's billing settings: how long dunning waits
// before it suspends the plan's tenants, and the price its tenant admins
// pay for a prepaid credit unit they buy themselves.
type PlanBilling struct {
	PlanID int64 `json:"plan_id"`
	// DunningGraceS is how long after an invoice's payment failed a
	// tenant on the plan is suspended, in seconds: null for the server's
	// default (TOLLGATE_INVOICE_DUNNING_GRACE), 0 for never.
	DunningGraceS *int64 `json:"dunning_grace_s"`
	// EffectiveDunningGraceS is the grace dunning applies to the plan's
	// tenants now: the plan's, or the server's default; 0 when it never
	// suspends them.
	EffectiveDunningGraceS int64 `json:"effective_dunning_grace_s"`
	// TopUpUnitMinor is the price of one prepaid credit unit, in minor
	// units of the plan's currency, when the tenant's own admins buy
	// credits (a top-up's price is units × this); null when they may not.
	// Operators may set any price on a top-up they open. The plan's
	// currency cannot change while it has one (plans.Store.Update): the
	// price would be read in the new currency.
	TopUpUnitMinor *int64 `json:"top_up_unit_minor"`
}

// PlanBillingInput is the body of PUT /plans/{planID}/billing: the
// plan's billing settings, replacing the ones it had (null or absent:
// the server's default grace; no self-serve top-ups).
type PlanBillingInput struct {
	DunningGraceS  *int64 `json:"dunning_grace_s"`
	TopUpUnitMinor *int64 `json:"top_up_unit_minor"`
}

func (in PlanBillingInput) validate() error {
	f := map[string]string{}
	if g := in.DunningGraceS; g != nil && (*g < 0 || *g > int64(MaxDunningGrace/time.Second)) {
		f["dunning_grace_s"] = fmt.Sprintf("must be null (the server's default), 0 (never suspend) or seconds up to %d", int64(MaxDunningGrace/time.Second))
	}
	if p := in.TopUpUnitMinor; p != nil && (*p <= 0 || *p > 1<<50) {
		f["top_up_unit_minor"] = "must be null (no self-serve top-ups) or a positive amount in minor units"
	}
	return tollgate.Invalid(f)
}

func planBillingAudit(action string, before, after *PlanBilling) audit.Change {
	p := audit.Subject(before, after)
	return audit.Change{Action: action, TargetType: "plan", TargetID: strconv.FormatInt(p.PlanID, 10),
		Before: before, After: after}
}

// defaultGraceS is the server's dunning grace in seconds (0: off).
func (inv *Invoicing) defaultGraceS() int64 {
	if inv == nil || inv.cfg.DunningGrace <= 0 {
		return 0
	}
	return max(int64(inv.cfg.DunningGrace/time.Second), 1)
}

// PlanBilling returns plan planID's billing settings (the defaults when
// it has none); ENOTFOUND for an unknown plan.
func (inv *Invoicing) PlanBilling(ctx context.Context, planID int64) (PlanBilling, error) {
	return inv.planBilling(ctx, inv.db, planID)
}

func (inv *Invoicing) planBilling(ctx context.Context, db postgres.Conn, planID int64) (PlanBilling, error) {
	if _, err := plans.NewStore(db).Get(ctx, planID); err != nil {
		return PlanBilling{}, err
	}
	pb := PlanBilling{PlanID: planID}
	err := db.QueryRow(ctx, `SELECT dunning_grace_s, top_up_unit_minor FROM plan_billing WHERE plan_id = $1`, planID).
		Scan(&pb.DunningGraceS, &pb.TopUpUnitMinor)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return pb, fmt.Errorf("billing: plan billing: %w", err)
	}
	pb.EffectiveDunningGraceS = inv.defaultGraceS()
	if pb.DunningGraceS != nil {
		pb.EffectiveDunningGraceS = *pb.DunningGraceS
	}
	return pb, nil
}

// SetPlanBilling replaces plan planID's billing settings (plan.billing):
// its dunning grace and its self-serve top-up price. Dunning applies the
// grace of a tenant's plan from its next run. ENOTFOUND for an unknown
// plan.
func (inv *Invoicing) SetPlanBilling(ctx context.Context, by audit.Actor, planID int64, in PlanBillingInput) (PlanBilling, error) {
	if err := in.validate(); err != nil {
		return PlanBilling{}, err
	}
	get := func(tx pgx.Tx) (PlanBilling, error) { return inv.planBilling(ctx, tx, planID) }
	return audit.Update(ctx, inv.db, by, "plan.billing", planBillingAudit, get, func(tx pgx.Tx, _ PlanBilling) (PlanBilling, error) {
		var err error
		if in.DunningGraceS == nil && in.TopUpUnitMinor == nil {
			_, err = tx.Exec(ctx, `DELETE FROM plan_billing WHERE plan_id = $1`, planID)
		} else {
			_, err = tx.Exec(ctx, `INSERT INTO plan_billing (plan_id, dunning_grace_s, top_up_unit_minor) VALUES ($1, $2, $3)
				ON CONFLICT (plan_id) DO UPDATE SET dunning_grace_s = excluded.dunning_grace_s,
				top_up_unit_minor = excluded.top_up_unit_minor, updated_at = now()`, planID, in.DunningGraceS, in.TopUpUnitMinor)
		}
		if err != nil {
			return PlanBilling{}, fmt.Errorf("billing: set plan billing: %w", err)
		}
		return inv.planBilling(ctx, tx, planID)
	})
}

// ParseDunningGrace reads a plan's dunning grace as the CLI and the
// console take it: "default" (or "") for the server's default (nil),
// "off" (or "0") for never, or a duration such as 72h.
func ParseDunningGrace(s string) (*int64, error) {
	switch s {
	case "", "default":
		return nil, nil
	case "off", "0", "never":
		zero := int64(0)
		return &zero, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Second || d > MaxDunningGrace {
		return nil, fmt.Errorf("must be default, off, or a duration from 1s to %s such as 72h", MaxDunningGrace)
	}
	secs := int64(d / time.Second)
	return &secs, nil
}

// FormatDunningGrace writes a grace in seconds as ParseDunningGrace reads
// it: "default" for nil, "off" for 0, else a duration.
func FormatDunningGrace(s *int64) string {
	switch {
	case s == nil:
		return "default"
	case *s == 0:
		return "off"
	}
	return (time.Duration(*s) * time.Second).String()
}
