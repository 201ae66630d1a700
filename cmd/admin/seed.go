package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
)

func seedCommand() command {
	return command{
		name:    "seed demo",
		summary: "create the demo plans and tenant (idempotent); issue fresh demo keys and a service token and print them",
		flags: func(fs *flag.FlagSet) func(context.Context, *env) error {
			asJSON := fs.Bool("json", false, `print {"service_token": …, "keys": {"free": …, "pro": …, "enterprise": …}, "users": {"operator": {…}, "tenant_admin": {…}}}`)
			return func(ctx context.Context, e *env) error {
				keys, err := e.secretKeys()
				if err != nil {
					return err
				}
				out, err := seedDemo(ctx, e.db, keys)
				if err != nil {
					return err
				}
				if *asJSON {
					return printJSON(e.stdout, out)
				}
				fmt.Fprintf(e.stdout, "service token (for Authorization: Bearer …):\n  %s\n\nAPI keys (shown once):\n", out.ServiceToken)
				for _, name := range []string{"free", "pro", "enterprise"} {
					fmt.Fprintf(e.stdout, "  %-10s %s\n", name, out.Keys[name])
				}
				fmt.Fprintf(e.stdout, "\nadmin users (passwords shown once):\n")
				for _, role := range []string{"operator", "tenant_admin"} {
					u := out.Users[role]
					fmt.Fprintf(e.stdout, "  %-12s %s  %s\n", role, u.Email, u.Password)
				}
				return nil
			}
		},
	}
}

// seedResult is what `seed demo --json` prints.
type seedResult struct {
	ServiceToken string              `json:"service_token"`
	Keys         map[string]string   `json:"keys"`
	Users        map[string]seedUser `json:"users"`
}

// seedUser is a demo admin user and its fresh password.
type seedUser struct {
	Email    string    `json:"email"`
	Password string    `json:"password"`
	Role     auth.Role `json:"role"`
	Tenant   string    `json:"tenant,omitempty"`
}

// Demo admin users: an operator, and a tenant admin of demo-pro.
const (
	demoOperatorEmail    = "operator@example.com"
	demoTenantAdminEmail = "admin@demo-pro.example.com"
	demoAdminTenant      = "demo-pro"
)

// seedDemo puts the demo plans, one demo tenant per paid tier, fresh keys,
// a fresh service token and the demo admin users with fresh passwords, and
// records that in the audit log.
func seedDemo(ctx context.Context, db *pgxpool.Pool, keys *auth.SecretKeys) (seedResult, error) {
	var res seedResult
	err := audit.Apply(ctx, db, audit.CLI, func(tx pgx.Tx) ([]audit.Change, error) {
		var err error
		res, err = seedDemoOn(ctx, tx, keys)
		if err != nil {
			return nil, err
		}
		users := map[string]string{}
		for role, u := range res.Users {
			users[role] = u.Email
		}
		return audit.One(audit.Change{Action: "seed.demo", TargetType: "seed", TargetID: "demo",
			After: map[string]any{"tenants": []string{"demo-free", "demo-pro", "demo-enterprise"}, "users": users}}), nil
	})
	return res, err
}

func seedDemoOn(ctx context.Context, db postgres.Conn, keys *auth.SecretKeys) (seedResult, error) {
	ps, ts, as := plans.NewStore(db), tenants.NewStore(db), auth.NewStore(db).WithSecretKeys(keys)
	res := seedResult{Keys: map[string]string{}, Users: map[string]seedUser{}}
	ids := map[string]int64{}
	for _, p := range plans.DemoPlans() {
		stored, err := ps.Put(ctx, p)
		if err != nil {
			return res, fmt.Errorf("seed: plan %s: %w", p.Name, err)
		}
		ids[p.Name] = stored.ID
	}
	for _, tier := range []string{"free", "pro", "enterprise"} {
		name := "demo-" + tier
		t, err := ts.GetByName(ctx, name)
		switch {
		case tollgate.ErrorCode(err) == tollgate.ENOTFOUND:
			if t, err = ts.Create(ctx, name, ids[tier]); err != nil {
				return res, fmt.Errorf("seed: tenant %s: %w", name, err)
			}
		case err != nil:
			return res, fmt.Errorf("seed: tenant %s: %w", name, err)
		case t.PlanID != ids[tier]:
			if err := ts.SetPlan(ctx, t.ID, ids[tier], time.Now()); err != nil {
				return res, err
			}
		}
		secret, _, err := ts.IssueKey(ctx, t.ID, "demo "+time.Now().UTC().Format(time.RFC3339), nil)
		if err != nil {
			return res, err
		}
		res.Keys[tier] = secret
	}
	token, _, err := as.IssueServiceToken(ctx, "demo-gateway", 0)
	if err != nil {
		return res, err
	}
	res.ServiceToken = token
	demoPro, err := ts.GetByName(ctx, demoAdminTenant)
	if err != nil {
		return res, err
	}
	for _, u := range []seedUser{
		{Email: demoOperatorEmail, Role: auth.RoleOperator},
		{Email: demoTenantAdminEmail, Role: auth.RoleTenantAdmin, Tenant: demoAdminTenant},
	} {
		tenantID := ""
		if u.Tenant != "" {
			tenantID = demoPro.ID
		}
		if u.Password, err = resetUser(ctx, as, u.Email, u.Role, tenantID); err != nil {
			return res, fmt.Errorf("seed: user %s: %w", u.Email, err)
		}
		res.Users[string(u.Role)] = u
	}
	return res, nil
}

// resetUser creates the user, or gives the existing one a new password,
// and returns the password.
func resetUser(ctx context.Context, as *auth.Store, email string, role auth.Role, tenantID string) (string, error) {
	password := auth.GeneratePassword()
	u, err := as.GetUserByEmail(ctx, email)
	if tollgate.ErrorCode(err) == tollgate.ENOTFOUND {
		_, err = as.CreateUser(ctx, auth.NewUser{Email: email, Password: password, Role: role, TenantID: tenantID})
		return password, err
	}
	if err != nil {
		return "", err
	}
	return password, as.SetPassword(ctx, u.ID, password)
}
