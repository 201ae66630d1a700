package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
)

func creditsGrant(fs *flag.FlagSet) action {
	tenant := tenantFlag(fs, "tenant name or ID (required)")
	amount := fs.Int64("amount", 0, "units (required)")
	expires := fs.String("expires", "", "when what is left expires: RFC 3339 time, or a duration from now such as 720h (default: never)")
	priority := fs.Int("priority", 0, "among grants expiring at the same time, higher is drawn first")
	cause := fs.String("cause", "top-up", "why the units are granted (the ledger keeps it)")
	key := idempotencyKeyFlag(fs, "grant")
	return tenant.run(func(ctx context.Context, e *invocation, t tenants.Tenant) error {
		in := credits.GrantInput{Amount: *amount, Priority: *priority, Cause: *cause}
		if *expires != "" {
			at, err := parseWhen(*expires, time.Now())
			if err != nil {
				return fmt.Errorf("credits grant: %w", tollgate.Invalid(map[string]string{"expires": err.Error()}))
			}
			// A duration from now is another time on every run: with a
			// key of the caller's, a rerun would be another request (a
			// 409), not the same grant answered again.
			if _, relative := time.ParseDuration(*expires); relative == nil && *key.value != "" {
				return fmt.Errorf("credits grant: %w", tollgate.Invalid(map[string]string{"expires": "must be an RFC 3339 time with --idempotency-key (a duration from now is another time on every run, so a rerun would not be the same grant): such as " +
					at.UTC().Truncate(time.Second).Format(time.RFC3339)}))
			}
			in.ExpiresAt = &at
		}
		k, err := key.get()
		if err != nil {
			return fmt.Errorf("credits grant: %w", err)
		}
		g, replayed, err := credits.NewOps(e.db, nil).GrantOnce(ctx, audit.CLI, t.ID, k, in)
		if err != nil {
			return fmt.Errorf("credits grant: %w", err)
		}
		key.noteReplay(e, replayed, "grant")
		return printJSON(e.stdout, g)
	})
}

// idempotencyKey is the --idempotency-key flag of a change to credits.
type idempotencyKey struct{ value *string }

// idempotencyKeyFlag declares --idempotency-key on fs for a change (what:
// "grant", "adjustment").
func idempotencyKeyFlag(fs *flag.FlagSet, what string) idempotencyKey {
	return idempotencyKey{fs.String("idempotency-key", "", "make the "+what+" once per tenant and key: run again with the same key and values, "+
		"it changes nothing and prints the first one (1–200 printable ASCII characters; default: a new random key)")}
}

// get returns the flag's key, or a random one when it was not given.
func (k idempotencyKey) get() (string, error) {
	if *k.value == "" {
		return "cli-" + rand.Text(), nil
	}
	if p := credits.IdempotencyKeyProblem(*k.value); p != "" {
		return "", tollgate.Invalid(map[string]string{"idempotency-key": p})
	}
	return *k.value, nil
}

// noteReplay says on stderr that the key had made the change before.
func (k idempotencyKey) noteReplay(e *invocation, replayed bool, what string) {
	if replayed {
		fmt.Fprintf(e.stderr, "admin %s: the %s was made before with idempotency key %q; nothing changed\n", e.name, what, *k.value)
	}
}

// parseWhen reads an RFC 3339 time or a duration from now, within the
// years 0000 to 9999 in UTC (tollgate.CheckTime).
func parseWhen(s string, now time.Time) (time.Time, error) {
	t := now
	if d, err := time.ParseDuration(s); err == nil {
		t = now.Add(d)
	} else if t, err = time.Parse(time.RFC3339, s); err != nil {
		return time.Time{}, fmt.Errorf("must be an RFC 3339 time or a duration such as 720h")
	}
	if !tollgate.InTimeRange(t) {
		return time.Time{}, errors.New(tollgate.TimeRangeProblem)
	}
	return t, nil
}

func creditsAdjust(fs *flag.FlagSet) action {
	tenant := tenantFlag(fs, "tenant name or ID (required)")
	units := fs.Int64("units", 0, "units to add (negative: to take) (required)")
	cause := fs.String("cause", "", "why (required)")
	key := idempotencyKeyFlag(fs, "adjustment")
	return tenant.run(func(ctx context.Context, e *invocation, t tenants.Tenant) error {
		k, err := key.get()
		if err != nil {
			return fmt.Errorf("credits adjust: %w", err)
		}
		a, replayed, err := credits.NewOps(e.db, nil).AdjustOnce(ctx, audit.CLI, t.ID, k, credits.AdjustInput{Units: *units, Cause: *cause})
		if err != nil {
			return fmt.Errorf("credits adjust: %w", err)
		}
		key.noteReplay(e, replayed, "adjustment")
		return printJSON(e.stdout, a)
	})
}

