package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/region"
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
"{name}" takes any one segment, a last segment "*" the rest of the path.
Templates given as arguments replace the plan's routes; --add appends one
(a template the plan has stays where it is) and --remove takes one out,
leaving the others:
  admin plans routes --plan pro 'GET /repos/{owner}/{repo}' 'GET /static/*'
  admin plans routes --plan pro --add 'POST /v1/search' --remove 'GET /static/*'
--clear removes every route.`

func plansRoutes(fs *flag.FlagSet) action {
	plan := planFlag(fs, "")
	clearAll := fs.Bool("clear", false, "remove every route (no TEMPLATE given)")
	var add, remove stringList
	fs.Var(&add, "add", "append `TEMPLATE`, keeping the others (repeatable)")
	fs.Var(&remove, "remove", "remove `TEMPLATE`, keeping the others (repeatable)")
	return plan.run(func(ctx context.Context, e *invocation, p plans.Plan) error {
		edit := len(add) > 0 || len(remove) > 0
		switch {
		case *clearAll && (len(e.args) > 0 || edit):
			return errors.New("plans routes: --clear takes no templates, --add or --remove")
		case edit && len(e.args) > 0:
			return errors.New("plans routes: give the templates (replacing the plan's), or --add and --remove, not both")
		case !edit && len(e.args) == 0 && !*clearAll:
			return errors.New("plans routes: give the route templates, --add or --remove, or --clear to remove them all")
		}
		routes := e.args
		if edit {
			routes = slices.Clone(p.Routes)
			for _, r := range remove {
				i := slices.Index(routes, r)
				if i < 0 {
					return fmt.Errorf("plans routes: --remove: plan %s has no route %q (see plans list --json)", p.Name, r)
				}
				routes = slices.Delete(routes, i, i+1)
			}
			for _, r := range add {
				if !slices.Contains(routes, r) {
					routes = append(routes, r)
				}
			}
		}
		ops, err := e.planOps()
		if err != nil {
			return fmt.Errorf("plans routes: %w", err)
		}
		p, err = ops.SetRoutes(ctx, audit.CLI, p.ID, routes)
		if err != nil {
			return fmt.Errorf("plans routes: %w", err)
		}
		return printJSON(e.stdout, p)
	})
}

const plansCreateHelp = `The plan's fields are the admin API's plan body (POST /api/v1/plans), in a
file (-f, JSON or YAML) or flag by flag; flags override the file's fields.
Rules are JSON (or YAML) as the API takes them, period in microseconds:
  admin plans create --name team --display-name Team --base-fee-minor 4900 \
      --included-units 100000 --quota-mode overage --overage-unit-minor 2 \
      --rules '[{"name": "hourly", "limit": 5000, "period_us": 3600000000}]'
  admin plans create -f team.yaml
