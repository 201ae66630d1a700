package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
)

// InvoicingConfig configures invoicing.
type InvoicingConfig struct {
	// Provider is the payment provider; nil turns pushing off: a close
	// still records each linked tenant's invoice, pending, for a process
	// with a provider to push (admin serve, admin invoices push), and the
	// changes that need the provider are ECONFLICT.
	Provider Provider
	// Mode is how far pushed invoices go (ModeDraft when "").
	Mode InvoiceMode
	// DunningGrace, when positive, suspends a tenant whose invoice's
	// payment failed this long ago and is still not paid; its payment
	// resumes the tenant. It is the default of every plan: a plan's own
	// grace (PlanBilling) replaces it, 0 there turning dunning off.
	DunningGrace time.Duration
	Log          *slog.Logger
}

// Invoicing turns closed statements into invoices at the payment
// provider, exactly once, and applies what the provider says back
// (payments, failures, voids, paid top-ups), each event once. Its changes
// that an operator makes (linking a billing account, opening a top-up,
// issuing, re-targeting or closing out an invoice) are audited as every
// feature's are; the payments, failures, voids, finalized drafts and
// deleted drafts the provider's events report are audited by the actor
// ProviderActor. What a push records of the provider's view of an invoice
// (its ID, status and total, a refusal) is not audited. Safe for
// concurrent use.
type Invoicing struct {
	db  postgres.Conn
	cfg InvoicingConfig
	now func() time.Time
}

// NewInvoicing returns invoicing on db (a pool); now is the clock (nil:
// time.Now).
func NewInvoicing(db postgres.Conn, cfg InvoicingConfig, now func() time.Time) *Invoicing {
	if now == nil {
		now = time.Now
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeDraft
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Invoicing{db: db, cfg: cfg, now: now}
}

// Enabled reports whether a provider is configured, so that invoices can
// be pushed and customers and checkouts made. A nil Invoicing is off.
func (inv *Invoicing) Enabled() bool { return inv != nil && inv.cfg.Provider != nil }

// Provider is the payment provider (nil with invoicing off).
func (inv *Invoicing) Provider() Provider {
	if inv == nil {
		return nil
	}
	return inv.cfg.Provider
}

// Mode is the invoice mode pushes use.
func (inv *Invoicing) Mode() InvoiceMode { return inv.cfg.Mode }

// ProviderActor is who the provider's events change things as, in the
// audit log.
var ProviderActor = audit.Actor{Name: "stripe", Operator: true}

// DunningActor is who suspends a tenant whose invoice is not paid.
var DunningActor = audit.Actor{Name: "dunning", Operator: true}

func (inv *Invoicing) off() error {
	return tollgate.Errorf(tollgate.ECONFLICT, "invoicing is off: set TOLLGATE_STRIPE_SECRET_KEY to turn it on")
}

// Account is a tenant's billing account: the provider's customer it is
// invoiced as.
type Account struct {
	TenantID   string    `json:"tenant_id"`
	Provider   string    `json:"provider"`
	CustomerID string    `json:"customer_id"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// LinkInput is the body of PUT /tenants/{tenantID}/billing/account:
// attach an existing customer (CustomerID, "cus_…"), or make one
// (Create, with an optional Email for the provider's receipts).
type LinkInput struct {
	CustomerID string `json:"customer_id"`
	Create     bool   `json:"create"`
	Email      string `json:"email"`
}

var customerIDForm = regexp.MustCompile(`^cus_[A-Za-z0-9]{1,250}$`)

func (in *LinkInput) validate() error {
	f := map[string]string{}
	in.CustomerID, in.Email = strings.TrimSpace(in.CustomerID), strings.TrimSpace(in.Email)
	switch {
	case in.Create && in.CustomerID != "":
		f["customer_id"] = "must be empty when create is true"
	case !in.Create && !customerIDForm.MatchString(in.CustomerID):
		f["customer_id"] = "must be a customer ID such as cus_123 (or set create to make one)"
	}
	if in.Email != "" && (!strings.Contains(in.Email, "@") || len(in.Email) > 254) {
		f["email"] = "must be an email address"
	}
	return tollgate.Invalid(f)
}

func accountAudit(action string, before, after *Account) audit.Change {
	a := audit.Subject(before, after)
	return audit.Change{Action: action, TargetType: "tenant", TargetID: a.TenantID, TenantID: a.TenantID,
		Before: before, After: after}
}

// LinkAccount links tenant tenantID to a customer of the provider
// (billing_account.link), replacing any link it had: the customer
// in.CustomerID names, or one made for it (in.Create, which needs the
// provider). Linking an existing customer works with invoicing off, so
// that accounts can be linked before it is turned on. ENOTFOUND for an
// unknown tenant; ECONFLICT for a customer linked to another tenant or
// named by another tenant's invoice still to push, and for moving a
// tenant off its customer while one of its invoices is still to push to
// that customer (relinkConflict). An invoice whose push failed for good
// holds nothing: it goes to the customer linked when it is re-targeted
// (Retarget). One still pending whose push the provider refused for not
// having its customer is re-targeted to the customer linked, in the
// link's transaction, each audited on its own (invoice.retarget), so that
// no retry bills the customer the tenant left (retargetRefused).
func (inv *Invoicing) LinkAccount(ctx context.Context, by audit.Actor, tenantID string, in LinkInput) (Account, error) {
	if err := in.validate(); err != nil {
		return Account{}, err
	}
	t, err := tenants.NewStore(inv.db).Get(ctx, tenantID)
	if err != nil {
		return Account{}, err
	}
	if in.Create {
		// Refused before a customer is made for nothing; the check in
		// the transaction below is the one that counts.
		replacing := ""
		if cur, err := accountOf(ctx, inv.db, tenantID); err == nil {
			if err := inv.relinkConflict(ctx, inv.db, cur); err != nil {
				return Account{}, err
			}
			replacing = cur.CustomerID
		}
		if !inv.Enabled() {
			return Account{}, inv.off()
		}
		id, err := inv.cfg.Provider.CreateCustomer(ctx, CustomerInput{TenantID: t.ID, TenantName: t.Name, Email: in.Email,
			Replacing: replacing})
		if err != nil {
			return Account{}, tollgate.Errorf(tollgate.EUNAVAILABLE, "the payment provider did not make the customer: %v", err)
		}
		in.CustomerID = id
	}
	get := func(tx pgx.Tx) (Account, error) {
		if _, err := tenants.NewStore(tx).Get(ctx, tenantID); err != nil {
			return Account{}, err
		}
		// Locked, so that a close issuing an invoice to the current
		// customer either commits before the checks below (and they see
		// the invoice) or waits and issues it to the new customer.
		a, err := lockedAccount(ctx, tx, tenantID, "FOR UPDATE")
		if tollgate.ErrorCode(err) == tollgate.ENOTFOUND {
			return Account{TenantID: tenantID}, nil
		}
		return a, err
	}
	var linked Account
	err = postgres.Tx(ctx, inv.db, func(tx pgx.Tx) error {
		if err := leaseRefused(ctx, tx, tenantID); err != nil {
			return err
		}
		a, err := inv.link(ctx, tx, by, tenantID, in, get)
		if err != nil {
			return err
		}
		if err := inv.retargetRefused(ctx, tx, by, a); err != nil {
			return err
		}
		linked = a
		return nil
	})
	return linked, err
}

// link records tenantID's link to in.CustomerID on tx
// (billing_account.link), get reading the account it replaces.
func (inv *Invoicing) link(ctx context.Context, tx pgx.Tx, by audit.Actor, tenantID string, in LinkInput,
	get func(tx pgx.Tx) (Account, error)) (Account, error) {
	return audit.Update(ctx, tx, by, "billing_account.link", accountAudit, get, func(tx pgx.Tx, cur Account) (Account, error) {
		if cur.CustomerID != "" && cur.CustomerID != in.CustomerID {
			if err := inv.relinkConflict(ctx, tx, cur); err != nil {
				return Account{}, err
			}
		}
		var pending int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM invoices WHERE customer_id = $1 AND tenant_id <> $2
			AND push_state = 'pending'`, in.CustomerID, tenantID).Scan(&pending); err != nil {
			return Account{}, fmt.Errorf("billing: link account: %w", err)
		}
		if pending > 0 {
			// Linked to another tenant once, and still to be invoiced
			// for it: a push of that invoice would bill this tenant's
			// customer.
			return Account{}, tollgate.Errorf(tollgate.ECONFLICT,
				"customer %s has %d invoice(s) of another tenant still to push: push them before linking it here", in.CustomerID, pending)
		}
		var a Account
		// created_at is the clock's, as a close's closed_at is: whether
		// the tenant was linked at a close compares the two (Reconcile).
		err := tx.QueryRow(ctx, `INSERT INTO billing_accounts (tenant_id, customer_id, created_at, updated_at) VALUES ($1, $2, $3, $3)
			ON CONFLICT (tenant_id) DO UPDATE SET customer_id = excluded.customer_id, updated_at = excluded.updated_at
			RETURNING tenant_id::text, provider, customer_id, created_at, updated_at`, tenantID, in.CustomerID, inv.now()).
			Scan(&a.TenantID, &a.Provider, &a.CustomerID, &a.CreatedAt, &a.UpdatedAt)
		if postgres.Is(err, postgres.UniqueViolation) {
			return a, tollgate.Errorf(tollgate.ECONFLICT, "customer %s is linked to another tenant", in.CustomerID)
		}
		if err != nil {
			return a, fmt.Errorf("billing: link account: %w", err)
		}
		return a, nil
	})
}

// noSuchCustomer starts the last error of a push the provider refused
// for not having the invoice's customer.
const noSuchCustomer = "no such customer at the payment provider: "

// leaseRefused takes, on tx, the push lease (pushLock) of each invoice of
// tenantID still pending whose push the provider refused for not having
// its customer, waiting for a push or change in flight to record its
// result, in the order of their refs. A link takes them before the
// account's row lock, as a push and Retarget take a lease before any row
// lock, so that the retargets after the link (retargetRefused) never wait
// for a lease while holding the account.
func leaseRefused(ctx context.Context, tx pgx.Tx, tenantID string) error {
	rows, err := tx.Query(ctx, `SELECT ref FROM invoices WHERE tenant_id = $1 AND push_state = 'pending'
		AND starts_with(last_error, $2) ORDER BY ref`, tenantID, noSuchCustomer)
	refs, err := postgres.Collect(rows, err, func(r pgx.Row) (string, error) {
		var ref string
		return ref, r.Scan(&ref)
	}, "billing: link account")
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, pushLock, ref); err != nil {
			return fmt.Errorf("billing: link account: %w", err)
		}
	}
	return nil
}

