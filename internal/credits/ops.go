package credits

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
)

// Ops makes every change to credits, one method per change, each in its
// own transaction with exactly one audit entry. Who may make it is decided
// before (internal/access): operators only.
type Ops struct {
	db  postgres.Conn
	now func() time.Time
}

// NewOps returns the credits operations on db (a pool); now is the clock
// (nil: time.Now).
func NewOps(db postgres.Conn, now func() time.Time) *Ops {
	if now == nil {
		now = time.Now
	}
	return &Ops{db: db, now: now}
}

// maxUnits bounds an amount: every balance stays exact in the check
// script's doubles.
const maxUnits int64 = 1 << 50

// GrantInput is the body of POST /tenants/{tenantID}/credits/grants: a
// grant or top-up.
type GrantInput struct {
	Amount int64 `json:"amount"`
	// ExpiresAt is when what is left of it expires; nil: never.
	ExpiresAt *time.Time `json:"expires_at"`
	Priority  int        `json:"priority"`
	Cause     string     `json:"cause"`
}

func validCause(cause string, f map[string]string) string {
	cause = strings.TrimSpace(cause)
	switch {
	case cause == "":
		f["cause"] = "is required"
	case len(cause) > 200:
		f["cause"] = "must be at most 200 characters"
	}
	return cause
}

// Grant credits a tenant with a grant (credits.grant): its amount pays
// any debt first (an overdraft), then adds to the balance; every API
// process draws on it within a second. An unknown tenant is ENOTFOUND.
func (o *Ops) Grant(ctx context.Context, by audit.Actor, tenantID string, in GrantInput) (Grant, error) {
	g, _, err := o.GrantOnce(ctx, by, tenantID, "", in)
	return g, err
}

// GrantOnce is Grant made at most once for key, an idempotency key of the
// tenant's (IdempotencyKeyProblem says which are keys; "" grants every
// time, as Grant). The first request with a key grants; one with the
// same key and the same values (the same amount, expiry instant,
// priority and cause) grants nothing and returns the grant the first
// made, as it was then (replayed true), even once its expiry has passed
// or the key is years old; one with other values, or an adjustment's
// key, is ECONFLICT naming the field IdempotencyKeyHeader. Requests with
// one key wait for each other, so they grant once however many arrive
// together. A request that failed claimed nothing: sent again with its
// key, it is tried anew.
func (o *Ops) GrantOnce(ctx context.Context, by audit.Actor, tenantID, key string, in GrantInput) (g Grant, replayed bool, err error) {
	f := map[string]string{}
	if in.Amount <= 0 || in.Amount > maxUnits {
		f["amount"] = "must be a whole number of units from 1 to 2^50"
	}
	now := o.now()
	expired := in.ExpiresAt != nil && !in.ExpiresAt.After(now)
	if expired {
		f["expires_at"] = "must be in the future"
	}
	if in.ExpiresAt != nil {
		tollgate.CheckTime(f, "expires_at", *in.ExpiresAt)
	}
	if in.Priority < -1000 || in.Priority > 1000 {
		f["priority"] = "must be from -1000 to 1000"
	}
	cause := validCause(in.Cause, f)
	checkKey(key, f)
	invalid := tollgate.Invalid(f)
	// An expiry that has passed since its request was made does not
	// refuse that request's replay: only a first request is refused for it.
	expiredOnly := key != "" && len(f) == 1 && expired && f["expires_at"] != tollgate.TimeRangeProblem
	if invalid != nil && !expiredOnly {
		return Grant{}, false, invalid
	}
	expiresAt := utc(in.ExpiresAt)
	request := fmt.Appendf(nil, "%d\n%s\n%d\n%s", in.Amount, instant(expiresAt), in.Priority, cause)
	return once(ctx, o.db, tenantID, key, "credits.grant", request, func(db postgres.Conn) (Grant, error) {
		if invalid != nil {
			return Grant{}, invalid
		}
		return audit.Create(ctx, db, by, "credits.grant", grantAudit, func(tx pgx.Tx) (Grant, error) {
			b, err := tenantBook(ctx, tx, tenantID)
			if err != nil {
				return Grant{}, err
			}
			g, err := b.grant(ctx, Grant{Amount: in.Amount, ExpiresAt: expiresAt, Priority: in.Priority, Cause: cause, CreatedAt: now}, KindGrant)
			if err != nil {
				return Grant{}, err
			}
			return g, b.save(ctx)
		})
	})
}

// instant writes t (UTC) to the nanosecond, "never" for nil.
func instant(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.Format(time.RFC3339Nano)
}