plans rule adds or replaces one rule with flags; plans apply keeps every plan
in one file.`

func plansCreate(fs *flag.FlagSet) action {
	fields := declarePlanFields(fs, "plan name: lower-case letters, digits, '_' and '-'")
	return func(ctx context.Context, e *invocation) error {
		var in plans.PlanInput
		if _, err := fields.apply(e, &in); err != nil {
			return fmt.Errorf("plans create: %w", err)
		}
		ops, err := e.planOps()
		if err != nil {
			return fmt.Errorf("plans create: %w", err)
		}
		p, err := ops.Create(ctx, audit.CLI, in)
		if err != nil {
			return fmt.Errorf("plans create: %w", err)
		}
		return printJSON(e.stdout, p)
	}
}

const plansUpdateHelp = `Changes the fields the flags give and keeps the others. -f replaces the
whole plan with the file's body (PUT /api/v1/plans/{id}; a body without a
name keeps the plan's), then the flags override its fields. --name renames
the plan. Checks see the change within a second.
  admin plans update --plan pro --base-fee-minor 5900 --display-name "Pro (2026)"`

func plansUpdate(fs *flag.FlagSet) action {
	plan := planFlag(fs, "")
	fields := declarePlanFields(fs, "rename the plan to this")
	return plan.run(func(ctx context.Context, e *invocation, p plans.Plan) error {
		var in plans.PlanInput
		if err := convert(p, &in); err != nil {
			return fmt.Errorf("plans update: %w", err)
		}
		given, err := fields.apply(e, &in)
		switch {
		case err != nil:
			return fmt.Errorf("plans update: %w", err)
		case !given:
			return errors.New("plans update: nothing to change: give -f or the flags of the fields to change (see --help)")
		}
		ops, err := e.planOps()
		if err != nil {
			return fmt.Errorf("plans update: %w", err)
		}
		p, err = ops.Update(ctx, audit.CLI, p.ID, in)
		if err != nil {
			return fmt.Errorf("plans update: %w", err)
		}
		return printJSON(e.stdout, p)
	})
}

// plansArchive archives a plan, or brings it back (archive false).
func plansArchive(archive bool) func(fs *flag.FlagSet) action {
	return func(fs *flag.FlagSet) action {
		done := "is active again: tenants can be put on it"
		if archive {
			done = "is archived: its tenants keep it, and no other tenant can be put on it"
		}
		return changeAction(fs, planFlag(fs, ""), "plan's", func(ctx context.Context, e *invocation, p plans.Plan) (plans.Plan, error) {
			ops, err := e.planOps()
			if err != nil {
				return plans.Plan{}, err
			}
			return ops.SetArchived(ctx, audit.CLI, p.ID, archive)
		}, func(p plans.Plan) string { return fmt.Sprintf("plan %s %s", p.Name, done) })
	}
}

// planFields are the flags of a plan's fields, for plans create and
// update: the admin API's plan body from -f, then the fields the other
// flags give. The flags are named after the body's fields
// (--base-fee-minor is base_fee_minor), so that errors naming a field
// name its flag too.
type planFields struct {
	fs                                            *flag.FlagSet
	file, name, displayName, currency, quotaMode  string
	tiers, rules                                  string
	baseFeeMinor, includedUnits, overageUnitMinor int64
	routes                                        stringList
}

// declarePlanFields declares the flags of a plan's fields on fs; nameUsage
// describes --name.
func declarePlanFields(fs *flag.FlagSet, nameUsage string) *planFields {
	f := &planFields{fs: fs}
	fs.StringVar(&f.file, "f", "", "a file with the plan's body as the admin API takes it, JSON or YAML; - for stdin")
	fs.StringVar(&f.name, "name", "", nameUsage)
	fs.StringVar(&f.displayName, "display-name", "", "the name people see")
	fs.StringVar(&f.currency, "currency", "", "ISO 4217 code (a new plan's default: USD)")
	fs.Int64Var(&f.baseFeeMinor, "base-fee-minor", 0, "monthly base fee, in minor units")
	fs.Int64Var(&f.includedUnits, "included-units", 0, "units included each month (the quota of a hard or overage plan)")
	fs.Int64Var(&f.overageUnitMinor, "overage-unit-minor", 0, "flat price of a unit past the included ones, in minor units")
	fs.StringVar(&f.quotaMode, "quota-mode", "", "none (default), hard or overage")
	fs.StringVar(&f.tiers, "tiers", "", `graduated overage prices, a JSON array such as '[{"up_to": 1000, "unit_minor": 3}, {"unit_minor": 2}]' ([] for flat); @FILE reads a file`)
	fs.StringVar(&f.rules, "rules", "", `every rule of the plan, a JSON array as the admin API takes them; @FILE reads a file`)
	fs.Var(&f.routes, "route", "a route `TEMPLATE`, in the order they are tried (repeatable): replaces the plan's routes")
	return f
}

// apply sets the fields of in that -f and the flags give, and reports
// whether they gave any. Errors name the flag.
func (f *planFields) apply(e *invocation, in *plans.PlanInput) (given bool, err error) {
	if f.file != "" {
		body := plans.PlanInput{}
		if err := decodeDocument(e, f.file, &body, ""); err != nil {
			return false, fmt.Errorf("-f: %w", err)
		}
		if body.Name == "" {
			body.Name = in.Name
		}
		*in, given = body, true
	}
	f.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "name":
			in.Name = f.name
		case "display-name":
			in.DisplayName = f.displayName
		case "currency":
			in.Currency = f.currency
		case "base-fee-minor":
			in.BaseFeeMinor = f.baseFeeMinor
		case "included-units":
			in.IncludedUnits = f.includedUnits
		case "overage-unit-minor":
			in.OverageUnitMinor = f.overageUnitMinor
		case "quota-mode":
			in.QuotaMode = plans.QuotaMode(f.quotaMode)
		case "tiers":
			err = cmp.Or(err, decodeArgument(e, "tiers", f.tiers, &in.Tiers))
		case "rules":
			err = cmp.Or(err, decodeArgument(e, "rules", f.rules, &in.Rules))
		case "route":
			in.Routes = f.routes
		default:
			return
		}
		given = true
	})
	return given, err
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
	return namesByID(ctx, plans.NewStore(e.db).List, func(p plans.Plan) (int64, string) { return p.ID, p.Name })
}

const plansRuleHelp = `Rate rules take a limit per --period; a concurrency rule limits requests in
flight, each holding a lease of --lease-ttl that the SDK renews while the
request runs and releases when it ends. Holds: --hold makes the SDK's
middleware check with an estimate and settle the actual cost; --refund-on
settles at 0 on a 5xx or a timeout (charge only what succeeded).
  admin plans rule --plan pro --name tokens --limit 100000 --period 1m --hold \
      --hold-ttl 5m --hold-expiry refund --refund-on 5xx,timeout
  admin plans rule --plan pro --name inflight --algorithm concurrency --limit 4 --lease-ttl 30s
With regions (TOLLGATE_REGION, TOLLGATE_REGIONS), --region-scope makes a rule
global: global_shared decides on every region's admissions as last
exchanged; global_split divides the limit between the regions.
  admin plans rule --plan pro --name daily --algorithm fixed_window --limit 100000 \
      --period 24h --region-scope global_split --min-share 5000`

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
	regionScope := fs.String("region-scope", "", "across regions: regional (default), global_shared or global_split (a deployment of several regions)")
	fs.Int64Var(&r.MinShare, "min-share", 0, "global_split: the least allotment a region keeps, in units (0: limit / (4 × regions))")
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
		r.RegionScope = region.Scope(*regionScope)
		if *refundOn != "" {
			r.Options.RefundOn = strings.Split(*refundOn, ",")
		}
		ops, err := e.planOps()
		if err != nil {
			return fmt.Errorf("plans rule: %w", err)
		}
		p, err = ops.PutRule(ctx, audit.CLI, p.ID, r)
		if err != nil {
			return fmt.Errorf("plans rule: %w", err)
		}
		return printJSON(e.stdout, p)
	}
}
