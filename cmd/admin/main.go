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
	"maps"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/buildinfo"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/region"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "admin:", errorText(err))
		os.Exit(1)
	}
}

// errorText is err as the CLI prints it: for a refusal that names fields
// (a tollgate.Error with Fields), the message, then one "field: problem"
// line per field, sorted by field, in place of the fields' Go map.
func errorText(err error) string {
	var te *tollgate.Error
	if !errors.As(err, &te) || len(te.Fields) == 0 {
		return err.Error()
	}
	head := (&tollgate.Error{Code: te.Code, Message: te.Message}).Error()
	text := err.Error()
	if i := strings.LastIndex(text, te.Error()); i >= 0 {
		text = text[:i] + head + text[i+len(te.Error()):]
	}
	var b strings.Builder
	b.WriteString(text + ":")
	for _, field := range slices.Sorted(maps.Keys(te.Fields)) {
		fmt.Fprintf(&b, "\n  %s: %s", field, te.Fields[field])
	}
	return b.String()
}

// command is one CLI subcommand. Its run gets the flag set already parsed.
type command struct {
	name    string
	summary string
	// args, when the command takes positional arguments, is their
	// synopsis for the usage line, e.g. "up | down [N]".
	args string
	// help, when set, is printed after the summary by --help.
	help string
	// flags declares the command's flags and returns its action. A flag
	// whose usage ends in "(required)" must be given a value: run refuses
	// the command without one (checkRequired), before the action.
	flags func(fs *flag.FlagSet) action
	// audited is the audit action of the change the command makes, such
	// as "key.revoke": the command makes it through its feature's
	// operation (tenants.Ops…), which writes exactly that one entry. ""
	// for a command that changes nothing the audit log tracks (lists,
	// reports, migrate, serve). TestEveryChangeIsAudited runs every
	// command that has one.
	audited string
	// noSchemaCheck lets migrate run on any schema version.
	noSchemaCheck bool
	// noDatabase runs the command without connecting to Postgres.
	noDatabase bool
}

// action is what a command does once its flags are parsed.
type action = func(ctx context.Context, e *invocation) error

// invocation is one run of a command: its name, streams, positional
// arguments, settings and database.
type invocation struct {
	name   string // the command's, to start its error messages
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	args   []string // positional arguments after flags
	db     *pgxpool.Pool
	// ready, when not nil, receives the address a server listens on.
	ready chan<- string
}

// secretKeys reads the keys that seal the service-token signing keys. The
// commands that sign or serve refuse to run without them.
func (e *invocation) secretKeys() (*auth.SecretKeys, error) {
	current, previous := config.New(e.getenv).SecretKey()
	if current == "" {
		return nil, errors.New("TOLLGATE_SECRET_KEY is not set: it seals the service-token signing keys at rest; generate one with `admin secrets generate` and keep it like a password (make run keeps a demo key in .local/; docker-compose.yml reads it from .env)")
	}
	keys, err := auth.ParseSecretKeys(current, previous...)
	var bad *auth.BadSecretKeyError
	switch {
	case errors.As(err, &bad) && bad.Position == 1:
		return nil, fmt.Errorf("TOLLGATE_SECRET_KEY: %s", auth.BadSecretKeyReason)
	case errors.As(err, &bad) && len(previous) == 1:
		return nil, fmt.Errorf("TOLLGATE_SECRET_KEY_PREVIOUS: %s", auth.BadSecretKeyReason)
	case errors.As(err, &bad):
		return nil, fmt.Errorf("TOLLGATE_SECRET_KEY_PREVIOUS: key %d of its %d (comma-separated): %s",
			bad.Position-1, len(previous), auth.BadSecretKeyReason)
	case err != nil:
		return nil, err
	}
	return keys, nil
}

