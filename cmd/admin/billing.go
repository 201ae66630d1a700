package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/billing/stripe"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
)

// invoicingConfig is invoicing's configuration (TOLLGATE_STRIPE_* and
// TOLLGATE_INVOICE_*). Off when no Stripe key is set.
type invoicingConfig struct {
	On     bool
	Stripe stripe.Config
	Mode   billing.InvoiceMode
	// ModeSet is true when TOLLGATE_INVOICE_MODE is set (Mode is the
	// default otherwise).
	ModeSet bool
	// PushInterval is how often serve pushes pending invoices and runs
	// dunning.
	PushInterval time.Duration
	DunningGrace time.Duration
}

// loadInvoicingConfig reads the settings; a malformed one fails naming
// it (never showing a secret's value).
func loadInvoicingConfig(getenv func(string) string) (invoicingConfig, error) {
	e := config.New(getenv)
	c := invoicingConfig{
		Stripe: stripe.Config{
			SecretKey:      strings.TrimSpace(e.String("TOLLGATE_STRIPE_SECRET_KEY", "")),
			WebhookSecret:  strings.TrimSpace(e.String("TOLLGATE_STRIPE_WEBHOOK_SECRET", "")),
			APIURL:         e.String("TOLLGATE_STRIPE_API_URL", ""),
			Tolerance:      e.Duration("TOLLGATE_STRIPE_WEBHOOK_TOLERANCE", 5*time.Minute),
			NetworkRetries: int64(e.Int("TOLLGATE_STRIPE_NETWORK_RETRIES", 2, 0)),
		},
		PushInterval: e.Duration("TOLLGATE_INVOICE_PUSH_INTERVAL", time.Minute),
		DunningGrace: e.Duration("TOLLGATE_INVOICE_DUNNING_GRACE", 0),
	}
	mode, err := billing.ParseInvoiceMode(e.String("TOLLGATE_INVOICE_MODE", string(billing.ModeDraft)))
	if err != nil {
		e.Fail("TOLLGATE_INVOICE_MODE", err.Error())
	}
	c.Mode, c.ModeSet = mode, strings.TrimSpace(getenv("TOLLGATE_INVOICE_MODE")) != ""
	if c.PushInterval <= 0 {
		e.Fail("TOLLGATE_INVOICE_PUSH_INTERVAL", "must be positive")
	}
	if c.Stripe.Tolerance <= 0 {
		e.Fail("TOLLGATE_STRIPE_WEBHOOK_TOLERANCE", "must be positive")
	}
	c.On = c.Stripe.SecretKey != ""
	if c.On {
		bad := c.Stripe.Validate()
		names := make([]string, 0, len(bad))
		for name := range bad {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			e.Fail(name, bad[name])
		}
	} else if c.Stripe.WebhookSecret != "" {
		e.Fail("TOLLGATE_STRIPE_SECRET_KEY", "is required with TOLLGATE_STRIPE_WEBHOOK_SECRET")
	}
	return c, e.Err()
}

// pushMode says in which mode this process pushes invoices, for the
// commands that push (close, invoices push): the mode is the process's
// setting, not the deployment's, and a shell without it pushes drafts
// that wait at Stripe for an operator to finalize them.
func (c invoicingConfig) pushMode() string {
	if c.ModeSet {
		return fmt.Sprintf("invoices pushed in %s mode (TOLLGATE_INVOICE_MODE)", c.Mode)
	}
	return fmt.Sprintf("invoices pushed in %s mode (TOLLGATE_INVOICE_MODE not set: the default): they wait at Stripe as drafts "+
		"for an operator to finalize there; where admin serve pushes in finalize or send mode, set the same here", c.Mode)
}

