package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/limiter"
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
	plan := planFlag(fs, "")
	clearAll := fs.Bool("clear", false, "remove every route (no TEMPLATE given)")
	return func(ctx context.Context, e *invocation) error {
		switch {
		case len(e.args) == 0 && !*clearAll:
			return errors.New("plans routes: give the route templates, or --clear to remove them all")
		case len(e.args) > 0 && *clearAll:
			return errors.New("plans routes: --clear takes no templates")
		}
		p, err := plan.get(ctx, e)
		if err != nil {
			return fmt.Errorf("plans routes: %w", err)
		}
		p, err = plans.NewOps(e.db).SetRoutes(ctx, audit.CLI, p.ID, e.args)
		if err != nil {
			return fmt.Errorf("plans routes: %w", err)
		}
		return printJSON(e.stdout, p)
	}
}

// planFlag declares --plan on fs, a plan's name: required when def is
// "", else def when not given.
func planFlag(fs *flag.FlagSet, def string) ref[plans.Plan] {
	usage := "plan name"
	if def == "" {
		usage += " (required)"
	}
	return ref[plans.Plan]{"plan", fs.String("plan", def, usage),
		func(ctx context.Context, e *invocation, s string) (plans.Plan, error) {
			return plans.NewStore(e.db).GetByName(ctx, s)
		}}
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

const plansRuleHelp = `Rate rules take a limit per --period; a concurrency rule limits requests in
flight, each holding a lease of --lease-ttl that the SDK renews while the
request runs and releases when it ends. Holds: --hold makes the SDK's
middleware check with an estimate and settle the actual cost; --refund-on
settles at 0 on a 5xx or a timeout (charge only what succeeded).
  admin plans rule --plan pro --name tokens --limit 100000 --period 1m --hold \
      --hold-ttl 5m --hold-expiry refund --refund-on 5xx,timeout
  admin plans rule --plan pro --name inflight --algorithm concurrency --limit 4 --lease-ttl 30s`

// plansRule adds a rule to a plan or replaces the rule of its name.
func plansRule(fs *flag.FlagSet) action {
	plan := planFlag(fs, "")
	var r plans.Rule
	fs.StringVar(&r.Name, "name", "", "rule name (required)")
	algorithm := fs.String("algorithm", "gcra", "algorithm: "+fmt.Sprint(limiter.Algorithms))
	fs.Int64Var(&r.Limit, "limit", 0, "units per period; for concurrency, requests in flight")
	period := fs.Duration("period", 0, "the period (e.g. 1m, 1h)")
	leaseTTL := fs.Duration("lease-ttl", 0, "concurrency: how long a lease lasts unrenewed (instead of --period)")
	fs.Int64Var(&r.Burst, "burst", 0, "units at once (0: the limit)")
	fs.StringVar(&r.Resource, "resource", "*", `resource pattern, e.g. "POST /v1/complete"`)
	scope := fs.String("scope", "key", "key, tenant or ip")
	mode := fs.String("mode", "enforce", "enforce or shadow")
	failure := fs.String("failure-mode", "open", "open or closed")
	fs.BoolVar(&r.Options.Hold, "hold", false, "callers check with a hold (an estimate, settled later)")
	holdTTL := fs.Duration("hold-ttl", 0, "how long a hold stays open unsettled (0: 5m, at most 24h)")
	fs.StringVar(&r.Options.HoldExpiry, "hold-expiry", "", "an unsettled hold at expiry: refund (default) or charge")
	refundOn := fs.String("refund-on", "", "settle holds at 0 on these outcomes: 5xx,timeout")
	return func(ctx context.Context, e *invocation) error {
		if *leaseTTL != 0 && *period != 0 {
			return errors.New("plans rule: give --period or --lease-ttl, not both")
		}
		p, err := plan.get(ctx, e)
		if err != nil {
			return fmt.Errorf("plans rule: %w", err)
		}
		r.Algorithm = limiter.Algorithm(*algorithm)
		r.PeriodUS = (*period + *leaseTTL).Microseconds()
		r.Scope, r.Mode, r.FailureMode = plans.Scope(*scope), plans.Mode(*mode), plans.FailureMode(*failure)
		r.Options.HoldTTLS = int64(holdTTL.Seconds())
		if *refundOn != "" {
			r.Options.RefundOn = strings.Split(*refundOn, ",")
		}
		p, err = plans.NewOps(e.db).PutRule(ctx, audit.CLI, p.ID, r)
		if err != nil {
			return fmt.Errorf("plans rule: %w", err)
		}
		return printJSON(e.stdout, p)
	}
}