// retargetRefused re-targets, on tx and as Retarget does
// (invoice.retarget, each audited on its own), every invoice of a's
// tenant still pending to a customer other than a's whose push the
// provider refused for not having that customer: relinkConflict lets the
// tenant leave that customer, and the invoice's next push would bill it
// all the same once the provider has it (a key of the right mode put
// back). Its lease is held already (leaseRefused) unless the provider's
// refusal came since; one whose lease another process holds now is
// ECONFLICT, to try again, rather than waited for under the account's
// lock.
func (inv *Invoicing) retargetRefused(ctx context.Context, tx pgx.Tx, by audit.Actor, a Account) error {
	rows, err := tx.Query(ctx, `SELECT ref, to_char(month, 'YYYY-MM') FROM invoices WHERE tenant_id = $1 AND push_state = 'pending'
		AND starts_with(last_error, $2) AND customer_id <> $3 ORDER BY ref`, a.TenantID, noSuchCustomer, a.CustomerID)
	type refused struct{ ref, month string }
	list, err := postgres.Collect(rows, err, func(r pgx.Row) (refused, error) {
		var f refused
		return f, r.Scan(&f.ref, &f.month)
	}, "billing: link account")
	if err != nil {
		return err
	}
	for _, f := range list {
		var free bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1, hashtext($2))`, pushLock, f.ref).Scan(&free); err != nil {
			return fmt.Errorf("billing: link account: %w", err)
		}
		if !free {
			return tollgate.Errorf(tollgate.ECONFLICT, "the tenant's invoice %s is being pushed now: link again in a moment", f.ref)
		}
		m, err := usage.ParseMonth(f.month)
		if err != nil {
			return err
		}
		if _, err := inv.retarget(ctx, tx, by, a.TenantID, m); err != nil {
			return fmt.Errorf("billing: re-target invoice %s to customer %s: %w", f.ref, a.CustomerID, err)
		}
	}
	return nil
}

// relinkConflict returns ECONFLICT when tenant a.TenantID may not leave
// its customer a.CustomerID yet: while an invoice of it is still to push
// to that customer. The invoice's record names the customer it was
// issued to, and its push, retried until it succeeds or is refused for
// good, would bill that customer whoever it belongs to by then. A failed
// push is not retried, so it does not count; nor does a pending one whose
// last push the provider refused for not having the customer (a mistyped
// ID, or a key of another account or mode), so that the tenant can be
// relinked: the link re-targets it to the new customer in its
// transaction (retargetRefused). Another tenant cannot be linked to that
// customer while the invoice is pending (LinkAccount).
func (inv *Invoicing) relinkConflict(ctx context.Context, db postgres.Conn, a Account) error {
	var pending int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM invoices WHERE tenant_id = $1 AND customer_id = $2 AND push_state = 'pending'
		AND NOT starts_with(last_error, $3)`,
		a.TenantID, a.CustomerID, noSuchCustomer).Scan(&pending); err != nil {
		return fmt.Errorf("billing: link account: %w", err)
	}
	if pending > 0 {
		return tollgate.Errorf(tollgate.ECONFLICT,
			"the tenant has %d invoice(s) still to push to customer %s: push them (admin invoices push) before linking another customer",
			pending, a.CustomerID)
	}
	return nil
}

// Account returns tenant tenantID's billing account; ENOTFOUND when it
// has none.
func (inv *Invoicing) Account(ctx context.Context, tenantID string) (Account, error) {
	if !postgres.IsUUID(tenantID) {
		return Account{}, tollgate.Errorf(tollgate.ENOTFOUND, "no billing account")
	}
	return accountOf(ctx, inv.db, tenantID)
}

func accountOf(ctx context.Context, db postgres.Conn, tenantID string) (Account, error) {
	return lockedAccount(ctx, db, tenantID, "")
}

// lockedAccount is accountOf with the row lock lock ("FOR SHARE", "FOR
// UPDATE", or "" for none), held until db's transaction ends.
func lockedAccount(ctx context.Context, db postgres.Conn, tenantID, lock string) (Account, error) {
	var a Account
	err := db.QueryRow(ctx, `SELECT tenant_id::text, provider, customer_id, created_at, updated_at
		FROM billing_accounts WHERE tenant_id = $1 `+lock, tenantID).
		Scan(&a.TenantID, &a.Provider, &a.CustomerID, &a.CreatedAt, &a.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, tollgate.Errorf(tollgate.ENOTFOUND, "tenant has no billing account")
	}
	if err != nil {
		return a, fmt.Errorf("billing: account: %w", err)
	}
	return a, nil
}