// planOps returns the plan operations for the deployment's regions
// (TOLLGATE_REGION*), or the region settings' error naming the setting:
// a bad setting must not pass for a deployment of regions and let a
// plan's rules take a global scope that admin worker and the api, which
// refuse the same settings, would never enforce.
func (e *invocation) planOps() (*plans.Ops, error) {
	env := config.New(e.getenv)
	rc := region.Read(env, false)
	if err := env.Err(); err != nil {
		return nil, err
	}
	return plans.NewOps(e.db).InRegions(rc), nil
}

// commands is the CLI: every command, its audit action ("" for one that
// changes nothing the audit log tracks) and what it does. Each command's
// flags function, in the file of its group, declares its flags and
// returns its action.
func commands() []command {
	return []command{
		{name: "migrate", summary: "apply or roll back schema migrations, or show the schema version", args: "up | down [N] | force V | version", help: migrateHelp, noSchemaCheck: true, flags: migrate},
		// seed demo also revokes the demo-gateway service tokens an
		// earlier seed issued: one service_token.revoke entry each.
		{name: "seed demo", audited: "seed.demo", summary: "create the demo plans and tenants (idempotent) with a month of made-up usage; issue fresh demo keys, a service token (revoking the earlier demo-gateway tokens) and demo logins and print them", flags: seedDemo},
		{name: "tenants create", audited: "tenant.create", summary: "create a tenant on a plan", flags: tenantsCreate},
		{name: "tenants list", summary: "list tenants with their plan and status, by name", flags: tenantsList},
		{name: "tenants plan", audited: "tenant.plan_change", summary: "move a tenant to another plan (recorded in its plan history for billing)", flags: tenantsPlan},
		{name: "tenants suspend", audited: "tenant.suspend", summary: "suspend a tenant: its checks are denied within a second", flags: tenantsSuspend(true)},
		{name: "tenants resume", audited: "tenant.resume", summary: "resume a suspended tenant: its checks are allowed again", flags: tenantsSuspend(false)},
		{name: "tenants quota", audited: "tenant.quota", summary: "set a tenant's own quota thresholds and spend cap (none: the plan's)", help: thresholdsHelp, flags: tenantsQuota},
		{name: "plans list", summary: "list plans with their pricing and rules, by name (archived ones too)", flags: plansList},
		{name: "plans create", audited: "plan.create", summary: "create a plan: pricing, rules and routes, from flags or a file (-f)", help: plansCreateHelp, flags: plansCreate},
		{name: "plans update", audited: "plan.update", summary: "change a plan's fields (from flags), or replace it whole (-f)", help: plansUpdateHelp, flags: plansUpdate},
		{name: "plans archive", audited: "plan.archive", summary: "archive a plan: its tenants keep it, no other tenant can be put on it", flags: plansArchive(true)},
		{name: "plans unarchive", audited: "plan.unarchive", summary: "bring an archived plan back", flags: plansArchive(false)},
		{name: "plans export", summary: "print every plan as a plans file (YAML) for plans apply", flags: plansExport},
		// plans apply writes one entry per plan that changes: plan.create,
		// plan.update, plan.archive or plan.unarchive.
		{name: "plans apply", audited: "plan.update", summary: "make the plans what a file (YAML or JSON) says: create and update them, one audited change per plan that changes; --dry-run shows the changes", help: plansApplyHelp, flags: plansApply},
		{name: "plans quota", audited: "plan.quota", summary: "set a plan's quota thresholds and spend caps (its tenants' defaults)", help: thresholdsHelp, flags: plansQuota},
		{name: "plans routes", audited: "plan.routes", args: "TEMPLATE...", summary: "set, add (--add) or remove (--remove) a plan's route templates, tried in order", help: plansRoutesHelp, flags: plansRoutes},
		{name: "plans rule", audited: "plan.rule", summary: "add a rule to a plan, or replace the rule of that name", help: plansRuleHelp, flags: plansRule},
		{name: "keys issue", audited: "key.create", summary: "issue an API key for a tenant; the secret is printed once and never stored", flags: keysIssue},
		{name: "keys list", summary: "list API keys (never their secrets), newest first: one tenant's or every tenant's", flags: keysList},
		{name: "keys revoke", audited: "key.revoke", summary: "revoke an API key by ID; checks with it are denied within a second", flags: keysRevoke},
		{name: "webhooks create", audited: "webhook_endpoint.create", summary: "add a webhook endpoint (an operator's, or --tenant's); its secret is printed once", flags: webhooksCreate},
		{name: "webhooks list", summary: "list every webhook endpoint, newest first", flags: webhooksList},
		{name: "webhooks disable", audited: "webhook_endpoint.disable", summary: "stop deliveries to an endpoint: it receives no new events, and its pending deliveries wait", flags: webhooksDisable(true)},
		{name: "webhooks enable", audited: "webhook_endpoint.enable", summary: "resume deliveries to a disabled endpoint", flags: webhooksDisable(false)},
		{name: "webhooks delete", audited: "webhook_endpoint.delete", summary: "delete an endpoint with its deliveries", flags: webhooksDelete},
		{name: "webhooks rotate-secret", audited: "webhook_endpoint.rotate", summary: "give an endpoint a new secret, printed once; the previous one keeps signing beside it for a while", flags: webhooksRotateSecret},
		{name: "webhooks replay", audited: "webhook_endpoint.replay", summary: "send an endpoint one event again (--event), or every event of a time range (--from, --to)", flags: webhooksReplay},
		{name: "tokens issue", audited: "service_token.create", summary: "issue a service token for a caller of the check API; printed once", flags: tokensIssue},
		{name: "tokens list", summary: "list service tokens (never the tokens themselves), newest first", flags: tokensList},
		{name: "tokens revoke", audited: "service_token.revoke", summary: "revoke a service token by ID; the check API refuses it (401) within a second", flags: tokensRevoke},
		{name: "secrets generate", summary: "print a fresh TOLLGATE_SECRET_KEY (32 random bytes, base64)", noDatabase: true, flags: secretsGenerate},
		{name: "secrets reseal", audited: "signing_keys.reseal", summary: "seal every stored signing key and webhook endpoint secret with TOLLGATE_SECRET_KEY: after rotating it (the old key in TOLLGATE_SECRET_KEY_PREVIOUS), and for keys an earlier version stored in the clear", flags: secretsReseal},
		{name: "secrets recover", audited: "signing_keys.retire", summary: "after a secret key was lost: retire the signing keys no configured key opens (tokens they signed keep working), so that tokens issue signs with a new one, and list the webhook endpoints whose secrets need a new one", help: secretsRecoverHelp, flags: secretsRecover},
		{name: "users create", audited: "user.create", summary: "create an admin user (bootstraps the first operator); the password is read from stdin with --password-stdin, or generated and printed once", flags: usersCreate},
		{name: "users disable", audited: "user.disable", summary: "disable an admin user: it can no longer log in, and its sessions end at once", flags: usersDisable},
		{name: "users sessions revoke", audited: "user.sessions_revoke", summary: "end every session of an admin user at once (the user may log in again)", flags: usersSessionsRevoke},
		{name: "serve", summary: "run the admin server (TOLLGATE_ADMIN_ADDR): the web console at /, the admin REST API under /api/v1, and the usage worker", help: serveHelp, flags: serveAdmin},
		{name: "worker", summary: "apply the usage stream and the credits' consumption logs to Postgres, exactly once, until interrupted (also runs inside serve)", help: workerHelp, flags: worker},
		{name: "healthcheck", summary: "ask the admin server on TOLLGATE_ADMIN_ADDR for /healthz; exit 0 when it answers (for container health checks)", noDatabase: true, flags: healthcheck},
		{name: "usage set-aside", summary: "list the usage batches the worker set aside, whole or in part, instead of applying them (usage_bad_batches), newest first", help: setAsideHelp, flags: usageSetAside},
		{name: "report", summary: "print monthly statements (one tenant's or all) as JSON or CSV, or the month's late usage", flags: report},
		{name: "close", audited: "month.close", summary: "close a month: compute and freeze every tenant's statement (re-running changes nothing)", flags: closeMonth},
		{name: "plans billing", audited: "plan.billing", summary: "set a plan's dunning grace (default, off or a duration) and its price of a credit unit for self-serve top-ups", help: plansBillingHelp, flags: plansBilling},
		{name: "plans credits", audited: "plan.credits", summary: "make a plan's tenants draw on prepaid credits (deny or overage past the balance), or stop (off)", flags: plansCredits},
		{name: "credits grant", audited: "credits.grant", summary: "grant (top up) a tenant's prepaid credits, in its plan's units", flags: creditsGrant},
		{name: "credits adjust", audited: "credits.adjust", summary: "correct a tenant's credit balance by ± units, with a cause", flags: creditsAdjust},
		{name: "credits list", summary: "show a tenant's credit balance and grants", flags: creditsList},
		{name: "credits ledger", summary: "print a tenant's credit ledger, newest first", flags: creditsLedger},
		{name: "billing link", audited: "billing_account.link", summary: "link a tenant to a Stripe customer (an existing cus_… or a new one) that its statements are invoiced to", help: billingLinkHelp, flags: billingLink},
		{name: "invoices push", summary: "push pending invoices to Stripe now (serve retries them with backoff); idempotent", flags: invoicesPush},
		{name: "invoices issue", audited: "invoice.issue", summary: "issue the invoices a closed month lacks (closed where pushing was off, before closes issued them everywhere); idempotent", help: invoicesIssueHelp, flags: invoicesIssue},
		{name: "invoices retarget", audited: "invoice.retarget", summary: "push an invoice whose push failed (or every failed one: --all-failed) again, to the tenant's current customer", help: invoicesRetargetHelp, flags: invoicesRetarget},
		{name: "invoices bill-outside", audited: "invoice.bill_outside", summary: "close an invoice Stripe does not hold (it asks Stripe) out as billed outside Tollgate: never pushed, no longer a difference", help: invoicesBillOutsideHelp, flags: invoicesBillOutside},
		{name: "invoices list", summary: "list invoices with their push state and payment status, newest month first", flags: invoicesList},
		{name: "reconcile", summary: "a month's statements beside their invoices at Stripe, to the cent, with every difference", flags: reconcile},
	}
}

