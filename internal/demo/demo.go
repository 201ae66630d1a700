// Package demo is the demo data `admin seed demo` makes: plans, a tenant
// per paid tier with keys in every state, a service token, admin logins,
// and a month of made-up usage, so that a fresh system has something to
// show.
package demo

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
)

// Result is what Seed made: the secrets it issued, shown once (`admin
// seed demo --json` prints it).
type Result struct {
	ServiceToken string            `json:"service_token"`
	Keys         map[string]string `json:"keys"`
	Users        map[string]User   `json:"users"`
	// UsageHours counts the tenant-hours of demo usage added.
	UsageHours int `json:"usage_hours"`
}

// User is a demo admin user and its fresh password.
type User struct {
	Email    string    `json:"email"`
	Password string    `json:"password"`
	Role     auth.Role `json:"role"`
	Tenant   string    `json:"tenant,omitempty"`
}

// Demo admin users: an operator, and a tenant admin and a tenant viewer
// of demo-pro.
const (
	demoOperatorEmail     = "operator@example.com"
	demoTenantAdminEmail  = "admin@demo-pro.example.com"
	demoTenantViewerEmail = "viewer@demo-pro.example.com"
	demoAdminTenant       = "demo-pro"
)

// demoSince is when the demo tenants became customers: the start of the
// month before now's.
func demoSince(now time.Time) time.Time {
	this := usage.MonthOf(now)
	return usage.MonthOf(this.Start().Add(-time.Hour)).Start()
}

// Seed puts the demo plans, with their credit, quota and billing
// settings, one demo tenant per paid tier, fresh keys, a fresh service
// token and the demo admin users with fresh passwords (their sessions
// ended), by the actor by: the seed.demo change, one audit entry in its
// transaction, and one more per plan setting it puts back (plan.credits,
// plan.quota, plan.billing) after an operator changed it. It is
// idempotent but for the fresh secrets. keys seal the service token's
// signing key.
func Seed(ctx context.Context, db postgres.Conn, by audit.Actor, keys *auth.SecretKeys) (Result, error) {
	var res Result
	err := audit.Apply(ctx, db, by, func(tx pgx.Tx) (audit.Change, error) {
		var err error
		res, err = seedOn(ctx, tx, by, keys)
		if err != nil {
			return audit.Change{}, err
		}
		users := map[string]string{}
		for role, u := range res.Users {
			users[role] = u.Email
		}
		return audit.Change{Action: "seed.demo", TargetType: "seed", TargetID: "demo",
			After: map[string]any{"tenants": []string{"demo-free", "demo-pro", "demo-enterprise", demoPrepaidTenant}, "users": users}}, nil
	})
	return res, err
}

// ReceiverURL is where the demo's webhook endpoints point: the webhook
// sink (cmd/webhook-sink) that `make run` starts on loopback, so that
// deliveries stay on the machine. Without the sink they fail, and are
// retried, on the same machine; the deliverers refuse loopback addresses
// that TOLLGATE_WEBHOOK_ALLOW_ADDRS does not list (`make run` lists
// 127.0.0.1:8082).
const ReceiverURL = "http://127.0.0.1:8082"

// earlierDemoWebhookURL is where an earlier demo seed pointed its
// endpoints, enabled: a public name. Seed disables them.
const earlierDemoWebhookURL = "https://hooks.example.com/tollgate"

// demoUsage is the made-up traffic of each demo tenant: hourly checks at
// the daily peak, what it calls, and which of its plan's rules denies now
// and then.
var demoUsage = map[string]usage.DemoTenant{
	"demo-free":       {Resources: []string{"GET /repos", "GET /users"}, PerHour: 25, DenyRule: "hourly", DenyRate: 0.03},
	"demo-pro":        {Resources: []string{"GET /repos", "POST /v1/search", "GET /users"}, PerHour: 200, DenyRule: "search", DenyRate: 0.01},
	"demo-enterprise": {Resources: []string{"GET /repos", "POST /v1/search", "GET /orgs"}, PerHour: 2100, DenyRule: "hourly", DenyRate: 0.002},
}