// issueInvoice records the invoice of st, a closed statement stored on
// tx, when its tenant has a billing account: pending, due at now, to be
// pushed by any process with a provider once tx commits. It reports
// whether it recorded one (false for a tenant without an account, or a
// statement invoiced already). The lines' sum must be the statement's
// total, or it fails. Whether the process has a provider does not
// matter: the invoice is the statement's, and only its push needs one.
func issueInvoice(ctx context.Context, tx pgx.Tx, st Statement, now time.Time) (bool, error) {
	// Shared, so that a relink waits for the close and then sees the
	// invoice issued to the customer read here (LinkAccount).
	a, err := lockedAccount(ctx, tx, st.TenantID, "FOR SHARE")
	if tollgate.ErrorCode(err) == tollgate.ENOTFOUND {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	lines := InvoiceLines(st)
	sum, err := sumLines(lines)
	if err != nil {
		return false, err
	}
	if sum != st.TotalMinor {
		return false, fmt.Errorf("billing: invoice of %s %s: lines sum to %d, the statement to %d", st.TenantName, st.Month, sum, st.TotalMinor)
	}
	body, err := json.Marshal(lines)
	if err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO invoices (tenant_id, month, ref, customer_id, currency, total_minor, lines, next_push_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`,
		st.TenantID, st.PeriodStart, InvoiceRef(st.TenantID, st.Month), a.CustomerID, st.Currency, st.TotalMinor, body, now)
	if err != nil {
		return false, fmt.Errorf("billing: issue invoice of %s: %w", st.TenantName, err)
	}
	return tag.RowsAffected() == 1, nil
}

// IssueResult says what IssueMissing did.
type IssueResult struct {
	Month string `json:"month"`
	// Issued names the invoices issued (their refs), by tenant name.
	Issued []string `json:"issued"`
}

// errNothingToIssue ends the transaction of an IssueMissing that finds
// every invoice issued: nothing changed, so nothing is recorded.
var errNothingToIssue = errors.New("billing: no invoice to issue")

// IssueMissing issues the invoices closed month m lacks (invoice.issue,
// one audit entry for the month): one for each stored statement whose
// tenant had a billing account when the month was closed and still has
// one, and has no invoice, to the customer it is linked to now; pending,
// pushed as any other. Months closed before every close issued its
// invoices (a close run where pushing was off) lack them. Running it
// again issues nothing and records nothing. ECONFLICT for a month that is
// not closed.
func (inv *Invoicing) IssueMissing(ctx context.Context, by audit.Actor, m usage.Month) (IssueResult, error) {
	res := IssueResult{Month: m.String(), Issued: []string{}}
	err := audit.Apply(ctx, inv.db, by, func(tx pgx.Tx) (audit.Change, error) {
		at, err := usage.ClosedAt(ctx, tx, m)
		if err != nil {
			return audit.Change{}, err
		}
		if at == nil {
			return audit.Change{}, tollgate.Errorf(tollgate.ECONFLICT, "month %s is not closed: its invoices are issued when it is (admin close)", m)
		}
		rows, err := tx.Query(ctx, `SELECT s.body FROM statements s JOIN billing_accounts a ON a.tenant_id = s.tenant_id
			WHERE s.month = $1 AND a.created_at <= s.closed_at
			AND NOT EXISTS (SELECT 1 FROM invoices i WHERE i.tenant_id = s.tenant_id AND i.month = s.month)
			ORDER BY s.body->>'tenant_name'`, m.Start())
		sts, err := postgres.Collect(rows, err, func(r pgx.Row) (Statement, error) {
			var body []byte
			var st Statement
			if err := r.Scan(&body); err != nil {
				return st, err
			}
			return st, json.Unmarshal(body, &st)
		}, "billing: statements without invoices")
		if err != nil {
			return audit.Change{}, err
		}
		now := inv.now()
		for _, st := range sts {
			issued, err := issueInvoice(ctx, tx, st, now)
			if err != nil {
				return audit.Change{}, err
			}
			if issued {
				res.Issued = append(res.Issued, InvoiceRef(st.TenantID, st.Month))
			}
		}
		if len(res.Issued) == 0 {
			return audit.Change{}, errNothingToIssue
		}
		return audit.Change{Action: "invoice.issue", TargetType: "month", TargetID: res.Month,
			After: map[string]any{"issued": res.Issued}}, nil
	})
	if errors.Is(err, errNothingToIssue) {
		err = nil
	}
	return res, err
}

// InvoiceRecord is our record of a statement's invoice.
type InvoiceRecord struct {
	TenantID   string `json:"tenant_id"`
	TenantName string `json:"tenant_name"`
	Month      string `json:"month"`
	Ref        string `json:"ref"`
	CustomerID string `json:"customer_id"`
	Currency   string `json:"currency"`
	// TotalMinor is the statement's total; Lines what is sent.
	TotalMinor int64         `json:"total_minor"`
	Lines      []InvoiceLine `json:"lines"`
	// PushState is pending until the provider holds the invoice, then
	// pushed; failed when the provider refused its amount (LastError
	// says why) or its draft was deleted there, and billed_outside once
	// an operator closed it out as billed by other means: neither is
	// pushed again. PushAttempts, NextPushAt and LastError say how
	// pushing went.
	PushState    string     `json:"push_state"`
	PushAttempts int        `json:"push_attempts"`
	NextPushAt   time.Time  `json:"next_push_at"`
	LastError    string     `json:"last_error,omitempty"`
	PushedAt     *time.Time `json:"pushed_at,omitempty"`
	// The provider's view: its invoice ID, status and total.
	ProviderInvoiceID  string `json:"provider_invoice_id,omitempty"`
	ProviderStatus     string `json:"provider_status,omitempty"`
	ProviderTotalMinor *int64 `json:"provider_total_minor,omitempty"`
	ProviderCurrency   string `json:"provider_currency,omitempty"`
	// PaymentStatus is unpaid, paid, failed or void.
	PaymentStatus      string     `json:"payment_status"`
	PaidAt             *time.Time `json:"paid_at,omitempty"`
	PaymentFailedAt    *time.Time `json:"payment_failed_at,omitempty"`
	DunningSuspendedAt *time.Time `json:"dunning_suspended_at,omitempty"`
	// Generation counts the times the invoice was re-targeted (Invoice).
	Generation int `json:"-"`
}

// The push states of an invoice (InvoiceRecord.PushState).
const (
	PushPending       = "pending"
	PushPushed        = "pushed"
	PushFailed        = "failed"
	PushBilledOutside = "billed_outside"
)

const invoiceColumns = `i.tenant_id::text, coalesce(t.name, ''), to_char(i.month, 'YYYY-MM'), i.ref, i.customer_id, i.currency,
	i.total_minor, i.lines, i.push_state, i.push_attempts, i.next_push_at, i.last_error, i.pushed_at,
	coalesce(i.provider_invoice_id, ''), i.provider_status, i.provider_total_minor, i.provider_currency,
	i.payment_status, i.paid_at, i.payment_failed_at, i.dunning_suspended_at, i.push_generation`

func scanInvoice(r pgx.Row) (InvoiceRecord, error) {
	var v InvoiceRecord
	var lines []byte
	err := r.Scan(&v.TenantID, &v.TenantName, &v.Month, &v.Ref, &v.CustomerID, &v.Currency, &v.TotalMinor, &lines,
		&v.PushState, &v.PushAttempts, &v.NextPushAt, &v.LastError, &v.PushedAt, &v.ProviderInvoiceID,
		&v.ProviderStatus, &v.ProviderTotalMinor, &v.ProviderCurrency, &v.PaymentStatus, &v.PaidAt,
		&v.PaymentFailedAt, &v.DunningSuspendedAt, &v.Generation)
	if err == nil {
		err = json.Unmarshal(lines, &v.Lines)
	}
	return v, err
}

// Invoices returns the invoices of a tenant (tenantID, or every tenant's
// when ""), and of a month (m, or every month when nil), newest month
// first, then by tenant name.
func (inv *Invoicing) Invoices(ctx context.Context, tenantID string, m *usage.Month) ([]InvoiceRecord, error) {
	if tenantID != "" && !postgres.IsUUID(tenantID) {
		return []InvoiceRecord{}, nil
	}
	var month *time.Time
	if m != nil {
		s := m.Start()
		month = &s
	}
	rows, err := inv.db.Query(ctx, `SELECT `+invoiceColumns+` FROM invoices i LEFT JOIN tenants t ON t.id = i.tenant_id
		WHERE ($1 = '' OR i.tenant_id::text = $1) AND ($2::date IS NULL OR i.month = $2)
		ORDER BY i.month DESC, t.name`, tenantID, month)
	list, err := postgres.Collect(rows, err, scanInvoice, "billing: invoices")
	if list == nil {
		list = []InvoiceRecord{}
	}
	return list, err
}

// PushReport says what a push did.
type PushReport struct {
	Pushed int `json:"pushed"`
	// Failed counts the pushes that failed: Refused of them failed for
	// good (push state failed), the others stay pending and are retried.
	Failed  int `json:"failed"`
	Refused int `json:"refused"`
	// Pending counts the invoices still to push after it.
	Pending int `json:"pending"`
}

// pushLock is the first key of the advisory locks that keep two
// processes from pushing one invoice at once, the second being a hash of
// the invoice's ref. A push holds its invoice's lock in a transaction
// open for as long as it speaks to the provider: the lock is the push's
// lease, apart from next_push_at, which is only the backoff, so that
// pushing everything at once (Push with all) can skip the one and not the
// other. A process that dies mid-push drops its connection and with it
// the lock; its invoice is pushed again at the next try, which pushing's
// idempotency makes harmless.
const pushLock int32 = 7_274_004

// pushBackoff is how long to wait after a failed push: 30 s doubling per
// attempt, at most an hour.
func pushBackoff(attempts int) time.Duration {
	d := 30 * time.Second
	for i := 1; i < attempts && d < time.Hour; i++ {
		d *= 2
	}
	return min(d, time.Hour)
}

// Push sends the pending invoices that are due to the provider, one at a
// time, and records each result: pushed; failed, with the error, when the
// provider refused it for good (ErrRefused, ErrAmountNotAccepted: trying
// again cannot change the answer); or pending again after a backoff with
// the error. With all it sends those waiting out a backoff too, but never
// one that another process is pushing now. Pushing is idempotent at the
// provider (keys derived from the statement), so an invoice pushed again
// after a crash between the provider's answer and our commit is made
// once.
func (inv *Invoicing) Push(ctx context.Context, all bool) (PushReport, error) {
	var r PushReport
	if !inv.Enabled() {
		return r, nil
	}
	done := []string{}
	for {
		rec, lease, ok, err := inv.claim(ctx, all, done)
		if err != nil {
			return r, err
		}
		if !ok {
			break
		}
		done = append(done, rec.Ref)
		err = inv.pushOne(ctx, lease, rec)
		if cerr := lease.Commit(ctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("billing: record invoice push: %w", cerr))
		}
		if err != nil {
			if ctx.Err() != nil {
				return r, ctx.Err()
			}
			r.Failed++
			if refusedForGood(err) {
				r.Refused++
				inv.cfg.Log.Error("invoice refused by the payment provider; not retried: relink and retarget it, or bill it outside",
					"tenant_id", rec.TenantID, "month", rec.Month, "customer", rec.CustomerID, "error", err)
				continue
			}
			inv.cfg.Log.Warn("invoice push failed; retrying later", "tenant_id", rec.TenantID, "month", rec.Month,
				"attempts", rec.PushAttempts+1, "error", err)
			continue
		}
		r.Pushed++
	}
	err := inv.db.QueryRow(ctx, `SELECT count(*) FROM invoices WHERE push_state = 'pending'`).Scan(&r.Pending)
	return r, err
}

// claim returns the next pending invoice that is due (with all, any
// one), not in done (the invoices this push has tried already), and not
// being pushed by another process, with the transaction that holds its
// lease (pushLock); the caller records the push in it and commits.
func (inv *Invoicing) claim(ctx context.Context, all bool, done []string) (InvoiceRecord, pgx.Tx, bool, error) {
	tx, err := inv.db.Begin(ctx)
	if err != nil {
		return InvoiceRecord{}, nil, false, fmt.Errorf("billing: claim invoice: %w", err)
	}
	rec, ok, err := inv.lease(ctx, tx, all, done)
	if !ok {
		tx.Rollback(ctx) //nolint:errcheck // nothing written; ending it frees any lock taken
		return rec, nil, false, err
	}
	return rec, tx, true, nil
}

// lease takes, in tx, the lock of the first invoice claim may push that
// no other process holds, and returns the invoice.
func (inv *Invoicing) lease(ctx context.Context, tx pgx.Tx, all bool, done []string) (InvoiceRecord, bool, error) {
	now := inv.now()
	// Each other process holds one lease at most, so the first hundred
	// hold a free one unless a hundred processes are pushing.
	rows, err := tx.Query(ctx, `SELECT ref FROM invoices
		WHERE push_state = 'pending' AND (next_push_at <= $1 OR $2) AND NOT (ref = ANY($3))
		ORDER BY next_push_at, ref LIMIT 100`, now, all, done)
	refs, err := postgres.Collect(rows, err, func(r pgx.Row) (string, error) {
		var ref string
		return ref, r.Scan(&ref)
	}, "billing: claim invoice")
	if err != nil {
		return InvoiceRecord{}, false, err
	}
	for _, ref := range refs {
		var free bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1, hashtext($2))`, pushLock, ref).Scan(&free); err != nil {
			return InvoiceRecord{}, false, fmt.Errorf("billing: claim invoice: %w", err)
		}
		if !free {
			continue
		}
		// Read again under the lock: a push that held it before may have
		// recorded the invoice pushed, or failed and set a backoff, since
		// the list was read.
		rec, err := scanInvoice(tx.QueryRow(ctx, `SELECT `+invoiceColumns+` FROM invoices i LEFT JOIN tenants t ON t.id = i.tenant_id
			WHERE i.ref = $1 AND i.push_state = 'pending' AND (i.next_push_at <= $2 OR $3)`, ref, now, all))
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return InvoiceRecord{}, false, fmt.Errorf("billing: claim invoice: %w", err)
		}
		return rec, true, nil
	}
	return InvoiceRecord{}, false, nil
}

// pushOne pushes rec, whose lease tx holds, and records the result in
// tx. Both records apply only to an invoice still pending: what another
// pusher recorded stands. A pushed invoice keeps the provider's view that
// an event recorded before it (a payment, say, seen while the push was
// finishing), since the event is the later word. An invoice the provider
// refused for good is failed: a retry would be refused again, and only an
// operator can change what was refused (Retarget, BillOutside).
func (inv *Invoicing) pushOne(ctx context.Context, tx pgx.Tx, rec InvoiceRecord) error {
	got, err := inv.cfg.Provider.PushInvoice(ctx, Invoice{Ref: rec.Ref, TenantID: rec.TenantID, TenantName: rec.TenantName,
		Month: rec.Month, CustomerID: rec.CustomerID, Currency: rec.Currency, TotalMinor: rec.TotalMinor,
		Lines: rec.Lines, Mode: inv.cfg.Mode, Generation: rec.Generation})
	now := inv.now()
	if err != nil {
		msg := err.Error()
		if errors.Is(err, ErrNoSuchCustomer) {
			// Marked, so that the tenant may be relinked meanwhile
			// (relinkConflict).
			msg = noSuchCustomer + msg
		}
		if len(msg) > 500 {
			msg = msg[:500]
		}
		state := PushPending
		if refusedForGood(err) {
			state = PushFailed
		}
		_, uerr := tx.Exec(ctx, `UPDATE invoices SET push_state = $5, push_attempts = push_attempts + 1, next_push_at = $3,
			last_error = $4, updated_at = now() WHERE tenant_id = $1 AND month = $2::date AND push_state = 'pending'`,
			rec.TenantID, rec.Month+"-01", now.Add(pushBackoff(rec.PushAttempts+1)), msg, state)
		return errors.Join(err, uerr)
	}
	_, err = tx.Exec(ctx, `UPDATE invoices SET push_state = 'pushed', push_attempts = push_attempts + 1, pushed_at = $3,
		last_error = '', provider_invoice_id = coalesce(provider_invoice_id, $4),
		provider_status = CASE WHEN payment_status = 'unpaid' THEN $5 ELSE provider_status END,
		provider_total_minor = CASE WHEN payment_status = 'unpaid' THEN $6 ELSE provider_total_minor END,
		provider_currency = CASE WHEN payment_status = 'unpaid' THEN $7 ELSE provider_currency END,
		updated_at = now() WHERE tenant_id = $1 AND month = $2::date AND push_state = 'pending'`,
		rec.TenantID, rec.Month+"-01", now, got.ID, got.Status, got.TotalMinor, strings.ToUpper(got.Currency))
	if err != nil {
		return fmt.Errorf("billing: record pushed invoice: %w", err)
	}
	return nil
}

// invoiceChange is what the audit entry of an operator's change to an
// invoice holds.
type invoiceChange struct {
	Ref        string `json:"ref"`
	CustomerID string `json:"customer_id"`
	PushState  string `json:"push_state"`
	LastError  string `json:"last_error,omitempty"`
	Note       string `json:"note,omitempty"`
}