// listCommands lists cmds on w: every command (group ""), or one group's, such
// as "keys".
func listCommands(w io.Writer, group string, cmds []command) {
	fmt.Fprintf(w, "usage: admin %s<command> [flags]\n\ncommands:\n", strings.TrimLeft(group+" ", " "))
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-22s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun `admin <command> --help` for a command's flags; `admin --version` for the version.\n"+
		"The database is TOLLGATE_DATABASE_URL.")
}

// commandUsage prints c's usage line, description and flags (the flags
// section only when it has flags).
func commandUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	line := "usage: admin " + c.name
	if hasFlags {
		line += " [flags]"
	}
	if c.args != "" {
		line += " " + c.args
	}
	fmt.Fprintf(w, "%s\n\n%s\n", line, c.summary)
	if c.help != "" {
		fmt.Fprintf(w, "\n%s\n", strings.Trim(c.help, "\n"))
	}
	if hasFlags {
		fmt.Fprintln(w, "\nflags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

// helpRequested reports whether args ask for help anywhere before "--":
// `admin migrate up --help` must explain, not migrate.
func helpRequested(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if isHelp(a) {
			return true
		}
	}
	return false
}

// find returns the command args name and the arguments after its name;
// when args name no command but the start of some (a group, such as
// "keys"), it returns those in group.
func find(args []string) (cmd *command, rest []string, group []command) {
	words := args[:len(args)-len(flagsFrom(args))]
	for _, c := range commands() {
		name := strings.Fields(c.name)
		if len(args) >= len(name) && slices.Equal(args[:len(name)], name) {
			return &c, args[len(name):], nil
		}
		if len(words) > 0 && len(words) < len(name) && slices.Equal(name[:len(words)], words) {
			group = append(group, c)
		}
	}
	return nil, nil, group
}

// run dispatches args to a subcommand. Commands are one to three words
// ("migrate", "tenants create", "users sessions revoke"). When ready is
// not nil, serve sends the address it listens on to it.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer,
	ready chan<- string) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) > 1 && args[0] == "help" {
		args = append(args[1:], "--help") // admin help keys issue
	}
	switch {
	case len(args) == 0:
		listCommands(stderr, "", commands())
		return errors.New("no command given")
	case args[0] == "help" || isHelp(args[0]):
		listCommands(stdout, "", commands())
		return nil
	case args[0] == "--version" || args[0] == "-version":
		fmt.Fprintln(stdout, "admin", buildinfo.Read())
		return nil
	}
	cmd, rest, group := find(args)
	if cmd == nil {
		if len(group) > 0 {
			prefix := strings.Join(args[:len(args)-len(flagsFrom(args))], " ")
			if helpRequested(flagsFrom(args)) {
				listCommands(stdout, prefix, group)
				return nil
			}
			listCommands(stderr, prefix, group)
			return fmt.Errorf("%s: want a subcommand", prefix)
		}
		listCommands(stderr, "", commands())
		return fmt.Errorf("unknown command %q", strings.Join(args, " "))
	}
	fs := flag.NewFlagSet("admin "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	action := cmd.flags(fs)
	if helpRequested(rest) {
		commandUsage(stdout, cmd, fs)
		return nil
	}
	fs.Usage = func() { commandUsage(stderr, cmd, fs) }
	if err := fs.Parse(rest); err != nil {
		return err
	}
	if err := checkRequired(cmd.name, fs); err != nil {
		return err
	}
	e := &invocation{name: cmd.name, getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr, args: fs.Args(), ready: ready}
	if cmd.noDatabase {
		return action(ctx, e)
	}
	cfg := config.New(getenv)
	url := cfg.String("TOLLGATE_DATABASE_URL", "postgres://tollgate@127.0.0.1:5432/tollgate?sslmode=disable")
	db, err := postgres.Open(ctx, url)
	if err != nil {
		if getenv("TOLLGATE_DATABASE_URL") == "" {
			// The default is rarely where a newcomer's database is.
			return fmt.Errorf("%w\nTOLLGATE_DATABASE_URL is not set (for make run's database: eval \"$(make -s env)\")", err)
		}
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

// checkRequired fails when a flag of fs whose usage ends in "(required)"
// is empty, naming every such flag: the rule --help shows is the one
// enforced.
func checkRequired(name string, fs *flag.FlagSet) error {
	var missing []string
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasSuffix(f.Usage, "(required)") && f.Value.String() == "" {
			missing = append(missing, strings.Repeat("-", min(len(f.Name), 2))+f.Name) // -f, --plan
		}
	})
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: %s is required", name, missing[0])
	}
	return fmt.Errorf("%s: %s are required", name, strings.Join(missing, " and "))
}

