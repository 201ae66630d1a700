package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
)

func usersCreate(fs *flag.FlagSet) action {
	email := fs.String("email", "", "the user's email, used to log in (required)")
	role := fs.String("role", "", "operator, tenant_admin or tenant_viewer (required)")
	tenant := tenantFlag(fs, "tenant ID or name (required for tenant_admin and tenant_viewer)")
	fromStdin := fs.Bool("password-stdin", false, "read the password from the first line of stdin")
	asJSON := fs.Bool("json", false, `print {"user": …, "password": …} ("password" only when generated)`)
	return func(ctx context.Context, e *invocation) error {
		tenantID, err := optionalTenantID(ctx, e, tenant)
		if err != nil {
			return fmt.Errorf("users create: %w", err)
		}
		in := auth.CreateUserInput{Email: *email, Role: auth.Role(*role), TenantID: tenantID}
		generated := !*fromStdin
		if !generated {
			line, err := bufio.NewReader(e.stdin).ReadString('\n')
			if err != nil && line == "" {
				return errors.New("users create: --password-stdin: no password on stdin")
			}
			password := strings.TrimRight(line, "\r\n")
			in.Password = &password
		}
		res, err := auth.NewOps(e.db, nil).CreateUser(ctx, audit.CLI, in)
		if err != nil {
			return fmt.Errorf("users create: %w", err)
		}
		u := res.User
		if *asJSON {
			out := map[string]any{"user": u}
			if generated {
				out["password"] = res.Password
			}
			return printJSON(e.stdout, out)
		}
		if generated {
			fmt.Fprintln(e.stdout, res.Password)
			fmt.Fprintf(e.stderr, "%s %s created (id %s); the password above is not shown again\n", u.Role, u.Email, u.ID)
		} else {
			fmt.Fprintf(e.stderr, "%s %s created (id %s)\n", u.Role, u.Email, u.ID)
		}
		return nil
	}
}

func usersDisable(fs *flag.FlagSet) action {
	return userSessionsAction(fs, (*auth.Ops).DisableUser, func(e *invocation, res auth.UserSessions) error {
		fmt.Fprintf(e.stderr, "%s disabled; %d sessions ended\n", res.User.Email, res.SessionsEnded)
		return printJSON(e.stdout, res.User)
	})
}

func usersSessionsRevoke(fs *flag.FlagSet) action {
	return userSessionsAction(fs, (*auth.Ops).EndUserSessions, func(e *invocation, res auth.UserSessions) error {
		_, err := fmt.Fprintf(e.stdout, "%d sessions of %s ended\n", res.SessionsEnded, res.User.Email)
		return err
	})
}

// userSessionsAction is the action of a command that ends the sessions of
// the admin user --email names: change makes the command's change to the
// user, and report says what it did.
func userSessionsAction(fs *flag.FlagSet, change func(*auth.Ops, context.Context, audit.Actor, string) (auth.UserSessions, error),
	report func(e *invocation, res auth.UserSessions) error) action {
	email := fs.String("email", "", "the user's email (required)")
	return func(ctx context.Context, e *invocation) error {
		u, err := auth.NewStore(e.db).GetUserByEmail(ctx, *email)
		if err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
		res, err := change(auth.NewOps(e.db, nil), ctx, audit.CLI, u.ID)
		if err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
		return report(e, res)
	}
}