func invoiceAudit(action string, before, after *InvoiceRecord, note string) audit.Change {
	of := func(r *InvoiceRecord) *invoiceChange {
		if r == nil {
			return nil
		}
		return &invoiceChange{Ref: r.Ref, CustomerID: r.CustomerID, PushState: r.PushState, LastError: r.LastError}
	}
	b, a := of(before), of(after)
	if a != nil {
		a.Note = note
	}
	r := audit.Subject(before, after)
	return audit.Change{Action: action, TargetType: "invoice", TargetID: r.Ref, TenantID: r.TenantID, Before: b, After: a}
}

// changeUnpushed makes the audited change action to tenantID's invoice of
// month m, an invoice the provider does not hold: pending, or failed (or,
// with voided, one the provider voided, whatever its push state). It
// takes the invoice's push lease first (pushLock), waiting for a push in
// flight to record its result, so that the change never races one, and
// holds it while set runs. set changes the invoice on tx; the result is
// the invoice after it. ENOTFOUND for no such invoice; ECONFLICT for one
// pushed, paid or closed out already.
func (inv *Invoicing) changeUnpushed(ctx context.Context, by audit.Actor, action, tenantID string, m usage.Month, note string,
	voided bool, set func(tx pgx.Tx, rec InvoiceRecord) error) (InvoiceRecord, error) {
	return inv.changeUnpushedOn(ctx, inv.db, by, action, tenantID, m, note, voided, set)
}

// errUnchanged ends the transaction of a change to an invoice that finds
// nothing to change: nothing is recorded, and the invoice is returned as
// it is.
var errUnchanged = errors.New("billing: nothing to change")

// changeUnpushedOn is changeUnpushed on db, a pool or a transaction (the
// change is then made in a savepoint of it). set returning errUnchanged
// changes and records nothing, and returns the invoice as it is.
func (inv *Invoicing) changeUnpushedOn(ctx context.Context, db postgres.Conn, by audit.Actor, action, tenantID string, m usage.Month,
	note string, voided bool, set func(tx pgx.Tx, rec InvoiceRecord) error) (InvoiceRecord, error) {
	var before, after InvoiceRecord
	tenantID = strings.ToLower(tenantID) // as the ref the pushes lock is spelled
	err := audit.Apply(ctx, db, by, func(tx pgx.Tx) (audit.Change, error) {
		if !postgres.IsUUID(tenantID) {
			return audit.Change{}, tollgate.Errorf(tollgate.ENOTFOUND, "no invoice of that tenant for %s", m)
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, pushLock, InvoiceRef(tenantID, m.String())); err != nil {
			return audit.Change{}, fmt.Errorf("billing: %s: %w", action, err)
		}
		var err error
		if before, err = invoiceOfMonth(ctx, tx, tenantID, m, "FOR UPDATE OF i"); err != nil {
			return audit.Change{}, err
		}
		if err := unpushedConflict(before, voided); err != nil {
			return audit.Change{}, err
		}
		if err := set(tx, before); err != nil {
			return audit.Change{}, err
		}
		if after, err = invoiceOfMonth(ctx, tx, tenantID, m, "FOR UPDATE OF i"); err != nil {
			return audit.Change{}, err
		}
		return invoiceAudit(action, &before, &after, note), nil
	})
	if errors.Is(err, errUnchanged) {
		return before, nil
	}
	return after, err
}

// invoiceOfMonth reads tenant tenantID's invoice of month m on db, with
// the row lock lock ("FOR UPDATE OF i", or "" for none). ENOTFOUND for no
// such invoice.
func invoiceOfMonth(ctx context.Context, db postgres.Conn, tenantID string, m usage.Month, lock string) (InvoiceRecord, error) {
	if !postgres.IsUUID(tenantID) {
		return InvoiceRecord{}, tollgate.Errorf(tollgate.ENOTFOUND, "no invoice of that tenant for %s", m)
	}
	rec, err := scanInvoice(db.QueryRow(ctx, `SELECT `+invoiceColumns+` FROM invoices i LEFT JOIN tenants t ON t.id = i.tenant_id
		WHERE i.tenant_id = $1 AND i.month = $2 `+lock, tenantID, m.Start()))
	if errors.Is(err, pgx.ErrNoRows) {
		return rec, tollgate.Errorf(tollgate.ENOTFOUND, "no invoice of that tenant for %s", m)
	}
	if err != nil {
		return rec, fmt.Errorf("billing: invoice: %w", err)
	}
	return rec, nil
}

// unpushedConflict returns ECONFLICT unless rec is an invoice the
// provider does not hold, as changeUnpushed requires (with voided, one
// the provider voided may be held).
func unpushedConflict(rec InvoiceRecord, voided bool) error {
	switch {
	case rec.PushState == PushBilledOutside:
		return tollgate.Errorf(tollgate.ECONFLICT, "the invoice was closed out as billed outside Tollgate")
	case voided && rec.PaymentStatus == "void":
	case rec.PushState == PushPushed:
		return tollgate.Errorf(tollgate.ECONFLICT,
			"the invoice is at the provider (%s): change it there (void it, or let it be paid)", cmpOr(rec.ProviderInvoiceID, "pushed"))
	case rec.PaymentStatus != "unpaid":
		return tollgate.Errorf(tollgate.ECONFLICT, "the invoice is %s at the provider", rec.PaymentStatus)
	}
	return nil
}

// Retarget makes tenant tenantID's invoice of month m pending again, to
// the customer the tenant is linked to now (invoice.retarget), due at
// once: the way out of a push failed (a draft deleted at the provider; a
// refusal fixed there since: retarget alone) or refused for a customer
// the provider does not have (relink the tenant, then retarget). The next
// push uses idempotency keys of the invoice's new generation, so the
// provider does not answer it with its earlier refusal, and looks the
// invoice up at the new customer only: a draft left at the earlier one
// is the operator's to delete. The invoice must not be at the provider
// (pending, or failed) and unpaid (ECONFLICT otherwise), and the tenant
// must have a billing account (ECONFLICT). ENOTFOUND for no such
// invoice. A pending invoice already to the linked customer and not
// tried since it was issued or re-targeted (no last error: one the link
// re-targeted, say) is returned as it is, and nothing is recorded.
func (inv *Invoicing) Retarget(ctx context.Context, by audit.Actor, tenantID string, m usage.Month) (InvoiceRecord, error) {
	return inv.retarget(ctx, inv.db, by, tenantID, m)
}