// SeedUsage gives the demo tenants the keys a customer would have
// (seedKeys, once) and fills their last 30 days with made-up usage
// (usage.Store.SeedDemo) made by three of those keys, and returns how many hours
// it added: none for hours that have usage already.
func SeedUsage(ctx context.Context, db *pgxpool.Pool, now time.Time) (int, error) {
	ts := tenants.NewStore(db)
	var list []usage.DemoTenant
	for _, name := range []string{"demo-free", "demo-pro", "demo-enterprise"} {
		t, err := ts.GetByName(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("seed: demo usage: %w", err)
		}
		keys, err := ts.ListKeys(ctx, t.ID)
		if err != nil {
			return 0, fmt.Errorf("seed: demo usage: %w", err)
		}
		if !slices.ContainsFunc(keys, func(k tenants.Key) bool { return k.Name == demoKeyNames[0] }) {
			if err := seedKeys(ctx, ts, t.ID); err != nil {
				return 0, fmt.Errorf("seed: demo keys of %s: %w", name, err)
			}
			if keys, err = ts.ListKeys(ctx, t.ID); err != nil {
				return 0, fmt.Errorf("seed: demo usage: %w", err)
			}
		}
		d := demoUsage[name]
		d.TenantID = t.ID
		for _, want := range demoKeyNames {
			for _, k := range keys {
				if k.Name == want && k.RevokedAt == nil {
					d.KeyIDs = append(d.KeyIDs, k.ID)
					break
				}
			}
		}
		if len(d.KeyIDs) == 0 { // a demo tenant from before the demo keys
			for i := 0; i < len(keys) && i < 3; i++ {
				d.KeyIDs = append(d.KeyIDs, keys[i].ID)
			}
		}
		list = append(list, d)
	}
	anon := usage.DemoAnonymous{IPs: []string{"203.0.113.7", "198.51.100.23", "2001:db8::5", "192.0.2.44", "203.0.113.99"},
		PerHour: 45, DenyRule: "hourly"}
	n, err := usage.NewStore(db, usage.StoreConfig{}).SeedDemo(ctx, list, anon, now)
	if err != nil {
		return 0, fmt.Errorf("seed: demo usage: %w", err)
	}
	// The keys that made it were used: the console counts them so.
	used := map[string]time.Time{}
	for _, d := range list {
		for _, k := range d.KeyIDs {
			used[k] = now
		}
	}
	if err := ts.TouchKeys(ctx, used); err != nil {
		return 0, fmt.Errorf("seed: demo usage: %w", err)
	}
	return n, nil
}

