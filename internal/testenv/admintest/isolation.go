package admintest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// Isolation is the data of the tests that check that a tenant's users
// reach only their own tenant: plans free and pro; "own-tenant" (on free)
// with a tenant admin and a viewer; "foreign-tenant" (on pro) with a key,
// overrides and an admin of its own, none of which an answer to own's
// users may show; and an operator.
type Isolation struct {
	Free, Pro                             plans.Plan
	Own, Foreign                          tenants.Tenant
	ForeignKey                            tenants.Key
	Operator, Admin, Viewer, ForeignAdmin auth.User
}

// SeedIsolation stores the Isolation data in db.
func SeedIsolation(t testing.TB, db *pgxpool.Pool) Isolation {
	t.Helper()
	ctx := context.Background()
	ps, ts := plans.NewStore(db), tenants.NewStore(db)
	rules := func(limit int64) []plans.Rule {
		return []plans.Rule{{Name: "hourly", Limit: limit, PeriodUS: limiter.HourUS}}
	}
	var in Isolation
	var err error
	if in.Free, err = ps.Create(ctx, plans.Plan{Name: "free", Rules: rules(100)}); err == nil {
		in.Pro, err = ps.Create(ctx, plans.Plan{Name: "pro", Rules: rules(5000)})
	}
	testenv.Must(t, err)
	if in.Own, err = ts.Create(ctx, "own-tenant", in.Free.ID); err == nil {
		in.Foreign, err = ts.Create(ctx, "foreign-tenant", in.Pro.ID)
	}
	testenv.Must(t, err)
	_, in.ForeignKey, err = ts.CreateKey(ctx, in.Foreign.ID, tenants.KeySpec{Name: "foreign secret project"})
	testenv.Must(t, err)
	_, err = ts.SetOverrides(ctx, in.Foreign.ID, rules(1))
	testenv.Must(t, err)
	in.ForeignAdmin = CreateUser(t, db, "admin@foreign.example.com", auth.RoleTenantAdmin, in.Foreign.ID)
	in.Operator = CreateUser(t, db, "ops@example.com", auth.RoleOperator, "")
	in.Admin = CreateUser(t, db, "admin@own.example.com", auth.RoleTenantAdmin, in.Own.ID)
	in.Viewer = CreateUser(t, db, "viewer@own.example.com", auth.RoleTenantViewer, in.Own.ID)
	return in
}