// retarget is Retarget on db, a pool or a transaction.
func (inv *Invoicing) retarget(ctx context.Context, db postgres.Conn, by audit.Actor, tenantID string, m usage.Month) (InvoiceRecord, error) {
	return inv.changeUnpushedOn(ctx, db, by, "invoice.retarget", tenantID, m, "", false, func(tx pgx.Tx, rec InvoiceRecord) error {
		a, err := lockedAccount(ctx, tx, tenantID, "FOR SHARE")
		if tollgate.ErrorCode(err) == tollgate.ENOTFOUND {
			return tollgate.Errorf(tollgate.ECONFLICT, "the tenant has no billing account: link one first (admin billing link)")
		}
		if err != nil {
			return err
		}
		if rec.PushState == PushPending && rec.CustomerID == a.CustomerID && rec.LastError == "" {
			return errUnchanged
		}
		var other int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM invoices WHERE customer_id = $1 AND tenant_id <> $2
			AND push_state = 'pending'`, a.CustomerID, tenantID).Scan(&other); err != nil {
			return fmt.Errorf("billing: retarget: %w", err)
		}
		if other > 0 {
			return tollgate.Errorf(tollgate.ECONFLICT, "customer %s has %d invoice(s) of another tenant still to push", a.CustomerID, other)
		}
		_, err = tx.Exec(ctx, `UPDATE invoices SET customer_id = $3, push_state = 'pending', push_generation = push_generation + 1,
			next_push_at = $4, last_error = '', provider_invoice_id = NULL, provider_status = '', provider_total_minor = NULL,
			provider_currency = '', updated_at = now() WHERE tenant_id = $1 AND month = $2`,
			tenantID, m.Start(), a.CustomerID, inv.now())
		if err != nil {
			return fmt.Errorf("billing: retarget: %w", err)
		}
		return nil
	})
}

// RetargetResult says what RetargetFailed did.
type RetargetResult struct {
	// Retargeted are the invoices made pending again.
	Retargeted []InvoiceRecord `json:"retargeted"`
	// Skipped are those left failed, each with why (Retarget's error).
	Skipped []RetargetSkipped `json:"skipped"`
}

// RetargetSkipped is a failed invoice RetargetFailed left failed.
type RetargetSkipped struct {
	TenantID   string `json:"tenant_id"`
	TenantName string `json:"tenant_name"`
	Month      string `json:"month"`
	Ref        string `json:"ref"`
	Error      string `json:"error"`
}

// RetargetFailed re-targets every invoice whose push failed (of month m,
// or of every month when m is nil), each as Retarget does and audited on
// its own (invoice.retarget): the way back, in bulk, from refusals that
// were the deployment's. An invoice Retarget refuses (its tenant without
// a billing account, say) is skipped with the reason; an error of the
// database ends it, with what was done so far.
func (inv *Invoicing) RetargetFailed(ctx context.Context, by audit.Actor, m *usage.Month) (RetargetResult, error) {
	res := RetargetResult{Retargeted: []InvoiceRecord{}, Skipped: []RetargetSkipped{}}
	var month *time.Time
	if m != nil {
		s := m.Start()
		month = &s
	}
	rows, err := inv.db.Query(ctx, `SELECT `+invoiceColumns+` FROM invoices i LEFT JOIN tenants t ON t.id = i.tenant_id
		WHERE i.push_state = 'failed' AND ($1::date IS NULL OR i.month = $1) ORDER BY i.month, t.name`, month)
	failed, err := postgres.Collect(rows, err, scanInvoice, "billing: failed invoices")
	if err != nil {
		return res, err
	}
	for _, f := range failed {
		month, err := usage.ParseMonth(f.Month)
		if err != nil {
			return res, err
		}
		rec, err := inv.Retarget(ctx, by, f.TenantID, month)
		switch code := tollgate.ErrorCode(err); {
		case err == nil:
			res.Retargeted = append(res.Retargeted, rec)
		case code == tollgate.ECONFLICT || code == tollgate.ENOTFOUND:
			res.Skipped = append(res.Skipped, RetargetSkipped{TenantID: f.TenantID, TenantName: f.TenantName, Month: f.Month,
				Ref: f.Ref, Error: tollgate.ErrorMessage(err)})
		default:
			return res, err
		}
	}
	return res, nil
}

// BillOutside closes tenant tenantID's invoice of month m out as billed
// outside Tollgate (invoice.bill_outside, with note saying how, in the
// audit entry): its push state becomes billed_outside, it is never
// pushed, and it no longer differs from its statement (unless the
// provider later reports it paid). For an invoice that cannot be pushed
// (an amount the provider does not take) or that the operator bills by
// hand. The invoice must be unpaid and not recorded at the provider
// (pending, or failed), or voided there; ECONFLICT otherwise.
//
// A pending invoice may be at the provider all the same: a push whose
// answer was lost (a timeout, a crash, a 5xx after the provider acted)
// leaves it pending, and the provider charges what it holds. So
// BillOutside first asks the provider for the invoices it holds at the
// invoice's customer under its reference (Provider.FindInvoices):
// ECONFLICT, naming it, for any it holds that is not void (a draft is to
// be deleted there, anything else voided, before closing the invoice
// out). When the provider cannot be asked (invoicing off, or the provider
// down), a pending invoice is ECONFLICT and only a failed one is closed
// out. The provider is asked before the invoice's push lease and row
// lock are taken, so that a slow answer holds up no push or event of the
// invoice; under them, an invoice that changed since it was asked about
// (pushed or tried again, paid or voided, re-targeted) is ECONFLICT, to
// try again. ENOTFOUND for no such invoice.
func (inv *Invoicing) BillOutside(ctx context.Context, by audit.Actor, tenantID string, m usage.Month, note string) (InvoiceRecord, error) {
	note = strings.TrimSpace(note)
	if len(note) > 500 {
		return InvoiceRecord{}, tollgate.Invalid(map[string]string{"note": "must be at most 500 characters"})
	}
	tenantID = strings.ToLower(tenantID)
	asked, err := invoiceOfMonth(ctx, inv.db, tenantID, m, "")
	if err != nil {
		return InvoiceRecord{}, err
	}
	// One the provider holds, or that is closed out already, is refused
	// under the lock below without asking.
	if unpushedConflict(asked, true) == nil {
		if err := inv.heldAtProvider(ctx, asked); err != nil {
			return InvoiceRecord{}, err
		}
	}
	return inv.changeUnpushed(ctx, by, "invoice.bill_outside", tenantID, m, note, true, func(tx pgx.Tx, rec InvoiceRecord) error {
		if rec.PushState != asked.PushState || rec.PushAttempts != asked.PushAttempts || rec.PaymentStatus != asked.PaymentStatus ||
			rec.Generation != asked.Generation || rec.CustomerID != asked.CustomerID || rec.ProviderInvoiceID != asked.ProviderInvoiceID {
			return tollgate.Errorf(tollgate.ECONFLICT,
				"the invoice changed while the payment provider was asked about it (now %s, %s): try again", rec.PushState, rec.PaymentStatus)
		}
		_, err := tx.Exec(ctx, `UPDATE invoices SET push_state = 'billed_outside', updated_at = now()
			WHERE tenant_id = $1 AND month = $2`, tenantID, m.Start())
		if err != nil {
			return fmt.Errorf("billing: bill outside: %w", err)
		}
		return nil
	})
}

// heldAtProvider returns ECONFLICT when the provider holds rec (or may,
// and cannot be asked): see BillOutside. An invoice it voided holds
// nothing.
func (inv *Invoicing) heldAtProvider(ctx context.Context, rec InvoiceRecord) error {
	if rec.PaymentStatus == "void" {
		return nil
	}
	if !inv.Enabled() {
		if rec.PushState == PushPending {
			return tollgate.Errorf(tollgate.ECONFLICT, "the invoice is pending, and a push whose answer was lost may have left it "+
				"at the payment provider, which invoicing off cannot ask: close it out where TOLLGATE_STRIPE_SECRET_KEY is set")
		}
		return nil
	}
	found, err := inv.cfg.Provider.FindInvoices(ctx, rec.CustomerID, rec.Ref)
	if err != nil {
		if rec.PushState == PushPending {
			return tollgate.Errorf(tollgate.ECONFLICT, "the invoice is pending, and a push whose answer was lost may have left it "+
				"at the payment provider, which could not be asked (%v): try again once it answers", err)
		}
		inv.cfg.Log.Warn("could not ask the payment provider for a failed invoice closed out as billed outside",
			"ref", rec.Ref, "customer", rec.CustomerID, "error", err)
		return nil
	}
	for _, f := range found {
		switch f.Status {
		case "void":
		case "draft":
			return tollgate.Errorf(tollgate.ECONFLICT,
				"the payment provider holds a draft of this invoice (%s at customer %s, %d %s): delete it there first, then close the invoice out",
				f.ID, rec.CustomerID, f.TotalMinor, f.Currency)
		default:
			return tollgate.Errorf(tollgate.ECONFLICT,
				"the payment provider holds this invoice, %s (%s at customer %s, %d %s), and may charge it: void it there first, then close the invoice out",
				f.Status, f.ID, rec.CustomerID, f.TotalMinor, f.Currency)
		}
	}
	return nil
}

// EventResult says what applying a provider event did.
type EventResult struct {
	// Applied is false for a replayed event (applied before), an event of
	// a kind Tollgate ignores, or one about an invoice, customer or top-up
	// it does not know (Unknown).
	Applied  bool `json:"applied"`
	Replayed bool `json:"replayed,omitempty"`
	Unknown  bool `json:"unknown,omitempty"`
}

// errUnknown rolls back an event about something Tollgate does not know.
var errUnknown = errors.New("billing: event about an unknown invoice or top-up")

// ApplyEvent applies a verified provider event once, by its ID, in one
// transaction with the record of its ID: an invoice paid, failed or
// voided sets the statement's payment status and emits its Tollgate
// event (and a payment resumes a tenant whose current suspension is
// dunning's); an invoice finalized records the provider's total; a draft
// deleted makes the invoice's push failed (both audited when they change
// it, and ignored when about an invoice other than the one recorded, or,
// before a push recorded one, of an earlier generation); a paid checkout
// grants its top-up's credits (credits.grant). Replays change nothing; an event
// about an unknown invoice or top-up, or about an invoice of Tollgate's
// at a customer other than the one it was issued to (a draft left at a
// customer before the invoice was re-targeted), is logged and changes
// nothing.
func (inv *Invoicing) ApplyEvent(ctx context.Context, ev ProviderEvent) (EventResult, error) {
	if ev.Kind == EventOther {
		return EventResult{}, nil
	}
	var res EventResult
	err := postgres.Tx(ctx, inv.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO provider_events (id, type) VALUES ($1, $2) ON CONFLICT DO NOTHING`, ev.ID, ev.Type)
		if err != nil {
			return fmt.Errorf("billing: record event: %w", err)
		}
		if tag.RowsAffected() == 0 {
			res.Replayed = true
			return nil
		}
		if ev.Kind == EventCheckoutPaid {
			err = inv.applyCheckout(ctx, tx, ev)
		} else {
			err = inv.applyInvoice(ctx, tx, ev)
		}
		if err != nil {
			return err
		}
		res.Applied = true
		return nil
	})
	if errors.Is(err, errUnknown) {
		inv.cfg.Log.Warn("provider event about an unknown invoice or top-up; acknowledged, nothing changed",
			"event_id", ev.ID, "type", ev.Type, "invoice", ev.InvoiceID, "customer", ev.CustomerID, "session", ev.SessionID)
		return EventResult{Unknown: true}, nil
	}
	return res, err
}

// InvoiceEventData is the payload of invoice.paid, invoice.payment_failed
// and invoice.voided.
type InvoiceEventData struct {
	TenantID          string `json:"tenant_id"`
	Month             string `json:"month"`
	Currency          string `json:"currency"`
	TotalMinor        int64  `json:"total_minor"`
	AmountPaidMinor   int64  `json:"amount_paid_minor"`
	ProviderInvoiceID string `json:"provider_invoice_id"`
	PaymentStatus     string `json:"payment_status"`
}

// providerView is what the audit entry of a draft finalized or deleted at
// the provider holds.
type providerView struct {
	Ref            string `json:"ref"`
	PushState      string `json:"push_state"`
	ProviderStatus string `json:"provider_status"`
	ProviderTotal  *int64 `json:"provider_total_minor"`
	LastError      string `json:"last_error,omitempty"`
}

// recordEvent audits, as ProviderActor, the change event ev made to rec
// (action: the event's kind).
func (inv *Invoicing) recordEvent(ctx context.Context, tx pgx.Tx, ev ProviderEvent, rec InvoiceRecord, before, after providerView) error {
	_, err := audit.Record(ctx, tx, ProviderActor, audit.Change{Action: string(ev.Kind), TargetType: "invoice", TargetID: rec.Ref,
		TenantID: rec.TenantID, Before: before, After: after})
	return err
}

type paymentChange struct {
	Ref           string `json:"ref"`
	PaymentStatus string `json:"payment_status"`
	ProviderTotal int64  `json:"provider_total_minor"`
}