func seedOn(ctx context.Context, db postgres.Conn, by audit.Actor, keys *auth.SecretKeys) (Result, error) {
	ps, ts, as := plans.NewStore(db), tenants.NewStore(db), auth.NewStore(db).WithSecretKeys(keys)
	res := Result{Keys: map[string]string{}, Users: map[string]User{}}
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
			// A customer since the start of last month: the demo usage
			// (below) then has statements that bill it.
			if err := ts.SetStart(ctx, t.ID, demoSince(time.Now())); err != nil {
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
	prepaid, prepaidPlanID, err := seedPrepaid(ctx, db)
	if err != nil {
		return res, err
	}
	res.Keys["prepaid"] = prepaid
	ids[prepaidPlan] = prepaidPlanID
	if err := resetPlanSettings(ctx, db, by, ids); err != nil {
		return res, err
	}
	// Endpoints at the local sink, so that the console's webhook pages
	// show deliveries; none leaves the machine.
	es := events.NewStore(db).WithSecretKeys(keys)
	if err := es.EnsureEndpoint(ctx, "", ReceiverURL+"/operator", "demo: every event, to the local webhook sink", time.Now()); err != nil {
		return res, err
	}
	if _, err := es.DisableEndpointsAt(ctx, earlierDemoWebhookURL, time.Now()); err != nil {
		return res, err
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
	if err := es.EnsureEndpoint(ctx, demoPro.ID, ReceiverURL+"/"+demoAdminTenant, "demo: the tenant's alerts, to the local webhook sink", time.Now()); err != nil {
		return res, err
	}
	for _, u := range []User{
		{Email: demoOperatorEmail, Role: auth.RoleOperator},
		{Email: demoTenantAdminEmail, Role: auth.RoleTenantAdmin, Tenant: demoAdminTenant},
		{Email: demoTenantViewerEmail, Role: auth.RoleTenantViewer, Tenant: demoAdminTenant},
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

// demoKeyNames are the keys a demo customer has (nobody knows their
// secrets); they make the demo usage.
var demoKeyNames = []string{"production", "staging", "ci"}

// seedKeys gives a new demo tenant the keys a customer would have:
// demoKeyNames, a key that expires in a few days, one rotated a while ago
// and still in its grace period, and one revoked.
func seedKeys(ctx context.Context, ts *tenants.Store, tenantID string) error {
	now := time.Now()
	for _, name := range demoKeyNames {
		if _, _, err := ts.IssueKey(ctx, tenantID, name, nil); err != nil {
			return err
		}
	}
	soon := now.Add(4 * 24 * time.Hour)
	if _, _, err := ts.IssueKey(ctx, tenantID, "trial partner", &soon); err != nil {
		return err
	}
	_, old, err := ts.IssueKey(ctx, tenantID, "mobile app", nil)
	if err != nil {
		return err
	}
	if _, _, _, err := ts.RotateKey(ctx, tenantID, old.ID, tenants.Rotation{Grace: 7 * 24 * time.Hour, Now: now}); err != nil {
		return err
	}
	_, leaked, err := ts.IssueKey(ctx, tenantID, "leaked in a gist", nil)
	if err != nil {
		return err
	}
	return ts.RevokeKey(ctx, leaked.ID)
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

// demoPrepaidTenant is the demo tenant that pays in advance: its plan
// draws on prepaid credits and denies past the balance.
const demoPrepaidTenant = "demo-prepaid"

// prepaidPlan is the demo's credit plan: the pro plan's rules and
// routes, no monthly fee, credits in deny mode.
const prepaidPlan = "prepaid"

// seedPrepaid makes the demo's credit plan (prepaidPlan) and its tenant,
// on it, with a month of credits (credits.SeedDemo), and returns a fresh
// key of the tenant and the plan's ID.
func seedPrepaid(ctx context.Context, db postgres.Conn) (string, int64, error) {
	var pro plans.Plan
	for _, p := range plans.DemoPlans() {
		if p.Name == "pro" {
			pro = p
		}
	}
	p := plans.Plan{Name: prepaidPlan, DisplayName: "Prepaid", Currency: "USD", Rules: pro.Rules, Routes: pro.Routes}
	stored, err := plans.NewStore(db).Put(ctx, p)
	if err != nil {
		return "", 0, fmt.Errorf("seed: plan %s: %w", prepaidPlan, err)
	}
	ts := tenants.NewStore(db)
	t, err := ts.GetByName(ctx, demoPrepaidTenant)
	switch {
	case tollgate.ErrorCode(err) == tollgate.ENOTFOUND:
		if t, err = ts.Create(ctx, demoPrepaidTenant, stored.ID); err == nil {
			err = ts.SetStart(ctx, t.ID, demoSince(time.Now()))
		}
	case err == nil && t.PlanID != stored.ID:
		err = ts.SetPlan(ctx, t.ID, stored.ID, time.Now())
	}
	if err != nil {
		return "", 0, fmt.Errorf("seed: tenant %s: %w", demoPrepaidTenant, err)
	}
	if err := credits.SeedDemo(ctx, db, stored.ID, t.ID, time.Now()); err != nil {
		return "", 0, fmt.Errorf("seed: credits of %s: %w", demoPrepaidTenant, err)
	}
	secret, _, err := ts.IssueKey(ctx, t.ID, "demo "+time.Now().UTC().Format(time.RFC3339), nil)
	return secret, stored.ID, err
}

// demoCredits is the credit settings of the demo's credit plan (as
// credits.SeedDemo first makes them); the other demo plans have none.
var demoCredits = credits.PlanSettingsInput{Mode: credits.ModeDeny, Overdraft: 0, LowThreshold: 2000}

// demoThresholds are the quota thresholds of the demo's paid plans, so
// that the tenants' alerts have something to warn of: 80 % and 100 % of
// the included units, and 5,000 units left on Pro. The other demo plans
// have none, and none has a spend cap.
var demoThresholds = map[string][]quota.Threshold{
	"pro":        {{Percent: 80}, {Percent: 100}, {Remaining: 5000}},
	"enterprise": {{Percent: 80}, {Percent: 100}},
}

// resetPlanSettings puts back the demo's credit, quota and billing
// settings (none: the server's dunning grace, no self-serve top-ups) on
// the demo plans ids (by name) where they differ, each as the operation
// an operator's change is (plan.credits, plan.quota, plan.billing, by
// by): an example run against the demo, such as a plan put in credit
// mode, must not leave its keys denied after a seed.
func resetPlanSettings(ctx context.Context, db postgres.Conn, by audit.Actor, ids map[string]int64) error {
	names := make([]string, 0, len(ids))
	for name := range ids {
		names = append(names, name)
	}
	slices.Sort(names)
	cs, cops := credits.NewStore(db), credits.NewOps(db, nil)
	qs, qops := quota.NewStore(db), quota.NewOps(db)
	inv := billing.NewInvoicing(db, billing.InvoicingConfig{}, nil)
	for _, name := range names {
		id := ids[name]
		wantCredits := credits.PlanSettingsInput{Mode: credits.PlanSettingsOff}
		if name == prepaidPlan {
			wantCredits = demoCredits
		}
		got, err := cs.PlanSettingsOrOff(ctx, id)
		if err != nil {
			return fmt.Errorf("seed: plan %s: %w", name, err)
		}
		if (credits.PlanSettingsInput{Mode: got.Mode, Overdraft: got.Overdraft, LowThreshold: got.LowThreshold}) != wantCredits {
			if _, err := cops.SetPlan(ctx, by, id, wantCredits); err != nil {
				return fmt.Errorf("seed: credits of plan %s: %w", name, err)
			}
		}
		want := demoThresholds[name]
		// A plan's first seed makes its thresholds without an audit
		// entry of their own: seed.demo's says what the seed made.
		if want != nil {
			if err := qs.SeedPlan(ctx, quota.PlanSettings{PlanID: id, Thresholds: want}); err != nil {
				return fmt.Errorf("seed: %w", err)
			}
		}
		q, err := qs.PlanSettings(ctx, id)
		if err != nil {
			return fmt.Errorf("seed: plan %s: %w", name, err)
		}
		if !slices.Equal(q.Thresholds, want) || q.SpendCapDefaultMinor != nil || q.SpendCapMaxMinor != nil {
			if _, err := qops.SetPlan(ctx, by, id, quota.PlanSettingsInput{Thresholds: want}); err != nil {
				return fmt.Errorf("seed: quota of plan %s: %w", name, err)
			}
		}
		b, err := inv.PlanBilling(ctx, id)
		if err != nil {
			return fmt.Errorf("seed: plan %s: %w", name, err)
		}
		if b.DunningGraceS != nil || b.TopUpUnitMinor != nil {
			if _, err := inv.SetPlanBilling(ctx, by, id, billing.PlanBillingInput{}); err != nil {
				return fmt.Errorf("seed: billing of plan %s: %w", name, err)
			}
		}
	}
	return nil
}
