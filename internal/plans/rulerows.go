package plans

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tollgate/tollgate/internal/postgres"
)

// RuleTable names a table of rule rows that belong to an owner: plans'
// rules (plan_rules, owned by plan_id) and tenants' overrides
// (tenant_rule_overrides, owned by tenant_id; see package tenants). Such a
// table has an id, the owner column, the rule columns, a position, and a
// unique (owner, name). Table and Owner are spliced into SQL: constants of
// the code, never input.
type RuleTable struct {
	Table string
	Owner string
}

// planRules are plans' rules.
var planRules = RuleTable{Table: "plan_rules", Owner: "plan_id"}

// ruleColumns are a rule row's columns after its id and owner, as
// written; ruleSelect reads them, a regional rule's NULL region_scope as
// "".
const (
	ruleColumns = `name, algorithm, limit_count, period_us, burst, resource, scope, mode, failure_mode, options, region_scope, min_share`
	ruleSelect  = `name, algorithm, limit_count, period_us, burst, resource, scope, mode, failure_mode, options, COALESCE(region_scope, ''), min_share`
)

// LoadRules returns the rules of t's rows that match where (an SQL
// condition on args), by owner, each owner's in position order. K is the
// Go type the owner column scans into.
func LoadRules[K comparable](ctx context.Context, db postgres.Conn, t RuleTable, where string, args ...any) (map[K][]Rule, error) {
	rows, err := db.Query(ctx, `SELECT id, `+t.Owner+`, `+ruleSelect+` FROM `+t.Table+`
		WHERE `+where+` ORDER BY `+t.Owner+`, position, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("plans: load %s: %w", t.Table, err)
	}
	defer rows.Close()
	out := map[K][]Rule{}
	for rows.Next() {
		var r Rule
		var owner K
		var opts []byte
		if err := rows.Scan(&r.ID, &owner, &r.Name, &r.Algorithm, &r.Limit, &r.PeriodUS, &r.Burst,
			&r.Resource, &r.Scope, &r.Mode, &r.FailureMode, &opts, &r.RegionScope, &r.MinShare); err != nil {
			return nil, fmt.Errorf("plans: scan %s: %w", t.Table, err)
		}
		if err := json.Unmarshal(opts, &r.Options); err != nil {
			return nil, fmt.Errorf("plans: %s %d options: %w", t.Table, r.ID, err)
		}
		out[owner] = append(out[owner], r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("plans: load %s: %w", t.Table, err)
	}
	return out, nil
}

// PutRules makes rules, in their order, owner's rules in t. A rule keeps
// its row by name, and with it its ID and limiter state; rows of other
// names are deleted. Run it in the transaction that locks or writes the
// owner.
func PutRules(ctx context.Context, db postgres.Conn, t RuleTable, owner any, rules []Rule) error {
	names := make([]string, len(rules))
	for i, r := range rules {
		names[i] = r.Name
		opts, _ := json.Marshal(r.Options)
		_, err := db.Exec(ctx, `INSERT INTO `+t.Table+` (`+t.Owner+`, `+ruleColumns+`, position)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, NULLIF($12, ''), $13, $14)
			ON CONFLICT (`+t.Owner+`, name) DO UPDATE SET algorithm = EXCLUDED.algorithm,
			limit_count = EXCLUDED.limit_count, period_us = EXCLUDED.period_us, burst = EXCLUDED.burst,
			resource = EXCLUDED.resource, scope = EXCLUDED.scope, mode = EXCLUDED.mode,
			failure_mode = EXCLUDED.failure_mode, options = EXCLUDED.options,
			region_scope = EXCLUDED.region_scope, min_share = EXCLUDED.min_share, position = EXCLUDED.position`,
			owner, r.Name, r.Algorithm, r.Limit, r.PeriodUS, r.Burst, r.Resource, r.Scope, r.Mode,
			r.FailureMode, opts, string(r.WithDefaults().RegionScope), r.MinShare, i)
		if err != nil {
			return fmt.Errorf("plans: put %s %s: %w", t.Table, r.Name, err)
		}
	}
	_, err := db.Exec(ctx, `DELETE FROM `+t.Table+` WHERE `+t.Owner+` = $1 AND NOT (name = ANY($2))`, owner, names)
	if err != nil {
		return fmt.Errorf("plans: prune %s: %w", t.Table, err)
	}
	return nil
}