func (inv *Invoicing) applyInvoice(ctx context.Context, tx pgx.Tx, ev ProviderEvent) error {
	// A draft's deletion or finalization is about one invoice at the
	// provider: the one recorded, or, before a push recorded its ID, one
	// made for the invoice's current generation. An invoice of an earlier
	// generation (left at the customer before a retarget) has the same
	// reference, and its events must not fail or change the invoice
	// pushed since, or being pushed now.
	ofDraft := ev.Kind == EventInvoiceDeleted || ev.Kind == EventInvoiceFinalized
	rec, err := scanInvoice(tx.QueryRow(ctx, `SELECT `+invoiceColumns+` FROM invoices i LEFT JOIN tenants t ON t.id = i.tenant_id
		WHERE ((i.provider_invoice_id = $1 AND $1 <> '') OR (i.ref = $2 AND $2 <> '' AND coalesce(i.provider_invoice_id, $1) = $1
			AND (NOT $4 OR i.push_generation = $5)))
		AND ($3 = '' OR i.customer_id = $3)
		FOR UPDATE OF i`, ev.InvoiceID, ev.InvoiceRef, ev.CustomerID, ofDraft, ev.Generation))
	if errors.Is(err, pgx.ErrNoRows) {
		return errUnknown
	}
	if err != nil {
		return fmt.Errorf("billing: find invoice: %w", err)
	}
	switch ev.Kind {
	case EventInvoiceFinalized:
		// The provider's total once no one can edit it any more: an
		// operator's edit of the draft shows in the reconciliation.
		currency := strings.ToUpper(ev.Currency)
		tag, err := tx.Exec(ctx, `UPDATE invoices SET provider_invoice_id = coalesce(provider_invoice_id, nullif($3, '')),
			provider_status = 'open', provider_total_minor = $4, provider_currency = $5, updated_at = now()
			WHERE tenant_id = $1 AND month = $2::date AND payment_status = 'unpaid'
			AND (provider_status <> 'open' OR provider_total_minor IS DISTINCT FROM $4 OR provider_currency <> $5
				OR provider_invoice_id IS NULL)`,
			rec.TenantID, rec.Month+"-01", ev.InvoiceID, ev.TotalMinor, currency)
		if err != nil {
			return fmt.Errorf("billing: record finalized invoice: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		return inv.recordEvent(ctx, tx, ev, rec, providerView{Ref: rec.Ref, PushState: rec.PushState, ProviderStatus: rec.ProviderStatus,
			ProviderTotal: rec.ProviderTotalMinor}, providerView{Ref: rec.Ref, PushState: rec.PushState, ProviderStatus: "open",
			ProviderTotal: &ev.TotalMinor})
	case EventInvoiceDeleted:
		// Only a draft can be deleted: the provider no longer holds the
		// invoice, which is retargeted or billed outside from here.
		const deleted = "the invoice was deleted at the payment provider"
		tag, err := tx.Exec(ctx, `UPDATE invoices SET push_state = 'failed', provider_status = 'deleted',
			last_error = $3, updated_at = now()
			WHERE tenant_id = $1 AND month = $2::date AND payment_status = 'unpaid' AND push_state IN ('pending', 'pushed')`,
			rec.TenantID, rec.Month+"-01", deleted)
		if err != nil {
			return fmt.Errorf("billing: record deleted invoice: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		return inv.recordEvent(ctx, tx, ev, rec, providerView{Ref: rec.Ref, PushState: rec.PushState, ProviderStatus: rec.ProviderStatus,
			ProviderTotal: rec.ProviderTotalMinor}, providerView{Ref: rec.Ref, PushState: PushFailed, ProviderStatus: "deleted",
			ProviderTotal: rec.ProviderTotalMinor, LastError: deleted})
	}
	status, typ := "", ""
	switch ev.Kind {
	case EventInvoicePaid:
		status, typ = "paid", events.InvoicePaid
	case EventInvoiceFailed:
		status, typ = "failed", events.InvoicePaymentFailed
	case EventInvoiceVoided:
		status, typ = "void", events.InvoiceVoided
	}
	if rec.PaymentStatus == "paid" || rec.PaymentStatus == "void" || (status == "failed" && rec.PaymentStatus == "failed") {
		// A late failure of a settled invoice, or a retried charge failing
		// again, changes nothing: the event is recorded as seen.
		return nil
	}
	at := ev.At
	if at.IsZero() {
		at = inv.now()
	}
	err = audit.Apply(ctx, tx, ProviderActor, func(tx pgx.Tx) (audit.Change, error) {
		_, err := tx.Exec(ctx, `UPDATE invoices SET payment_status = $3, provider_invoice_id = coalesce(provider_invoice_id, nullif($4, '')),
			provider_total_minor = $5, provider_currency = $6, provider_status = $7,
			paid_at = CASE WHEN $3 = 'paid' THEN $8 ELSE paid_at END,
			payment_failed_at = CASE WHEN $3 = 'failed' THEN $8 ELSE payment_failed_at END, updated_at = now()
			WHERE tenant_id = $1 AND month = $2::date`, rec.TenantID, rec.Month+"-01", status, ev.InvoiceID,
			ev.TotalMinor, strings.ToUpper(ev.Currency), string(ev.Kind)[len("invoice."):], at)
		if err != nil {
			return audit.Change{}, fmt.Errorf("billing: payment status: %w", err)
		}
		if _, err := events.Emit(ctx, tx, events.Event{Type: typ, TenantID: rec.TenantID, CreatedAt: at,
			Data: InvoiceEventData{TenantID: rec.TenantID, Month: rec.Month, Currency: rec.Currency, TotalMinor: ev.TotalMinor,
				AmountPaidMinor: ev.AmountPaidMinor, ProviderInvoiceID: ev.InvoiceID, PaymentStatus: status}}); err != nil {
			return audit.Change{}, err
		}
		return audit.Change{Action: "invoice." + status, TargetType: "invoice", TargetID: rec.Ref, TenantID: rec.TenantID,
			Before: paymentChange{Ref: rec.Ref, PaymentStatus: rec.PaymentStatus, ProviderTotal: deref(rec.ProviderTotalMinor)},
			After:  paymentChange{Ref: rec.Ref, PaymentStatus: status, ProviderTotal: ev.TotalMinor}}, nil
	})
	if err != nil {
		return err
	}
	if (status == "paid" || status == "void") && rec.DunningSuspendedAt != nil {
		return inv.resumeAfterDunning(ctx, tx, rec.TenantID)
	}
	return nil
}

// suspendedByDunning reports whether tenant tenantID is suspended, and
// whether that suspension is dunning's: the tenant's last change of
// status (tenant.suspend or tenant.resume, whose audit entries are
// written in the transactions of the changes) was dunning's suspension.
// An operator who resumed the tenant since, or suspended it again, made
// the suspension theirs, which a payment does not lift. It locks the
// tenant's row until tx ends, so that its status does not change
// meanwhile.
func suspendedByDunning(ctx context.Context, tx pgx.Tx, tenantID string) (suspended, ours bool, err error) {
	var status string
	if err := tx.QueryRow(ctx, `SELECT status FROM tenants WHERE id = $1 FOR UPDATE`, tenantID).Scan(&status); err != nil {
		return false, false, fmt.Errorf("billing: tenant status: %w", err)
	}
	if status != tenants.StatusSuspended {
		return false, false, nil
	}
	// The audit log is the record of who changed the status, written in
	// the change's transaction under the tenant's row lock, so its last
	// entry for the tenant is the current status's.
	var actor, action string
	var operatorID *string
	err = tx.QueryRow(ctx, `SELECT actor, actor_id::text, action FROM audit_log WHERE target_type = 'tenant' AND target_id = $1
		AND action IN ('tenant.suspend', 'tenant.resume') ORDER BY id DESC LIMIT 1`, tenantID).Scan(&actor, &operatorID, &action)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, false, nil
	}
	if err != nil {
		return true, false, fmt.Errorf("billing: who suspended the tenant: %w", err)
	}
	return true, action == "tenant.suspend" && actor == DunningActor.Name && operatorID == nil, nil
}