// invoicing returns invoicing on e's database as the settings say: off
// (no provider) without TOLLGATE_STRIPE_SECRET_KEY.
func (e *invocation) invoicing(log *slog.Logger) (*billing.Invoicing, invoicingConfig, error) {
	c, err := loadInvoicingConfig(e.getenv)
	if err != nil {
		return nil, c, err
	}
	cfg := billing.InvoicingConfig{Mode: c.Mode, DunningGrace: c.DunningGrace, Log: log}
	if c.On {
		cfg.Provider = stripe.New(c.Stripe)
	}
	return billing.NewInvoicing(e.db, cfg, nil), c, nil
}

// startInvoicing runs, until the returned stop is called, the loop that
// pushes pending invoices (retrying failed pushes with backoff) and runs
// dunning, and registers the reconciliation metric on reg. With
// invoicing off it says so once and runs nothing.
func startInvoicing(ctx context.Context, inv *billing.Invoicing, c invoicingConfig, log *slog.Logger, reg prometheus.Registerer) (stop func()) {
	if !inv.Enabled() {
		log.Info("invoicing off: TOLLGATE_STRIPE_SECRET_KEY is not set; closes record the invoices of linked tenants, pending, for a process with the key to push")
		return func() {}
	}
	log.Info("invoicing on", "provider", "stripe", "mode", string(c.Mode), "dunning_grace", c.DunningGrace.String())
	if reg != nil {
		gauge := func(name, help string, count func(context.Context) (int, error)) prometheus.GaugeFunc {
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				n, err := count(ctx)
				if err != nil {
					return -1
				}
				return float64(n)
			})
		}
		reg.MustRegister(
			gauge("tollgate_invoice_differences", "Statements that differ from their invoices now: pushes pending or failed, "+
				"other totals or currencies at the provider as it last reported them, voided, invoices never issued, and "+
				"(in finalize or send mode) invoices left drafts at the provider by a push in draft mode.", inv.Differences),
			gauge("tollgate_invoice_push_failed", "Invoices the provider refused for good (or whose draft was deleted there), "+
				"not retried: retarget them or bill them outside.", inv.FailedPushes))
	}
	return goUntilStopped(ctx, func(ctx context.Context) {
		tick := time.NewTicker(c.PushInterval)
		defer tick.Stop()
		for {
			if r, err := inv.Push(ctx, false); err != nil && ctx.Err() == nil {
				log.Warn("invoice push", "error", err)
			} else if r.Pushed > 0 || r.Failed > 0 {
				log.Info("invoices pushed", "pushed", r.Pushed, "failed", r.Failed, "pending", r.Pending)
			}
			if n, err := inv.Dunning(ctx); err != nil && ctx.Err() == nil {
				log.Warn("dunning", "error", err)
			} else if n > 0 {
				log.Info("dunning suspended tenants", "tenants", n)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
}

const billingLinkHelp = `
Links the tenant to a Stripe customer: --customer attaches an existing
one (this works with invoicing off, so accounts can be linked before it is
turned on); --create makes one (TOLLGATE_STRIPE_SECRET_KEY needed).
Statements closed from then on are invoiced to that customer.`

func billingLink(fs *flag.FlagSet) action {
	tenant := tenantFlag(fs, "tenant name or ID (required)")
	customer := fs.String("customer", "", "an existing Stripe customer ID (cus_…)")
	create := fs.Bool("create", false, "make a new Stripe customer for the tenant")
	email := fs.String("email", "", "the new customer's email (with --create)")
	return tenant.run(func(ctx context.Context, e *invocation, t tenants.Tenant) error {
		inv, _, err := e.invoicing(nil)
		if err != nil {
			return err
		}
		a, err := inv.LinkAccount(ctx, audit.CLI, t.ID, billing.LinkInput{CustomerID: *customer, Create: *create, Email: *email})
		if err != nil {
			return fmt.Errorf("billing link: %w", err)
		}
		return printJSON(e.stdout, a)
	})
}

func invoicesPush(fs *flag.FlagSet) action {
	all := fs.Bool("all", false, "push every pending invoice now, even those waiting out a backoff")
	return func(ctx context.Context, e *invocation) error {
		inv, c, err := e.invoicing(nil)
		if err != nil {
			return err
		}
		if !inv.Enabled() {
			return fmt.Errorf("invoices push: invoicing is off: set TOLLGATE_STRIPE_SECRET_KEY")
		}
		// On stderr: stdout is the report, as JSON.
		fmt.Fprintln(e.stderr, c.pushMode())
		r, err := inv.Push(ctx, *all)
		if err != nil {
			return fmt.Errorf("invoices push: %w", err)
		}
		return printJSON(e.stdout, r)
	}
}

const invoicesIssueHelp = `
Issues the invoices a closed month lacks: one for each statement of a
tenant that had a billing account when the month was closed and still has
one, to the customer it is linked to now. A month closed by a process
without TOLLGATE_STRIPE_SECRET_KEY, before every close issued its
invoices, lacks them (admin reconcile lists them as differences). The
invoices issued are pending: serve pushes them, or admin invoices push.
Running it again issues nothing and records nothing.`

func invoicesIssue(fs *flag.FlagSet) action {
	month := monthFlag(fs, "the closed calendar month (UTC), e.g. 2026-10 (required)")
	return func(ctx context.Context, e *invocation) error {
		return monthsInvoices(e, month, func(inv *billing.Invoicing, m usage.Month) (any, error) {
			return inv.IssueMissing(ctx, audit.CLI, m)
		})
	}
}

// monthsInvoices runs an invoice command (e.name) on the month the flag
// names with the invoicing its settings make, and prints what it returns
// as JSON; its error starts with the command's name.
func monthsInvoices[T any](e *invocation, month monthRef, do func(inv *billing.Invoicing, m usage.Month) (T, error)) error {
	m, inv, err := monthInvoicing(e, month)
	if err != nil {
		return err
	}
	res, err := do(inv, m)
	if err != nil {
		return fmt.Errorf("%s: %w", e.name, err)
	}
	return printJSON(e.stdout, res)
}

// monthInvoicing parses the month the flag names and makes the invoicing
// its settings make, for a command on one month's invoices; a bad month
// fails first.
func monthInvoicing(e *invocation, month monthRef) (usage.Month, *billing.Invoicing, error) {
	m, err := month.parse(e)
	if err != nil {
		return usage.Month{}, nil, err
	}
	inv, _, err := e.invoicing(nil)
	if err != nil {
		return usage.Month{}, nil, err
	}
	return m, inv, nil
}

const invoicesRetargetHelp = `
Makes a tenant's invoice of a month pending again, due at once, to the
Stripe customer the tenant is linked to now, with idempotency keys of its
own. For an invoice whose push failed (admin invoices list shows why):
its draft was deleted at Stripe, or Stripe refused it in a way you have
since fixed; or, to push a pending one to the tenant's new customer now
(relink the tenant with admin billing link first). serve pushes it, or
admin invoices push. A draft left at the customer before is yours to
delete at Stripe. An amount Stripe does not take cannot be pushed to
anyone: use admin invoices bill-outside.

--all-failed re-targets every failed invoice (of --month, when given)
instead, each as its own audited change; those that cannot be (a tenant
without a billing account) are listed as skipped, with why.
  admin invoices retarget --tenant acme --month 2026-10
  admin invoices retarget --all-failed --month 2026-10`

func invoicesRetarget(fs *flag.FlagSet) action {
	tenant := tenantFlag(fs, "tenant name or ID (required without --all-failed)")
	month := monthFlag(fs, "the invoice's calendar month (UTC), e.g. 2026-10 (required without --all-failed)")
	allFailed := fs.Bool("all-failed", false, "re-target every failed invoice (of --month, when given)")
	one := tenant.run(func(ctx context.Context, e *invocation, t tenants.Tenant) error {
		return monthsInvoices(e, month, func(inv *billing.Invoicing, m usage.Month) (billing.InvoiceRecord, error) {
			return inv.Retarget(ctx, audit.CLI, t.ID, m)
		})
	})
	return func(ctx context.Context, e *invocation) error {
		if !*allFailed {
			return one(ctx, e)
		}
		if *tenant.value != "" {
			return errors.New("invoices retarget: --tenant and --all-failed: give one")
		}
		var m *usage.Month
		if *month.value != "" {
			parsed, err := month.parse(e)
			if err != nil {
				return err
			}
			m = &parsed
		}
		inv, _, err := e.invoicing(nil)
		if err != nil {
			return err
		}
		res, err := inv.RetargetFailed(ctx, audit.CLI, m)
		if err != nil {
			return fmt.Errorf("invoices retarget: %w", err)
		}
		return printJSON(e.stdout, res)
	}
}

const invoicesBillOutsideHelp = `
Closes a tenant's invoice of a month out as billed outside Tollgate: it
is never pushed, and no longer counts as a difference (admin reconcile,
tollgate_invoice_differences) unless Stripe later reports it paid too.
For an invoice Stripe does not hold (pending, or failed) that you bill by
hand, such as one with an amount Stripe does not take in its currency;
--note says how (kept in the audit log).

A push whose answer was lost may have left a pending invoice at Stripe,
which charges it, so the command first asks Stripe for the invoices of
its reference at the customer, and refuses while Stripe holds one that
is not void: delete a draft there, or void an open invoice, then run it
again. Without TOLLGATE_STRIPE_SECRET_KEY, or with Stripe down, only a
failed invoice is closed out.`

func invoicesBillOutside(fs *flag.FlagSet) action {
	tenant := tenantFlag(fs, "tenant name or ID (required)")
	month := monthFlag(fs, "the invoice's calendar month (UTC), e.g. 2026-10 (required)")
	note := fs.String("note", "", "how it was billed, e.g. a reference of your accounting (at most 500 characters)")
	return tenant.run(func(ctx context.Context, e *invocation, t tenants.Tenant) error {
		return monthsInvoices(e, month, func(inv *billing.Invoicing, m usage.Month) (billing.InvoiceRecord, error) {
			return inv.BillOutside(ctx, audit.CLI, t.ID, m, *note)
		})
	})
}

func invoicesList(fs *flag.FlagSet) action {
	month := monthFlag(fs, "only this calendar month's invoices, e.g. 2026-10")
	tenant := tenantFlag(fs, "only this tenant's (name or ID)")
	return listAction(fs, "invoice records", []string{"MONTH", "TENANT", "TOTAL", "CURRENCY", "PUSH", "INVOICE", "PAYMENT"},
		func(ctx context.Context, e *invocation) ([]billing.InvoiceRecord, func(billing.InvoiceRecord) []string, error) {
			inv, _, err := e.invoicing(nil)
			if err != nil {
				return nil, nil, err
			}
			tenantID, err := optionalTenantID(ctx, e, tenant)
			if err != nil {
				return nil, nil, err
			}
			var list []billing.InvoiceRecord
			if *month.value != "" {
				m, err := month.parse(e)
				if err != nil {
					return nil, nil, err
				}
				list, err = inv.Invoices(ctx, tenantID, &m)
				if err != nil {
					return nil, nil, err
				}
			} else if list, err = inv.Invoices(ctx, tenantID, nil); err != nil {
				return nil, nil, err
			}
			return list, func(i billing.InvoiceRecord) []string {
				push := i.PushState
				if (i.PushState == billing.PushPending || i.PushState == billing.PushFailed) && i.LastError != "" {
					push += " (" + i.LastError + ")"
				}
				return []string{i.Month, i.TenantName, strconv.FormatInt(i.TotalMinor, 10), i.Currency, push,
					cmpOr(i.ProviderInvoiceID, "-"), i.PaymentStatus}
			}, nil
		})
}

func reconcile(fs *flag.FlagSet) action {
	month := monthFlag(fs, "calendar month (UTC) to reconcile, e.g. 2026-10 (required)")
	asJSON := fs.Bool("json", false, "print the reconciliation as JSON")
	return func(ctx context.Context, e *invocation) error {
		m, inv, err := monthInvoicing(e, month)
		if err != nil {
			return err
		}
		list, err := inv.Reconcile(ctx, m)
		if err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
		if *asJSON {
			return printJSON(e.stdout, list)
		}
		differ := 0
		rows := make([][]string, 0, len(list))
		for _, c := range list {
			optional := func(n *int64) string {
				if n == nil {
					return "-"
				}
				return strconv.FormatInt(*n, 10)
			}
			if len(c.Differences) > 0 {
				differ++
			}
			rows = append(rows, []string{c.TenantName, c.Currency, strconv.FormatInt(c.StatementMinor, 10),
				optional(c.LinesMinor), optional(c.ProviderMinor), cmpOr(c.PaymentStatus, "-"),
				cmpOr(strings.Join(c.Differences, "; "), "-")})
		}
		if err := printTable(e.stdout, []string{"TENANT", "CURRENCY", "STATEMENT", "LINES", "STRIPE", "PAYMENT", "DIFFERENCES"}, rows); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(e.stdout, "%s: %d statements, %d with differences\n", m, len(list), differ); err != nil {
			return err
		}
		if inv.Mode() == billing.ModeDraft {
			// Drafts at Stripe are what draft mode pushes: say so, since
			// in the deployment's mode they may be differences.
			_, err = fmt.Fprintln(e.stdout, "compared in draft mode: invoices still drafts at Stripe are differences only in finalize or send mode "+
				"(TOLLGATE_INVOICE_MODE as admin serve has it)")
		}
		return err
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

const plansBillingHelp = `
Sets a plan's billing settings; the flags not given keep their values.
--dunning-grace is how long after an invoice's payment failed dunning
suspends a tenant on the plan: default (TOLLGATE_INVOICE_DUNNING_GRACE),
off (never), or a duration such as 72h. --top-up-unit-minor is the price
of one prepaid credit unit when the plan's tenant admins buy credits
themselves (a top-up costs units × it), or none (only operators open
top-ups).
  admin plans billing --plan pro --dunning-grace 72h --top-up-unit-minor 2
  admin plans billing --plan free --dunning-grace off`

func plansBilling(fs *flag.FlagSet) action {
	plan := planFlag(fs, "")
	grace := fs.String("dunning-grace", "", "default, off, or a duration such as 72h")
	price := fs.String("top-up-unit-minor", "", "price of a credit unit for self-serve top-ups, in minor units, or none")
	return plan.run(func(ctx context.Context, e *invocation, p plans.Plan) error {
		inv, _, err := e.invoicing(nil)
		if err != nil {
			return err
		}
		cur, err := inv.PlanBilling(ctx, p.ID)
		if err != nil {
			return fmt.Errorf("plans billing: %w", err)
		}
		in := billing.PlanBillingInput{DunningGraceS: cur.DunningGraceS, TopUpUnitMinor: cur.TopUpUnitMinor}
		given := false
		var bad error
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "dunning-grace":
				given = true
				g, err := billing.ParseDunningGrace(*grace)
				if err != nil {
					bad = tollgate.Invalid(map[string]string{"dunning-grace": err.Error()})
				}
				in.DunningGraceS = g
			case "top-up-unit-minor":
				given = true
				in.TopUpUnitMinor = nil
				if *price != "none" && *price != "" {
					n, err := strconv.ParseInt(*price, 10, 64)
					if err != nil {
						bad = tollgate.Invalid(map[string]string{"top-up-unit-minor": "must be a whole number of minor units, or none"})
					}
					in.TopUpUnitMinor = &n
				}
			}
		})
		switch {
		case bad != nil:
			return fmt.Errorf("plans billing: %w", bad)
		case !given:
			return errors.New("plans billing: nothing to change: give --dunning-grace or --top-up-unit-minor (see --help)")
		}
		pb, err := inv.SetPlanBilling(ctx, audit.CLI, p.ID, in)
		if err != nil {
			return fmt.Errorf("plans billing: %w", err)
		}
		return printJSON(e.stdout, pb)
	})
}