func creditsList(fs *flag.FlagSet) action {
	tenant := tenantFlag(fs, "tenant name or ID (required)")
	asJSON := fs.Bool("json", false, "print the balance and grants as a JSON object")
	return tenant.run(func(ctx context.Context, e *invocation, t tenants.Tenant) error {
		s := credits.NewStore(e.db)
		acct, err := s.Account(ctx, t.ID)
		if err != nil {
			return fmt.Errorf("credits list: %w", err)
		}
		grants, err := s.Grants(ctx, t.ID)
		if err != nil {
			return fmt.Errorf("credits list: %w", err)
		}
		if *asJSON {
			return printJSON(e.stdout, map[string]any{"tenant_id": t.ID, "balance": acct.Balance(), "grants": grants})
		}
		fmt.Fprintf(e.stdout, "balance: %d units\n\n", acct.Balance())
		return printList(e.stdout, false, grants, []string{"ID", "AMOUNT", "REMAINING", "PRIORITY", "EXPIRES", "STATUS", "CREATED", "CAUSE"}, grantRow)
	})
}

// grantRow is the table row of a grant; its status is "live" or "expired
// <when>".
func grantRow(g credits.Grant) []string {
	status := "live"
	if g.ExpiredAt != nil {
		status = "expired " + timeCell(g.ExpiredAt)
	}
	return []string{g.ID, strconv.FormatInt(g.Amount, 10), strconv.FormatInt(g.Remaining, 10), strconv.Itoa(g.Priority),
		timeCell(g.ExpiresAt), status, timeCell(&g.CreatedAt), g.Cause}
}

func creditsLedger(fs *flag.FlagSet) action {
	tenant := tenantFlag(fs, "tenant name or ID (required)")
	kind := fs.String("kind", "", "only rows of this kind: grant, consumption, expiry, refund or adjustment")
	limit := fs.Int("limit", page.DefaultLimit, "rows to print (at most 200)")
	asJSON := fs.Bool("json", false, "print the ledger rows as a JSON array")
	return tenant.run(func(ctx context.Context, e *invocation, t tenants.Tenant) error {
		p, err := credits.NewStore(e.db).Ledger(ctx, t.ID, credits.LedgerFilter{Kind: *kind}, page.First(min(*limit, page.MaxLimit)))
		if err != nil {
			return fmt.Errorf("credits ledger: %w", err)
		}
		return printList(e.stdout, *asJSON, p.Items, []string{"ID", "AT", "KIND", "UNITS", "BALANCE", "GRANT", "CAUSE"}, ledgerRow)
	})
}

// ledgerRow is the table row of a ledger entry (- for no grant).
func ledgerRow(l credits.Entry) []string {
	grant := "-"
	if l.GrantID != nil {
		grant = *l.GrantID
	}
	return []string{strconv.FormatInt(l.ID, 10), timeCell(&l.At), l.Kind, strconv.FormatInt(l.Units, 10),
		strconv.FormatInt(l.Balance, 10), grant, l.Cause}
}

func plansCredits(fs *flag.FlagSet) action {
	plan := planFlag(fs, "")
	mode := fs.String("mode", "", "deny, overage or off (required)")
	overdraft := fs.Int64("overdraft", 0, "how far below zero the balance may go (units)")
	low := fs.Int64("low-threshold", 0, "emit credits.low at or under this balance (0: never)")
	return plan.run(func(ctx context.Context, e *invocation, p plans.Plan) error {
		ps, err := credits.NewOps(e.db, nil).SetPlan(ctx, audit.CLI, p.ID,
			credits.PlanSettingsInput{Mode: credits.Mode(*mode), Overdraft: *overdraft, LowThreshold: *low})
		if err != nil {
			return fmt.Errorf("plans credits: %w", err)
		}
		return printJSON(e.stdout, ps)
	})
}

// startCreditsDrainer runs the credits drainer (every second) until the
// returned stop is called, its metrics on reg when not nil. Without Redis
// configured (single-process mode) there is nothing to drain.
func startCreditsDrainer(ctx context.Context, e *invocation, c usageConfig, log *slog.Logger, reg prometheus.Registerer) (stop func()) {
	client := c.redis()
	metrics := credits.NewMetrics()
	if reg != nil {
		reg.MustRegister(metrics.Collectors()...)
	}
	d := credits.NewDrainer(e.db, redisstore.New(client), credits.DrainerConfig{
		Prefix: c.KeyPrefix, Log: log, Metrics: metrics,
		// With regions, it drains its region's logs and keeps its
		// escrow (docs/regions.md, "Money").
		Region: c.Region.Name, Regions: len(c.Region.Names),
	})
	stopDrainer := goUntilStopped(ctx, func(ctx context.Context) { d.Run(ctx, time.Second) })
	return func() { stopDrainer(); client.Close() }
}