// resumeAfterDunning resumes tenantID (tenant.resume) when its current
// suspension is dunning's (suspendedByDunning), once none of its failed
// invoices is overdue: neither one that dunning suspended it for nor one
// that passed its grace since (marked now, as Dunning would, so that
// paying it resumes the tenant later).
func (inv *Invoicing) resumeAfterDunning(ctx context.Context, tx pgx.Tx, tenantID string) error {
	if _, err := tx.Exec(ctx, `UPDATE invoices SET dunning_suspended_at = NULL WHERE tenant_id = $1 AND payment_status IN ('paid', 'void')`, tenantID); err != nil {
		return err
	}
	suspended, ours, err := suspendedByDunning(ctx, tx, tenantID)
	if err != nil || !suspended || !ours {
		return err
	}
	if _, err := inv.markOverdue(ctx, tx, tenantID, inv.now()); err != nil {
		return err
	}
	var unpaid int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM invoices WHERE tenant_id = $1 AND dunning_suspended_at IS NOT NULL
		AND payment_status = 'failed'`, tenantID).Scan(&unpaid); err != nil {
		return err
	}
	if unpaid > 0 {
		return nil
	}
	_, err = tenants.NewOps(tx, inv.now).Resume(ctx, ProviderActor, tenantID)
	return err
}

// markOverdue marks each failed invoice of tenantID that is past its
// grace at now (not one billed outside Tollgate: its payment is the
// operator's to chase) (the grace of the tenant's plan, or the server's) as one
// dunning suspends the tenant for, and returns how many it marked.
func (inv *Invoicing) markOverdue(ctx context.Context, tx pgx.Tx, tenantID string, now time.Time) (int64, error) {
	tag, err := tx.Exec(ctx, `UPDATE invoices i SET dunning_suspended_at = $2 FROM tenants t
		LEFT JOIN plan_billing pb ON pb.plan_id = t.plan_id
		WHERE t.id = i.tenant_id AND i.tenant_id = $1 AND i.payment_status = 'failed' AND i.dunning_suspended_at IS NULL
		AND i.push_state <> 'billed_outside'
		AND coalesce(pb.dunning_grace_s, $3) > 0
		AND i.payment_failed_at <= $2::timestamptz - make_interval(secs => coalesce(pb.dunning_grace_s, $3))`,
		tenantID, now, inv.defaultGraceS())
	if err != nil {
		return 0, fmt.Errorf("billing: mark overdue invoices: %w", err)
	}
	return tag.RowsAffected(), nil
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// Dunning suspends (tenant.suspend, by DunningActor) every active tenant
// with an invoice whose payment failed at least its grace period ago and
// is still not paid, and returns how many it suspended. The grace is the
// tenant's plan's (PlanBilling), or the server's default (DunningGrace)
// when the plan has none; a grace of 0 never suspends. A later payment of
// the invoice resumes the tenant (ApplyEvent), unless an operator has
// resumed or suspended it since: the suspension is then the operator's.
// A tenant dunning suspended whose other invoices pass their grace
// meanwhile has them marked as well, and is resumed only once none of
// them is unpaid.
func (inv *Invoicing) Dunning(ctx context.Context) (int, error) {
	now, def := inv.now(), inv.defaultGraceS()
	rows, err := inv.db.Query(ctx, `SELECT DISTINCT i.tenant_id::text FROM invoices i JOIN tenants t ON t.id = i.tenant_id
		LEFT JOIN plan_billing pb ON pb.plan_id = t.plan_id
		WHERE i.payment_status = 'failed' AND i.dunning_suspended_at IS NULL AND i.push_state <> 'billed_outside'
		AND coalesce(pb.dunning_grace_s, $2) > 0
		AND i.payment_failed_at <= $1::timestamptz - make_interval(secs => coalesce(pb.dunning_grace_s, $2))`, now, def)
	due, err := postgres.Collect(rows, err, func(r pgx.Row) (string, error) {
		var id string
		return id, r.Scan(&id)
	}, "billing: dunning")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range due {
		err := postgres.Tx(ctx, inv.db, func(tx pgx.Tx) error {
			suspended, ours, err := suspendedByDunning(ctx, tx, id)
			if err != nil {
				return err
			}
			if suspended {
				// A tenant suspended by someone else is left alone and
				// its invoices unmarked: only a suspension of dunning's
				// own is lifted when the invoices are paid. One of
				// dunning's own has this invoice marked too, so that
				// paying the first is not enough to resume it.
				if ours {
					_, err := inv.markOverdue(ctx, tx, id, now)
					return err
				}
				return nil
			}
			marked, err := inv.markOverdue(ctx, tx, id, now)
			if err != nil || marked == 0 {
				return err
			}
			_, err = tenants.NewOps(tx, inv.now).Suspend(ctx, DunningActor, id)
			if err == nil {
				n++
			}
			return err
		})
		if err != nil {
			return n, fmt.Errorf("billing: dunning of %s: %w", id, err)
		}
	}
	return n, nil
}

// TopUpInput is the body of POST /tenants/{tenantID}/billing/top-ups:
// prepaid credits to buy through the provider's hosted checkout, and
// where the buyer returns to.
// AmountMinor is the price; a tenant's own admin leaves it out (or
// gives units × the plan's top-up price), and so may an operator on a
// plan that has one.
type TopUpInput struct {
	Units       int64  `json:"units"`
	AmountMinor int64  `json:"amount_minor"`
	SuccessURL  string `json:"success_url"`
	CancelURL   string `json:"cancel_url"`
}

// TopUp is a credit top-up bought through the provider: granted once,
// when the provider says it was paid.
type TopUp struct {
	ID          string `json:"id"`
	TenantID    string `json:"tenant_id"`
	Units       int64  `json:"units"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	SessionID   string `json:"checkout_session_id,omitempty"`
	CheckoutURL string `json:"checkout_url,omitempty"`
	// Status is open until the provider says it was paid (paid);
	// cancelled when the provider did not open its checkout.
	Status    string     `json:"status"`
	GrantID   string     `json:"grant_id,omitempty"`
	PaidAt    *time.Time `json:"paid_at,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
}

func topUpAudit(action string, before, after *TopUp) audit.Change {
	t := audit.Subject(before, after)
	return audit.Change{Action: action, TargetType: "credit_topup", TargetID: t.ID, TenantID: t.TenantID,
		Before: before, After: after}
}

func validURL(s string) bool {
	return (strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "http://")) && len(s) <= 2000 && !strings.ContainsAny(s, " \n")
}

// OpenTopUp opens a top-up of tenant tenantID's prepaid credits
// (credits.topup): a record of it (audited), then the provider's
// checkout page for it, whose URL the result carries. The credits are
// granted when the provider's event says the checkout was paid
// (ApplyEvent). The tenant needs a billing account; its plan's currency
// is the price's. An operator may set any price (in.AmountMinor, or
// units × the plan's top-up price when 0); a tenant's own admin pays
// units × the plan's top-up price (PlanBilling.TopUpUnitMinor), and may
// not open one when the plan has none (ECONFLICT) or name another price
// (EINVALID). When the provider does not open the checkout, nothing can
// be paid on the top-up, which is cancelled (credits.topup_cancel, with
// the provider's error): a price it does not take in the currency
// (ErrAmountNotAccepted) is EINVALID naming amount_minor, and a URL it
// refuses (FieldRefusal) EINVALID naming that URL's field; a customer it
// does not have (ErrNoSuchCustomer), or the plan's currency refused,
// ECONFLICT; any other refusal (the provider's account or settings) or
// failure EUNAVAILABLE.
// ECONFLICT with invoicing off.
func (inv *Invoicing) OpenTopUp(ctx context.Context, by audit.Actor, tenantID string, in TopUpInput) (TopUp, error) {
	f := map[string]string{}
	if in.Units <= 0 || in.Units > 1<<50 {
		f["units"] = "must be a whole number of units from 1 to 2^50"
	}
	if in.AmountMinor < 0 || in.AmountMinor > 1<<50 {
		f["amount_minor"] = "must be a positive amount in minor units"
	}
	if !validURL(in.SuccessURL) {
		f["success_url"] = "must be an http(s) URL"
	}
	if !validURL(in.CancelURL) {
		f["cancel_url"] = "must be an http(s) URL"
	}
	if err := tollgate.Invalid(f); err != nil {
		return TopUp{}, err
	}
	if !inv.Enabled() {
		return TopUp{}, inv.off()
	}
	var acct Account
	made, err := audit.Create(ctx, inv.db, by, "credits.topup", topUpAudit, func(tx pgx.Tx) (TopUp, error) {
		t, err := tenants.NewStore(tx).Get(ctx, tenantID)
		if err != nil {
			return TopUp{}, err
		}
		if acct, err = accountOf(ctx, tx, tenantID); tollgate.ErrorCode(err) == tollgate.ENOTFOUND {
			return TopUp{}, tollgate.Errorf(tollgate.ECONFLICT, "the tenant has no billing account: link one first")
		} else if err != nil {
			return TopUp{}, err
		}
		p, err := plans.NewStore(tx).Get(ctx, t.PlanID)
		if err != nil {
			return TopUp{}, err
		}
		pb, err := inv.planBilling(ctx, tx, p.ID)
		if err != nil {
			return TopUp{}, err
		}
		if in.AmountMinor, err = topUpPrice(by, in, pb.TopUpUnitMinor); err != nil {
			return TopUp{}, err
		}
		var u TopUp
		err = tx.QueryRow(ctx, `INSERT INTO credit_topups (tenant_id, units, amount_minor, currency) VALUES ($1, $2, $3, $4)
			RETURNING id::text, tenant_id::text, units, amount_minor, currency, status, created_at`,
			tenantID, in.Units, in.AmountMinor, p.Currency).
			Scan(&u.ID, &u.TenantID, &u.Units, &u.AmountMinor, &u.Currency, &u.Status, &u.CreatedAt)
		return u, err
	})
	if err != nil {
		return TopUp{}, err
	}
	s, err := inv.cfg.Provider.OpenCheckout(ctx, CheckoutInput{TopUpID: made.ID, TenantID: tenantID, CustomerID: acct.CustomerID,
		Currency: made.Currency, Units: made.Units, AmountMinor: made.AmountMinor, SuccessURL: in.SuccessURL, CancelURL: in.CancelURL})
	if err != nil {
		// No checkout reached the tenant, so nothing can be paid on the
		// top-up: it is cancelled, rather than left open for good.
		if cerr := inv.cancelTopUp(context.WithoutCancel(ctx), by, made.ID, err); cerr != nil {
			return TopUp{}, errors.Join(fmt.Errorf("billing: open checkout: %w", err), cerr)
		}
	}
	var refusal FieldRefusal
	switch {
	case err == nil:
	case errors.Is(err, ErrAmountNotAccepted):
		return TopUp{}, tollgate.Invalid(map[string]string{"amount_minor": err.Error()})
	case errors.Is(err, ErrNoSuchCustomer):
		return TopUp{}, tollgate.Errorf(tollgate.ECONFLICT,
			"the payment provider has no customer %s (the tenant's billing account): link the tenant to another", acct.CustomerID)
	case errors.As(err, &refusal) && refusal.RefusedField() == "currency":
		return TopUp{}, tollgate.Errorf(tollgate.ECONFLICT,
			"the payment provider does not take the plan's currency %s in a checkout: %v", made.Currency, err)
	case errors.As(err, &refusal) && refusal.RefusedField() != "":
		return TopUp{}, tollgate.Invalid(map[string]string{refusal.RefusedField(): "the payment provider refused it: " + err.Error()})
	case errors.Is(err, ErrRefused):
		// Nothing of the request's names itself: the provider's account
		// or settings (an operator's to fix), not the caller's input.
		return TopUp{}, tollgate.Errorf(tollgate.EUNAVAILABLE, "the payment provider refused the checkout: %v", err)
	default:
		return TopUp{}, tollgate.Errorf(tollgate.EUNAVAILABLE, "the payment provider did not open the checkout: %v", err)
	}
	if _, err := inv.db.Exec(ctx, `UPDATE credit_topups SET checkout_session_id = $2, checkout_url = $3 WHERE id = $1`,
		made.ID, s.ID, s.URL); err != nil {
		return made, fmt.Errorf("billing: record checkout: %w", err)
	}
	made.SessionID, made.CheckoutURL = s.ID, s.URL
	return made, nil
}

// cancelTopUp cancels top-up id, whose checkout the provider did not open
// (failed says why), by the actor who opened it
// (credits.topup_cancel): the entry names the top-up the credits.topup
// entry before it named, and the provider's error.
func (inv *Invoicing) cancelTopUp(ctx context.Context, by audit.Actor, id string, failed error) error {
	msg := failed.Error()
	if len(msg) > 500 {
		msg = msg[:500]
	}
	type cancelled struct {
		TopUp
		Reason string `json:"reason,omitempty"`
	}
	describe := func(action string, before, after *cancelled) audit.Change {
		c := topUpAudit(action, &before.TopUp, &after.TopUp)
		c.Before, c.After = before, after
		return c
	}
	_, err := audit.Update(ctx, inv.db, by, "credits.topup_cancel", describe,
		func(tx pgx.Tx) (cancelled, error) {
			u, err := scanTopUp(tx.QueryRow(ctx, `SELECT `+topUpColumns+` FROM credit_topups
				WHERE id = $1 AND status = 'open' AND checkout_session_id IS NULL FOR UPDATE`, id))
			if errors.Is(err, pgx.ErrNoRows) {
				return cancelled{}, tollgate.Errorf(tollgate.ENOTFOUND, "no open top-up %s without a checkout", id)
			}
			return cancelled{TopUp: u}, err
		},
		func(tx pgx.Tx, before cancelled) (cancelled, error) {
			u, err := scanTopUp(tx.QueryRow(ctx, `UPDATE credit_topups SET status = 'cancelled' WHERE id = $1
				RETURNING `+topUpColumns, id))
			return cancelled{TopUp: u, Reason: "the payment provider did not open the checkout: " + msg}, err
		})
	if err != nil {
		return fmt.Errorf("billing: cancel a top-up without a checkout: %w", err)
	}
	return nil
}

// topUpPrice is what a top-up of in.Units costs, opened by by on a plan
// whose self-serve price of a unit is unit (nil: none).
func topUpPrice(by audit.Actor, in TopUpInput, unit *int64) (int64, error) {
	var priced int64
	if unit != nil {
		if in.Units > (1<<50) / *unit {
			return 0, tollgate.Invalid(map[string]string{"units": "units × the plan's top-up price must be at most 2^50 minor units"})
		}
		priced = in.Units * *unit
	}
	switch {
	case by.Operator && in.AmountMinor > 0:
		return in.AmountMinor, nil
	case by.Operator && unit == nil:
		return 0, tollgate.Invalid(map[string]string{"amount_minor": "must be a positive amount in minor units (the plan has no top-up price)"})
	case by.Operator:
		return priced, nil
	case unit == nil:
		return 0, tollgate.Errorf(tollgate.ECONFLICT, "the tenant's plan sells no prepaid credits: ask an operator")
	case in.AmountMinor != 0 && in.AmountMinor != priced:
		return 0, tollgate.Invalid(map[string]string{"amount_minor": fmt.Sprintf("must be %d (units × the plan's price of %d), or left out", priced, *unit)})
	}
	return priced, nil
}

// TopUps returns tenant tenantID's top-ups, newest first.
func (inv *Invoicing) TopUps(ctx context.Context, tenantID string) ([]TopUp, error) {
	if !postgres.IsUUID(tenantID) {
		return []TopUp{}, nil
	}
	rows, err := inv.db.Query(ctx, `SELECT `+topUpColumns+` FROM credit_topups WHERE tenant_id = $1 ORDER BY created_at DESC`, tenantID)
	list, err := postgres.Collect(rows, err, scanTopUp, "billing: top-ups")
	if list == nil {
		list = []TopUp{}
	}
	return list, err
}

const topUpColumns = `id::text, tenant_id::text, units, amount_minor, currency, coalesce(checkout_session_id, ''),
	checkout_url, status, coalesce(grant_id::text, ''), paid_at, created_at`

func scanTopUp(r pgx.Row) (TopUp, error) {
	var u TopUp
	err := r.Scan(&u.ID, &u.TenantID, &u.Units, &u.AmountMinor, &u.Currency, &u.SessionID, &u.CheckoutURL, &u.Status,
		&u.GrantID, &u.PaidAt, &u.CreatedAt)
	return u, err
}

// applyCheckout grants a paid top-up's credits, once: a top-up already
// paid (by another event of the same payment) changes nothing.
func (inv *Invoicing) applyCheckout(ctx context.Context, tx pgx.Tx, ev ProviderEvent) error {
	if !postgres.IsUUID(ev.TopUpID) {
		return errUnknown
	}
	u, err := scanTopUp(tx.QueryRow(ctx, `SELECT `+topUpColumns+` FROM credit_topups WHERE id = $1
		AND (checkout_session_id IS NULL OR checkout_session_id = $2) FOR UPDATE`, ev.TopUpID, ev.SessionID))
	if errors.Is(err, pgx.ErrNoRows) {
		return errUnknown
	}
	if err != nil {
		return fmt.Errorf("billing: find top-up: %w", err)
	}
	if u.Status == "paid" {
		return nil
	}
	g, err := credits.NewOps(tx, inv.now).Grant(ctx, ProviderActor, u.TenantID, credits.GrantInput{Amount: u.Units,
		Cause: "top-up paid through checkout " + ev.SessionID})
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE credit_topups SET status = 'paid', grant_id = $2, paid_at = $3,
		checkout_session_id = coalesce(checkout_session_id, nullif($4, '')) WHERE id = $1`, u.ID, g.ID, inv.now(), ev.SessionID)
	return err
}

