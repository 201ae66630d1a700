package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/plans"
)

func plansList(fs *flag.FlagSet) action {
	return listAction(fs, "plan records, with rules and tiers,", []string{"ID", "NAME", "STATUS", "CURRENCY", "BASE FEE (MINOR)",
		"INCLUDED UNITS", "QUOTA", "RULES"},
		func(ctx context.Context, e *invocation) ([]plans.Plan, func(plans.Plan) []string, error) {
			list, err := plans.NewStore(e.db).List(ctx)
			return list, planRow, err
		})
}

// planRow is the table row of a plan.
func planRow(p plans.Plan) []string {
	rules := make([]string, len(p.Rules))
	for j, r := range p.Rules {
		rules[j] = r.Name
	}
	status := "active"
	if p.ArchivedAt != nil {
		status = "archived"
	}
	return []string{fmt.Sprint(p.ID), p.Name, status, p.Currency, fmt.Sprint(p.BaseFeeMinor),
		fmt.Sprint(p.IncludedUnits), string(p.QuotaMode), strings.Join(rules, ",")}
}

const plansRoutesHelp = `Usage counts each check under the first of its plan's routes that matches
its resource, or under (other). A template is "METHOD /path"; a segment
"{name}" takes any one segment, a last segment "*" the rest of the path:
  admin plans routes --plan pro 'GET /repos/{owner}/{repo}' 'GET /static/*'
--clear removes every route.`

func plansRoutes(fs *flag.FlagSet) action {
	plan := fs.String("plan", "", "plan name (required)")
	clearAll := fs.Bool("clear", false, "remove every route (no TEMPLATE given)")
	return func(ctx context.Context, e *invocation) error {
		switch {
		case *plan == "":
			return errors.New("plans routes: --plan is required")
		case len(e.args) == 0 && !*clearAll:
			return errors.New("plans routes: give the route templates, or --clear to remove them all")
		case len(e.args) > 0 && *clearAll:
			return errors.New("plans routes: --clear takes no templates")
		}
		p, err := plans.NewStore(e.db).GetByName(ctx, *plan)
		if err != nil {
			return fmt.Errorf("plans routes: --plan: %w", err)
		}
		p, err = plans.NewOps(e.db).SetRoutes(ctx, audit.CLI, p.ID, e.args)
		if err != nil {
			return fmt.Errorf("plans routes: %w", err)
		}
		return printJSON(e.stdout, p)
	}
}

// planNamesByID maps every plan's ID to its name.
func planNamesByID(ctx context.Context, e *invocation) (map[int64]string, error) {
	list, err := plans.NewStore(e.db).List(ctx)
	if err != nil {
		return nil, err
	}
	names := make(map[int64]string, len(list))
	for _, p := range list {
		names[p.ID] = p.Name
	}
	return names, nil
}