// flagsFrom returns args from the first flag on.
func flagsFrom(args []string) []string {
	for i, a := range args {
		if strings.HasPrefix(a, "-") {
			return args[i:]
		}
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printTable prints rows under header, in columns aligned with spaces.
func printTable(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// printList prints list as a JSON array (asJSON), or as a table under
// header with row's cells for each item.
func printList[T any](w io.Writer, asJSON bool, list []T, header []string, row func(T) []string) error {
	if asJSON {
		return printJSON(w, list)
	}
	rows := make([][]string, len(list))
	for i, v := range list {
		rows[i] = row(v)
	}
	return printTable(w, header, rows)
}

// listAction is the action of a command that lists records (records
// names them for --help, e.g. "tenant records"): with --json as a JSON
// array, else as a table under header. list returns them and the cells of
// each one's row.
func listAction[T any](fs *flag.FlagSet, records string, header []string,
	list func(ctx context.Context, e *invocation) ([]T, func(T) []string, error)) action {
	asJSON := fs.Bool("json", false, "print the "+records+" as a JSON array")
	return func(ctx context.Context, e *invocation) error {
		items, row, err := list(ctx, e)
		if err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
		return printList(e.stdout, *asJSON, items, header, row)
	}
}

// revokeAction is the action of a command that revokes what --id names
// (idUsage describes that ID for --help) through revoke, which also says
// whether it was revoked before (then the command changes nothing). It
// prints the revoked record as JSON with --json (whose, such as "key's",
// names the record in that flag's help), else a sentence with the name
// and revocation time describe gives and, when it was not revoked before,
// what revoking does (effect).
func revokeAction[T any](fs *flag.FlagSet, idUsage, whose string,
	revoke func(ctx context.Context, e *invocation, id string) (after T, already bool, err error),
	describe func(T) (name string, revokedAt *time.Time), effect string) action {
	id := ref[string]{"id", fs.String("id", "", idUsage+" (required)"),
		func(_ context.Context, _ *invocation, s string) (string, error) { return s, nil }}
	var already bool
	return changeAction(fs, id, "revoked "+whose, func(ctx context.Context, e *invocation, id string) (T, error) {
		after, was, err := revoke(ctx, e, id)
		already = was
		return after, err
	}, func(after T) string {
		name, revokedAt := describe(after)
		if already {
			return fmt.Sprintf("%s was already revoked at %s", name, timeCell(revokedAt))
		}
		return fmt.Sprintf("%s revoked at %s; %s", name, timeCell(revokedAt), effect)
	})
}

// changeAction is the action of a command that changes the record target
// names through change. It prints the record change returns as JSON with
// --json (what, such as "suspended tenant's", names it in that flag's
// help), else the sentence said returns.
func changeAction[T, R any](fs *flag.FlagSet, target ref[T], what string,
	change func(ctx context.Context, e *invocation, v T) (R, error), said func(R) string) action {
	asJSON := fs.Bool("json", false, "print the "+what+" record as JSON")
	return target.run(func(ctx context.Context, e *invocation, v T) error {
		after, err := change(ctx, e, v)
		if err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
		if *asJSON {
			return printJSON(e.stdout, after)
		}
		_, err = fmt.Fprintln(e.stdout, said(after))
		return err
	})
}

// stringList is a repeatable flag: each use adds a value.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ", ") }

func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// ref is a flag that names a record, such as a tenant by ID or name;
// find looks up what a value names.
type ref[T any] struct {
	flag  string
	value *string
	find  func(ctx context.Context, e *invocation, s string) (T, error)
}

// get returns what the flag names; its error names the flag.
func (f ref[T]) get(ctx context.Context, e *invocation) (T, error) {
	v, err := f.find(ctx, e, *f.value)
	if err != nil {
		return v, fmt.Errorf("--%s: %w", f.flag, err)
	}
	return v, nil
}

// run is the action that finds what the flag names, then does act with
// it. Errors start with the command's name.
func (f ref[T]) run(act func(ctx context.Context, e *invocation, v T) error) action {
	return func(ctx context.Context, e *invocation) error {
		v, err := f.get(ctx, e)
		if err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
		return act(ctx, e, v)
	}
}

// namesByID maps the ID of every record list returns to its name, as
// idName reads them, for tables that show names where records hold IDs.
func namesByID[T any, ID comparable](ctx context.Context, list func(context.Context) ([]T, error), idName func(T) (ID, string)) (map[ID]string, error) {
	all, err := list(ctx)
	if err != nil {
		return nil, err
	}
	names := make(map[ID]string, len(all))
	for _, v := range all {
		id, name := idName(v)
		names[id] = name
	}
	return names, nil
}

// timeCell formats an optional time for printTable: UTC, to the second,
// "-" when nil.
func timeCell(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
