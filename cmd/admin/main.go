// Command admin is Tollgate's operator tool: schema migrations, the demo
// seed, tenants, API keys and service tokens, and (with serve) the admin
// server.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "admin:", err)
		os.Exit(1)
	}
}

// command is one CLI subcommand. Its run gets the flag set already parsed.
type command struct {
	name    string
	summary string
	// flags declares the command's flags and returns its action.
	flags func(fs *flag.FlagSet) func(ctx context.Context, env *env) error
	// noSchemaCheck lets migrate run on any schema version.
	noSchemaCheck bool
}

// env is what every command runs with.
type env struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	args   []string // positional arguments after flags
	db     *pgxpool.Pool
	// ready, when not nil, receives the address a server listens on.
	ready chan<- string
}

func commands() []command {
	return []command{
		migrateCommand(),
		seedCommand(),
		tenantsCreateCommand(),
		keysIssueCommand(),
		keysRevokeCommand(),
		tokensIssueCommand(),
		usersCreateCommand(),
		usersDisableCommand(),
		usersSessionsRevokeCommand(),
		serveCommand(),
		workerCommand(),
		reportCommand(),
		closeCommand(),
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: admin <command> [flags]\n\ncommands:")
	cmds := commands()
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-22s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun `admin <command> --help` for a command's flags. The database is TOLLGATE_DATABASE_URL.")
}

// run dispatches args to a subcommand. Commands are one or two words
// ("migrate", "tenants create"). When ready is not nil, serve sends the
// address it listens on to it.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer,
	ready chan<- string) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) == 0 || args[0] == "help" || args[0] == "--help" || args[0] == "-h" {
		usage(stdout)
		if len(args) == 0 {
			return errors.New("no command given")
		}
		return nil
	}
	var cmd *command
	var rest []string
	for _, c := range commands() {
		words := strings.Fields(c.name)
		if len(args) >= len(words) && strings.Join(args[:len(words)], " ") == c.name {
			c := c
			cmd, rest = &c, args[len(words):]
			break
		}
	}
	if cmd == nil {
		usage(stderr)
		return fmt.Errorf("unknown command %q", strings.Join(args, " "))
	}
	fs := flag.NewFlagSet("admin "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	action := cmd.flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: admin %s [flags]\n\n%s\n\nflags:\n", cmd.name, cmd.summary)
		fs.PrintDefaults()
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	e := &env{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr, args: fs.Args(), ready: ready}
	cfg := config.New(getenv)
	url := cfg.String("TOLLGATE_DATABASE_URL", "postgres://tollgate@127.0.0.1:5432/tollgate?sslmode=disable")
	db, err := postgres.Open(ctx, url)
	if err != nil {
		return err
	}
	defer db.Close()
	if !cmd.noSchemaCheck {
		if err := postgres.CheckSchema(ctx, db); err != nil {
			return err
		}
	}
	e.db = db
	return action(ctx, e)
}