// Reconciliation is a tenant's month: its statement's total beside its
// invoice's at the provider, as the provider last reported it (in a
// push's answer or an event), and every difference between them.
type Reconciliation struct {
	TenantID   string `json:"tenant_id"`
	TenantName string `json:"tenant_name"`
	Month      string `json:"month"`
	Currency   string `json:"currency"`
	// StatementMinor is the statement's total; LinesMinor the sum of the
	// invoice's lines we sent; ProviderMinor the provider's total, when
	// known.
	StatementMinor int64  `json:"statement_minor"`
	LinesMinor     *int64 `json:"lines_minor"`
	ProviderMinor  *int64 `json:"provider_minor"`
	// Invoice is the provider's invoice ID; PushState and PaymentStatus
	// ours ("" when the statement has no invoice: no billing account at
	// the close, or, when Differences says so, one never issued).
	Invoice       string `json:"invoice,omitempty"`
	PushState     string `json:"push_state,omitempty"`
	PaymentStatus string `json:"payment_status,omitempty"`
	// Differences lists each way the two disagree; empty when they agree
	// to the cent.
	Differences []string `json:"differences"`
}

// Reconcile returns month m's reconciliation, by tenant name: every
// closed statement beside its invoice. It compares what Tollgate stored:
// the statement, the lines it sent, and the provider's status and total
// as the provider last reported them (the push's answer, then its
// events); it does not ask the provider. A statement without an invoice
// is listed without one: no difference when the tenant had no billing
// account at the close, a difference when it had one (an invoice never
// issued: IssueMissing). An invoice whose push failed is a difference; one
// billed outside Tollgate is not, unless the provider reported it paid
// too (the tenant paid twice). Unless inv pushes in ModeDraft, so is an
// invoice still a draft at the provider (draftLeft): pushed by a process
// in draft mode, it matches the statement to the cent and is never
// charged nor sent.
func (inv *Invoicing) Reconcile(ctx context.Context, m usage.Month) ([]Reconciliation, error) {
	rows, err := inv.db.Query(ctx, `SELECT s.tenant_id::text, coalesce(t.name, s.body->>'tenant_name'), s.currency, s.total_minor,
		i.lines, coalesce(i.provider_invoice_id, ''), coalesce(i.push_state, ''), coalesce(i.payment_status, ''),
		i.provider_total_minor, coalesce(i.provider_currency, ''), coalesce(i.total_minor, s.total_minor), coalesce(i.currency, s.currency),
		coalesce(i.last_error, ''), coalesce(a.created_at <= s.closed_at, false), coalesce(i.provider_status, '')
		FROM statements s LEFT JOIN invoices i ON i.tenant_id = s.tenant_id AND i.month = s.month
		LEFT JOIN tenants t ON t.id = s.tenant_id LEFT JOIN billing_accounts a ON a.tenant_id = s.tenant_id
		WHERE s.month = $1 ORDER BY 2`, m.Start())
	list, err := postgres.Collect(rows, err, func(r pgx.Row) (Reconciliation, error) {
		var c Reconciliation
		var lines []byte
		var providerCurrency, invCurrency, lastError, providerStatus string
		var invTotal int64
		var linkedAtClose bool
		if err := r.Scan(&c.TenantID, &c.TenantName, &c.Currency, &c.StatementMinor, &lines, &c.Invoice, &c.PushState,
			&c.PaymentStatus, &c.ProviderMinor, &providerCurrency, &invTotal, &invCurrency, &lastError, &linkedAtClose,
			&providerStatus); err != nil {
			return c, err
		}
		c.Month, c.Differences = m.String(), []string{}
		if lines == nil {
			if linkedAtClose {
				c.Differences = append(c.Differences, fmt.Sprintf(
					"no invoice, though the tenant had a billing account at the close: issue it (admin invoices issue --month %s)", m))
			}
			return c, nil
		}
		var ls []InvoiceLine
		if err := json.Unmarshal(lines, &ls); err != nil {
			return c, err
		}
		sum, err := sumLines(ls)
		if err != nil {
			return c, err
		}
		c.LinesMinor = &sum
		diff := func(format string, args ...any) { c.Differences = append(c.Differences, fmt.Sprintf(format, args...)) }
		if sum != c.StatementMinor || invTotal != c.StatementMinor {
			diff("invoice lines sum to %d, the statement to %d", sum, c.StatementMinor)
		}
		if invCurrency != c.Currency {
			diff("invoice currency %s, the statement's %s", invCurrency, c.Currency)
		}
		switch {
		case c.PushState == PushPending:
			diff("push pending: %s", cmpOr(lastError, "not pushed yet"))
		case c.PushState == PushFailed:
			diff("push failed for good: %s; relink and retarget it, or bill it outside (admin invoices retarget, bill-outside)",
				cmpOr(lastError, "refused by the provider"))
		case c.PushState == PushBilledOutside && c.PaymentStatus == "paid":
			diff("billed outside Tollgate, and paid at the provider too: refund one of the two")
		case c.PushState == PushBilledOutside:
			// Closed out by an operator: the provider holds nothing, or
			// what it holds is void.
		case c.ProviderMinor == nil:
			diff("the provider's total is unknown")
		case *c.ProviderMinor != c.StatementMinor:
			diff("the provider's total is %d, the statement's %d", *c.ProviderMinor, c.StatementMinor)
		}
		if c.PushState == "pushed" && providerCurrency != "" && providerCurrency != c.Currency {
			diff("the provider's currency is %s, the statement's %s", providerCurrency, c.Currency)
		}
		if c.PaymentStatus == "void" && c.PushState != PushBilledOutside {
			diff("the invoice was voided at the provider")
		}
		if inv.draftLeft(c.PushState, providerStatus, c.PaymentStatus) {
			diff("still a draft at the provider, though invoices are pushed in %s mode: a process in draft mode pushed it, "+
				"so nothing charges or sends it; finalize it at the provider", inv.cfg.Mode)
		}
		return c, nil
	}, "billing: reconcile")
	if list == nil {
		list = []Reconciliation{}
	}
	return list, err
}

// Differences counts the statements that disagree with their invoices
// now (any month), as Reconcile sees them: pending and failed pushes,
// other totals or currencies at the provider, voided invoices, invoices
// billed outside Tollgate and paid at the provider too, statements of
// tenants linked at the close without an invoice, and, unless inv pushes
// in ModeDraft, invoices left drafts at the provider (draftLeft). It is
// the reconciliation metric.
func (inv *Invoicing) Differences(ctx context.Context) (int, error) {
	var n int
	err := inv.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM invoices WHERE (push_state <> 'billed_outside'
		AND (push_state IN ('pending', 'failed') OR provider_total_minor IS DISTINCT FROM total_minor
		OR (provider_currency <> '' AND provider_currency <> currency) OR payment_status = 'void'
		OR ($1 AND push_state = 'pushed' AND provider_status = 'draft' AND payment_status = 'unpaid')))
		OR (push_state = 'billed_outside' AND payment_status = 'paid'))
		+ (SELECT count(*) FROM statements s JOIN billing_accounts a ON a.tenant_id = s.tenant_id AND a.created_at <= s.closed_at
		WHERE NOT EXISTS (SELECT 1 FROM invoices i WHERE i.tenant_id = s.tenant_id AND i.month = s.month))`,
		inv.cfg.Mode != ModeDraft).Scan(&n)
	return n, err
}

// draftLeft says whether an invoice of push state pushState, status
// providerStatus at the provider and payment status paymentStatus is a
// difference for being still a draft at the provider: pushed, unpaid and
// a draft there, while inv pushes in finalize or send mode. The mode is
// the process's (TOLLGATE_INVOICE_MODE), not recorded on the invoice: a
// process run without it (an operator's shell closing a month) pushes
// drafts that nobody finalizes, which agree with the statement to the
// cent. An operator who finalizes one at the provider clears it (its
// invoice.finalized event). In draft mode, drafts are what is pushed.
func (inv *Invoicing) draftLeft(pushState, providerStatus, paymentStatus string) bool {
	return inv.cfg.Mode != ModeDraft && pushState == PushPushed && providerStatus == "draft" && paymentStatus == "unpaid"
}

// FailedPushes counts the invoices whose push failed for good, waiting
// for an operator (Retarget, BillOutside).
func (inv *Invoicing) FailedPushes(ctx context.Context) (int, error) {
	var n int
	err := inv.db.QueryRow(ctx, `SELECT count(*) FROM invoices WHERE push_state = 'failed'`).Scan(&n)
	return n, err
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
