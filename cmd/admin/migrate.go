package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/tollgate/tollgate/internal/postgres"
)

const migrateHelp = `
  up         apply every migration this binary has
  down N     roll back N steps with this binary's migrations (down all:
             every step, which drops every table and its data)
  force V    record version V after a failed migration was finished or
             undone by hand (the schema is "dirty" until then)
  version    show the schema version and the one this binary expects`

func migrate(fs *flag.FlagSet) action {
	return func(ctx context.Context, e *invocation) error {
		if len(e.args) == 0 {
			return errors.New("migrate: want up, down N, down all, force V or version")
		}
		switch e.args[0] {
		case "up":
			if err := postgres.MigrateUp(e.db); err != nil {
				return err
			}
			// Webhook secrets an earlier version stored in the clear are
			// sealed now when the key is at hand, else by `admin serve`
			// at start.
			if keys, err := e.secretKeys(); err == nil {
				if err := sealWebhookSecrets(ctx, e, keys, false); err != nil {
					return err
				}
			}
		case "down":
			// A bare `migrate down` would drop every table: the number of
			// steps, or "all", must be said.
			if len(e.args) != 2 {
				return errors.New("migrate down: want the number of steps to roll back (migrate down 1), or all (migrate down all: every table and its data dropped)")
			}
			steps := 0
			if e.args[1] != "all" {
				if _, err := fmt.Sscan(e.args[1], &steps); err != nil || steps < 1 {
					return fmt.Errorf("migrate down: N must be a positive integer or all, got %q", e.args[1])
				}
			}
			if err := postgres.MigrateDown(e.db, steps); err != nil {
				return err
			}
		case "force":
			var version int
			if len(e.args) != 2 {
				return errors.New("migrate force: want the version to record, e.g. migrate force 3")
			}
			if _, err := fmt.Sscan(e.args[1], &version); err != nil || version < 0 {
				return fmt.Errorf("migrate force: the version must be an integer ≥ 0, got %q", e.args[1])
			}
			if err := postgres.MigrateForce(e.db, version); err != nil {
				return err
			}
		case "version":
		default:
			return fmt.Errorf("migrate: unknown action %q (want up, down, force or version)", e.args[0])
		}
		v, dirty, err := postgres.Version(ctx, e.db)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "schema version %d (dirty=%v); this binary expects %d\n", v, dirty, postgres.SchemaVersion())
		return nil
	}
}
