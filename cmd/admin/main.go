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
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/buildinfo"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/postgres"
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
	// args, when the command takes positional arguments, is their
	// synopsis for the usage line, e.g. "up | down [N]".
	args string
	// help, when set, is printed after the summary by --help.
	help string
	// flags declares the command's flags and returns its action. A flag
	// whose usage ends in "(required)" must be given a value: run refuses
	// the command without one (checkRequired), before the action.
	flags func(fs *flag.FlagSet) func(ctx context.Context, env *invocation) error
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

// invocation is one run of a command: its streams, positional arguments,
// settings and database.
type invocation struct {
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
		return nil, errors.New("TOLLGATE_SECRET_KEY is not set: it seals the service-token signing keys at rest; generate one with `admin secrets generate` and keep it like a password (make run and docker-compose.yml set a demo key)")
	}
	keys, err := auth.ParseSecretKeys(current, previous...)
	if err != nil {
		return nil, fmt.Errorf("TOLLGATE_SECRET_KEY or TOLLGATE_SECRET_KEY_PREVIOUS: %w", err)
	}
	return keys, nil
}

func commands() []command {
	return []command{
		migrateCommand(),
		seedCommand(),
		tenantsCreateCommand(),
		tenantsListCommand(),
		tenantsQuotaCommand(),
		plansListCommand(),
		plansQuotaCommand(),
		plansRoutesCommand(),
		keysIssueCommand(),
		keysListCommand(),
		keysRevokeCommand(),
		webhooksCreateCommand(),
		webhooksListCommand(),
		webhooksReplayCommand(),
		tokensIssueCommand(),
		tokensListCommand(),
		tokensRevokeCommand(),
		secretsGenerateCommand(),
		secretsResealCommand(),
		usersCreateCommand(),
		usersDisableCommand(),
		usersSessionsRevokeCommand(),
		serveCommand(),
		workerCommand(),
		healthcheckCommand(),
		reportCommand(),
		closeCommand(),
		creditsGrantCommand(),
		creditsAdjustCommand(),
		creditsListCommand(),
		creditsLedgerCommand(),
		plansCreditsCommand(),
	}
}

// usage lists cmds on w: every command (group ""), or one group's, such
// as "keys".
func usage(w io.Writer, group string, cmds []command) {
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
		usage(stderr, "", commands())
		return errors.New("no command given")
	case args[0] == "help" || isHelp(args[0]):
		usage(stdout, "", commands())
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
				usage(stdout, prefix, group)
				return nil
			}
			usage(stderr, prefix, group)
			return fmt.Errorf("%s: want a subcommand", prefix)
		}
		usage(stderr, "", commands())
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
	e := &invocation{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr, args: fs.Args(), ready: ready}
	if cmd.noDatabase {
		return action(ctx, e)
	}
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

// checkRequired fails when a flag of fs whose usage ends in "(required)"
// is empty, naming every such flag: the rule --help shows is the one
// enforced.
func checkRequired(name string, fs *flag.FlagSet) error {
	var missing []string
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasSuffix(f.Usage, "(required)") && f.Value.String() == "" {
			missing = append(missing, "--"+f.Name)
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

// listCommand completes c, a command that lists records (records names
// them for --help, e.g. "tenant records"): with --json as a JSON array,
// else as a table under header. list returns them and the cells of each
// one's row.
func listCommand[T any](c command, records string, header []string,
	list func(ctx context.Context, e *invocation) ([]T, func(T) []string, error)) command {
	c.flags = func(fs *flag.FlagSet) func(context.Context, *invocation) error {
		asJSON := fs.Bool("json", false, "print the "+records+" as a JSON array")
		return func(ctx context.Context, e *invocation) error {
			items, row, err := list(ctx, e)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			return printList(e.stdout, *asJSON, items, header, row)
		}
	}
	return c
}

// revokeCommand completes c, a command that revokes what --id names
// (idUsage describes that ID for --help) through revoke. It prints the
// revoked record as JSON with --json (whose, such as "key's", names the
// record in that flag's help), else the sentence said returns.
func revokeCommand[T any](c command, idUsage, whose string,
	revoke func(ctx context.Context, e *invocation, id string) (T, error), said func(T) string) command {
	c.flags = func(fs *flag.FlagSet) func(context.Context, *invocation) error {
		id := fs.String("id", "", idUsage+" (required)")
		asJSON := fs.Bool("json", false, "print the revoked "+whose+" record as JSON")
		return func(ctx context.Context, e *invocation) error {
			after, err := revoke(ctx, e, *id)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if *asJSON {
				return printJSON(e.stdout, after)
			}
			_, err = fmt.Fprintln(e.stdout, said(after))
			return err
		}
	}
	return c
}

// timeCell formats an optional time for printTable: UTC, to the second,
// "-" when nil.
func timeCell(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