// tenantBook opens tenant tenantID's book in tx, for a change to its
// balance; an unknown tenant is ENOTFOUND.
func tenantBook(ctx context.Context, tx pgx.Tx, tenantID string) (*book, error) {
	if _, err := tenants.NewStore(tx).Get(ctx, tenantID); err != nil {
		return nil, err
	}
	return NewStore(tx).openBook(ctx, tenantID)
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// AdjustInput is the body of POST /tenants/{tenantID}/credits/adjustments:
// units added to (positive) or taken from (negative) the balance, with
// its cause.
type AdjustInput struct {
	Units int64  `json:"units"`
	Cause string `json:"cause"`
}

// Adjustment is the result of an adjustment: the account after it.
type Adjustment struct {
	TenantID string `json:"tenant_id"`
	Units    int64  `json:"units"`
	Cause    string `json:"cause"`
	Balance  int64  `json:"balance"`
}

// Adjust corrects a tenant's balance (credits.adjust): units taken come
// from its grants soonest-expiring first (past them, the balance goes
// below zero); units added pay any debt, then return to its grants, or
// become a grant that never expires. An unknown tenant is ENOTFOUND.
func (o *Ops) Adjust(ctx context.Context, by audit.Actor, tenantID string, in AdjustInput) (Adjustment, error) {
	a, _, err := o.AdjustOnce(ctx, by, tenantID, "", in)
	return a, err
}

// AdjustOnce is Adjust made at most once for key, as GrantOnce grants: a
// request with the same key and the same units and cause adjusts nothing
// and returns the first one's adjustment (its balance then; replayed
// true); with other values, or a grant's key, it is ECONFLICT.
func (o *Ops) AdjustOnce(ctx context.Context, by audit.Actor, tenantID, key string, in AdjustInput) (a Adjustment, replayed bool, err error) {
	f := map[string]string{}
	if in.Units == 0 || in.Units > maxUnits || in.Units < -maxUnits {
		f["units"] = "must be a non-zero whole number of units within ±2^50"
	}
	cause := validCause(in.Cause, f)
	checkKey(key, f)
	if err := tollgate.Invalid(f); err != nil {
		return Adjustment{}, false, err
	}
	now := o.now()
	request := fmt.Appendf(nil, "%d\n%s", in.Units, cause)
	return once(ctx, o.db, tenantID, key, "credits.adjust", request, func(db postgres.Conn) (Adjustment, error) {
		return audit.Create(ctx, db, by, "credits.adjust", adjustAudit, func(tx pgx.Tx) (Adjustment, error) {
			b, err := tenantBook(ctx, tx, tenantID)
			if err != nil {
				return Adjustment{}, err
			}
			if in.Units > 0 {
				_, err = b.giveBack(ctx, KindAdjustment, in.Units, true, cause, nil, now, nil)
			} else {
				err = b.take(ctx, KindAdjustment, -in.Units, true, cause, nil, now)
			}
			if err == nil {
				err = b.save(ctx)
			}
			return Adjustment{TenantID: tenantID, Units: in.Units, Cause: cause, Balance: b.acct.Balance()}, err
		})
	})
}

// PlanSettingsInput is the body of PUT /plans/{planID}/credits: mode
// "deny" or "overage", or "off" (or "") to stop drawing on credits.
type PlanSettingsInput struct {
	Mode         Mode  `json:"mode"`
	Overdraft    int64 `json:"overdraft"`
	LowThreshold int64 `json:"low_threshold"`
}

// PlanSettingsOff is the mode that removes a plan's credit settings.
const PlanSettingsOff Mode = "off"

// SetPlan replaces plan planID's credit settings (plan.credits). An
// unknown plan is ENOTFOUND.
func (o *Ops) SetPlan(ctx context.Context, by audit.Actor, planID int64, in PlanSettingsInput) (PlanSettings, error) {
	f := map[string]string{}
	switch in.Mode {
	case ModeDeny, ModeOverage, PlanSettingsOff, "":
	default:
		f["mode"] = "must be deny, overage or off"
	}
	if in.Overdraft < 0 || in.Overdraft > maxUnits {
		f["overdraft"] = "must be from 0 to 2^50"
	}
	if in.LowThreshold < 0 || in.LowThreshold > maxUnits {
		f["low_threshold"] = "must be from 0 to 2^50"
	}
	if err := tollgate.Invalid(f); err != nil {
		return PlanSettings{}, err
	}
	get := func(tx pgx.Tx) (PlanSettings, error) {
		if _, err := plans.NewStore(tx).Get(ctx, planID); err != nil {
			return PlanSettings{}, err
		}
		ps, err := NewStore(tx).PlanSettings(ctx, planID)
		if tollgate.ErrorCode(err) == tollgate.ENOTFOUND {
			return PlanSettings{PlanID: planID, Mode: PlanSettingsOff}, nil
		}
		return ps, err
	}
	return audit.Update(ctx, o.db, by, "plan.credits", planAudit, get, func(tx pgx.Tx, _ PlanSettings) (PlanSettings, error) {
		if in.Mode == PlanSettingsOff || in.Mode == "" {
			return PlanSettings{PlanID: planID, Mode: PlanSettingsOff}, NewStore(tx).deletePlan(ctx, planID)
		}
		ps := PlanSettings{PlanID: planID, Mode: in.Mode, Overdraft: in.Overdraft, LowThreshold: in.LowThreshold}
		return ps, NewStore(tx).putPlan(ctx, ps)
	})
}

func grantAudit(action string, before, after *Grant) audit.Change {
	g := audit.Subject(before, after)
	return audit.Change{Action: action, TargetType: "credit_grant", TargetID: g.ID, TenantID: g.TenantID, Before: before, After: after}
}

func adjustAudit(action string, before, after *Adjustment) audit.Change {
	a := audit.Subject(before, after)
	return audit.Change{Action: action, TargetType: "tenant", TargetID: a.TenantID, TenantID: a.TenantID, Before: before, After: after}
}

func planAudit(action string, before, after *PlanSettings) audit.Change {
	ps := audit.Subject(before, after)
	return audit.Change{Action: action, TargetType: "plan", TargetID: strconv.FormatInt(ps.PlanID, 10), Before: before, After: after}
}
