package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/tollgate/tollgate/internal/plans"
)

func plansListCommand() command {
	return command{
		name:    "plans list",
		summary: "list plans with their pricing and rules, by name (archived ones too)",
		flags: func(fs *flag.FlagSet) func(context.Context, *invocation) error {
			asJSON := fs.Bool("json", false, "print the plan records, with rules and tiers, as a JSON array")
			return func(ctx context.Context, e *invocation) error {
				list, err := plans.NewStore(e.db).List(ctx)
				if err != nil {
					return fmt.Errorf("plans list: %w", err)
				}
				if *asJSON {
					return printJSON(e.stdout, list)
				}
				rows := make([][]string, len(list))
				for i, p := range list {
					rules := make([]string, len(p.Rules))
					for j, r := range p.Rules {
						rules[j] = r.Name
					}
					status := "active"
					if p.ArchivedAt != nil {
						status = "archived"
					}
					rows[i] = []string{fmt.Sprint(p.ID), p.Name, status, p.Currency, fmt.Sprint(p.BaseFeeMinor),
						fmt.Sprint(p.IncludedUnits), string(p.QuotaMode), strings.Join(rules, ",")}
				}
				return printTable(e.stdout, []string{"ID", "NAME", "STATUS", "CURRENCY", "BASE FEE (MINOR)",
					"INCLUDED UNITS", "QUOTA", "RULES"}, rows)
			}
		},
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
