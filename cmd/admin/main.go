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
	// flags declares the command's flags and returns its action.
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
		plansListCommand(),
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

// timeCell formats an optional time for printTable: UTC, to the second,
// "-" when nil.
func timeCell(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