func migrateCommand() command {
	return command{
		name:          "migrate",
		summary:       "migrate up | down [N] | version: apply, roll back (N steps, default all) or show the schema version",
		noSchemaCheck: true,
		flags: func(fs *flag.FlagSet) func(context.Context, *env) error {
			return func(ctx context.Context, e *env) error {
				if len(e.args) == 0 {
					return errors.New("migrate: want up, down [N] or version")
				}
				switch e.args[0] {
				case "up":
					if err := postgres.MigrateUp(e.db); err != nil {
						return err
					}
				case "down":
					steps := 0
					if len(e.args) > 1 {
						if _, err := fmt.Sscan(e.args[1], &steps); err != nil || steps < 1 {
							return fmt.Errorf("migrate down: N must be a positive integer, got %q", e.args[1])
						}
					}
					if err := postgres.MigrateDown(e.db, steps); err != nil {
						return err
					}
				case "version":
				default:
					return fmt.Errorf("migrate: unknown action %q (want up, down or version)", e.args[0])
				}
				v, dirty, err := postgres.Version(ctx, e.db)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "schema version %d (dirty=%v); this binary expects %d\n", v, dirty, postgres.SchemaVersion())
				return nil
			}
		},
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func seedCommand() command {
	return command{
		name:    "seed demo",
		summary: "create the demo plans and tenant (idempotent); issue fresh demo keys and a service token and print them",
		flags: func(fs *flag.FlagSet) func(context.Context, *env) error {
			asJSON := fs.Bool("json", false, `print {"service_token": …, "keys": {"free": …, "pro": …, "enterprise": …}, "users": {"operator": {…}, "tenant_admin": {…}}}`)
			return func(ctx context.Context, e *env) error {
				out, err := seedDemo(ctx, e.db)
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
func seedDemo(ctx context.Context, db *pgxpool.Pool) (seedResult, error) {
	var res seedResult
	err := audit.Apply(ctx, db, audit.CLI, func(tx pgx.Tx) ([]audit.Change, error) {
		var err error
		res, err = seedDemoOn(ctx, tx)
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

func seedDemoOn(ctx context.Context, db postgres.Conn) (seedResult, error) {
	ps, ts, as := plans.NewStore(db), tenants.NewStore(db), auth.NewStore(db)
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
		if err != nil {
			if t, err = ts.Create(ctx, name, ids[tier]); err != nil {
				return res, fmt.Errorf("seed: tenant %s: %w", name, err)
			}
		} else if t.PlanID != ids[tier] {
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

func tenantsCreateCommand() command {
	return command{
		name:    "tenants create",
		summary: "create a tenant on a plan",
		flags: func(fs *flag.FlagSet) func(context.Context, *env) error {
			name := fs.String("name", "", "tenant name (required)")
			plan := fs.String("plan", "free", "plan name")
			return func(ctx context.Context, e *env) error {
				if *name == "" {
					return errors.New("tenants create: --name is required")
				}
				p, err := plans.NewStore(e.db).GetByName(ctx, *plan)
				if err != nil {
					return fmt.Errorf("tenants create: --plan: %w", err)
				}
				var t tenants.Tenant
				err = audit.Apply(ctx, e.db, audit.CLI, func(tx pgx.Tx) ([]audit.Change, error) {
					var err error
					if t, err = tenants.NewStore(tx).Create(ctx, *name, p.ID); err != nil {
						return nil, err
					}
					return audit.One(audit.Change{Action: "tenant.create", TargetType: "tenant", TargetID: t.ID,
						TenantID: t.ID, After: t}), nil
				})
				if err != nil {
					return fmt.Errorf("tenants create: %w", err)
				}
				return printJSON(e.stdout, t)
			}
		},
	}
}

func keysIssueCommand() command {
	return command{
		name:    "keys issue",
		summary: "issue an API key for a tenant; the secret is printed once and never stored",
		flags: func(fs *flag.FlagSet) func(context.Context, *env) error {
			tenant := fs.String("tenant", "", "tenant ID or name (required)")
			name := fs.String("name", "", "a name for the key")
			ttl := fs.Duration("expires-in", 0, "expire the key after this long (e.g. 720h); 0 = never")
			asJSON := fs.Bool("json", false, "print the key record and secret as JSON")
			count := fs.Int("count", 1, "issue this many keys, one secret per line (for load tests)")
			return func(ctx context.Context, e *env) error {
				if *tenant == "" {
					return errors.New("keys issue: --tenant is required")
				}
				if *count < 1 || *count > 100_000 {
					return errors.New("keys issue: --count must be from 1 to 100000")
				}
				ts := tenants.NewStore(e.db)
				t, err := ts.Find(ctx, *tenant)
				if err != nil {
					return fmt.Errorf("keys issue: --tenant: %w", err)
				}
				var exp *time.Time
				if *ttl > 0 {
					at := time.Now().Add(*ttl)
					exp = &at
				}
				var secret string
				var k tenants.Key
				for i := range *count {
					err = audit.Apply(ctx, e.db, audit.CLI, func(tx pgx.Tx) ([]audit.Change, error) {
						var err error
						if secret, k, err = tenants.NewStore(tx).IssueKey(ctx, t.ID, *name, exp); err != nil {
							return nil, err
						}
						return audit.One(tenants.KeyAudit("key.create", nil, &k)), nil
					})
					if err != nil || i == *count-1 {
						break
					}
					fmt.Fprintln(e.stdout, secret)
				}
				if err != nil {
					return fmt.Errorf("keys issue: %w", err)
				}
				if *asJSON {
					return printJSON(e.stdout, map[string]any{"secret": secret, "key": k})
				}
				fmt.Fprintf(e.stdout, "%s\n", secret)
				fmt.Fprintf(e.stderr, "key %s (%s…) issued for tenant %s; the secret above is not shown again\n", k.ID, k.Prefix, t.Name)
				return nil
			}
		},
	}
}

func keysRevokeCommand() command {
	return command{
		name:    "keys revoke",
		summary: "revoke an API key by ID; checks with it are denied within a second",
		flags: func(fs *flag.FlagSet) func(context.Context, *env) error {
			id := fs.String("id", "", "key ID (required)")
			return func(ctx context.Context, e *env) error {
				if *id == "" {
					return errors.New("keys revoke: --id is required")
				}
				return audit.Apply(ctx, e.db, audit.CLI, func(tx pgx.Tx) ([]audit.Change, error) {
					ts := tenants.NewStore(tx)
					before, err := ts.KeyByID(ctx, *id)
					if err != nil {
						return nil, err
					}
					after, err := ts.RevokeTenantKey(ctx, before.TenantID, before.ID)
					if err != nil {
						return nil, err
					}
					return audit.One(tenants.KeyAudit("key.revoke", &before, &after)), nil
				})
			}
		},
	}
}

func tokensIssueCommand() command {
	return command{
		name:    "tokens issue",
		summary: "issue a service token for a caller of the check API; printed once",
		flags: func(fs *flag.FlagSet) func(context.Context, *env) error {
			name := fs.String("name", "", "who the token is for, e.g. edge-gateway (required)")
			ttl := fs.Duration("ttl", 365*24*time.Hour, "validity")
			return func(ctx context.Context, e *env) error {
				if *name == "" {
					return errors.New("tokens issue: --name is required")
				}
				var token string
				var st auth.ServiceToken
				err := audit.Apply(ctx, e.db, audit.CLI, func(tx pgx.Tx) ([]audit.Change, error) {
					var err error
					if token, st, err = auth.NewStore(tx).IssueServiceToken(ctx, *name, *ttl); err != nil {
						return nil, err
					}
					return audit.One(audit.Change{Action: "service_token.create", TargetType: "service_token",
						TargetID: st.ID, After: st}), nil
				})
				if err != nil {
					return fmt.Errorf("tokens issue: %w", err)
				}
				fmt.Fprintln(e.stdout, token)
				fmt.Fprintf(e.stderr, "service token %s for %s, expires %s\n", st.ID, st.Name, st.ExpiresAt.Format(time.RFC3339))
				return nil
			}
		},
	}
}
