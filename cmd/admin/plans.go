package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/tollgate/tollgate/internal/plans"
)

func plansListCommand() command {
	return listCommand(command{
		name:    "plans list",
		summary: "list plans with their pricing and rules, by name (archived ones too)",
	}, "plan records, with rules and tiers,", []string{"ID", "NAME", "STATUS", "CURRENCY", "BASE FEE (MINOR)",
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
