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

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/auth"
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
	// flags declares the command's flags and returns its action.
	flags func(fs *flag.FlagSet) func(ctx context.Context, env *env) error
	// noSchemaCheck lets migrate run on any schema version.
	noSchemaCheck bool
	// noDatabase runs the command without connecting to Postgres.
	noDatabase bool
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

// secretKeys reads the keys that seal the service-token signing keys. The
// commands that sign or serve refuse to run without them.
func (e *env) secretKeys() (*auth.SecretKeys, error) {
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
		keysIssueCommand(),
		keysRevokeCommand(),
		tokensIssueCommand(),
		secretsGenerateCommand(),
		secretsResealCommand(),
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

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
