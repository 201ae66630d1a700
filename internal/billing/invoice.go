package billing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Provider is the boundary between statements and a payment provider
// (Stripe, in package billing/stripe): billing decides what to invoice
// and records what happened; the provider only speaks to the outside.
// The programs wire one in (NewInvoicing); without one, invoicing is off.
//
// Every method that creates something at the provider is idempotent by
// the keys its input carries (Invoice.Ref, CheckoutInput.TopUpID): called
// again with the same input, after a timeout or a crash, it creates
// nothing new. Every amount in and out is in integer minor units of ISO
// 4217, as all of Tollgate's money: a provider whose API counts a
// currency in another unit converts at its boundary. Implementations are
// safe for concurrent use and never return or log their secret key.
type Provider interface {
	// CreateCustomer makes a customer for a tenant and returns its ID.
	CreateCustomer(ctx context.Context, in CustomerInput) (string, error)
	// PushInvoice makes sure the provider holds inv: it finds the invoice
	// by its Ref, or creates it, adds the lines it lacks, and finalizes or
	// sends it as inv.Mode says. It returns the provider's view of it.
	PushInvoice(ctx context.Context, inv Invoice) (PushedInvoice, error)
	// FindInvoices returns the invoices the provider holds at customer
	// customerID whose reference is ref (of any generation), newest
	// first, asking the provider: what a push whose answer was lost may
	// have left there.
	FindInvoices(ctx context.Context, customerID, ref string) ([]PushedInvoice, error)
	// OpenCheckout opens a hosted payment page for a credit top-up.
	OpenCheckout(ctx context.Context, in CheckoutInput) (CheckoutSession, error)
	// ParseEvent verifies a webhook's signature (with its tolerance) and
	// reads the event. A bad or stale signature is ErrBadSignature.
	ParseEvent(payload []byte, signature string) (ProviderEvent, error)
}

// ErrBadSignature is what Provider.ParseEvent returns for a webhook whose
// signature is missing, wrong or too old.
var ErrBadSignature = errors.New("billing: bad or stale webhook signature")

// ErrAmountNotAccepted is wrapped by a Provider's error for an amount it
// cannot send in its currency (Stripe takes three-decimal currencies only
// in amounts ending in 0), returned before anything is sent, or that the
// provider refused (too small, too large). Such an invoice's push failed
// for good (push state failed, never retried): it is the only refusal
// that does; such a top-up is refused (EINVALID, naming amount_minor).
var ErrAmountNotAccepted = errors.New("amount not accepted by the payment provider")

// ErrRefused is wrapped by a Provider's error for a request the provider
// refused as it was made (a customer it does not have, a parameter it
// does not take), rather than failed to answer. A refusal of the
// credentials is not one. Such a refusal may still be the deployment's (a
// key of another account or mode, which does not see the customer; an
// account not activated at the provider), which an operator fixes for
// every invoice at once: an invoice whose push is refused is retried with
// backoff, the refusal shown as its last error, unless the amount was
// refused (ErrAmountNotAccepted). A top-up refused is not retried.
var ErrRefused = errors.New("refused by the payment provider")

// ErrNoSuchCustomer is wrapped, with ErrRefused, by a Provider's error for
// a customer it does not have (a mistyped ID, or one deleted there).
var ErrNoSuchCustomer = errors.New("no such customer at the payment provider")

// FieldRefusal is implemented by a Provider's error for a checkout it
// refused for a value of the input: RefusedField names it as the field of
// TopUpInput's JSON (success_url, cancel_url), or "currency" for the
// plan's currency; "" when the refusal names none of them.
type FieldRefusal interface {
	error
	RefusedField() string
}

// refusedForGood reports whether err, a Provider's, will fail again
// however often the request is repeated, whatever the deployment: an
// amount the provider does not take.
func refusedForGood(err error) bool {
	return errors.Is(err, ErrAmountNotAccepted)
}

// InvoiceMode is how far a pushed invoice goes at the provider.
type InvoiceMode string

// The invoice modes: a draft an operator reviews and finalizes there;
// finalized (charged to the customer's default payment method); or
// finalized and sent to the customer to pay.
const (
	ModeDraft    InvoiceMode = "draft"
	ModeFinalize InvoiceMode = "finalize"
	ModeSend     InvoiceMode = "send"
)

// ParseInvoiceMode reads an InvoiceMode.
func ParseInvoiceMode(s string) (InvoiceMode, error) {
	switch m := InvoiceMode(s); m {
	case ModeDraft, ModeFinalize, ModeSend:
		return m, nil
	}
	return "", fmt.Errorf("must be draft, finalize or send")
}

// CustomerInput is a tenant for which a customer is made.
type CustomerInput struct {
	TenantID   string
	TenantName string
	Email      string
	// Replacing is the customer the tenant is linked to when the new one
	// is asked for ("" for none): a create that replaces a customer is
	// another request than the one that made it, however alike.
	Replacing string
}

// InvoiceLine is one line of an invoice: money in integer minor units of
// the invoice's currency. Key is stable for a statement's line (it keys
// the line at the provider).
type InvoiceLine struct {
	Key         string `json:"key"`
	Description string `json:"description"`
	// Units is the units the line prices (0 for a fee).
	Units       int64 `json:"units,omitempty"`
	AmountMinor int64 `json:"amount_minor"`
}

// Invoice is what is pushed for a closed statement.
type Invoice struct {
	// Ref names the statement at the provider: the invoice's metadata and
	// the stem of every idempotency key of its push.
	Ref        string
	TenantID   string
	TenantName string
	Month      string
	CustomerID string
	// Currency is the statement's (ISO 4217, upper case).
	Currency   string
	TotalMinor int64
	Lines      []InvoiceLine
	Mode       InvoiceMode
	// Generation counts the times an operator re-targeted the invoice
	// (Invoicing.Retarget): when positive, the push's idempotency keys
	// carry it, so that the provider does not answer a push to the new
	// customer with what it answered the earlier ones. The invoice made
	// at the provider carries it too, and its events bring it back
	// (ProviderEvent.Generation).
	Generation int
}

// PushedInvoice is the provider's view of a pushed invoice.
type PushedInvoice struct {
	ID     string
	Status string
	// TotalMinor and Currency are the provider's total (in ISO 4217
	// minor units, whatever the provider's own unit).
	TotalMinor int64
	Currency   string
}

// CheckoutInput is a credit top-up to pay at the provider.
type CheckoutInput struct {
	TopUpID    string
	TenantID   string
	CustomerID string
	Currency   string
	Units      int64
	// AmountMinor is the price of all the units.
	AmountMinor int64
	SuccessURL  string
	CancelURL   string
}

// CheckoutSession is an opened payment page.
type CheckoutSession struct {
	ID  string
	URL string
}

// EventKind is what a provider event means to Tollgate.
type EventKind string

// The provider events Tollgate applies; any other is acknowledged and
// ignored (EventOther). A finalized invoice's total is recorded (an
// operator may have edited the draft); a deleted draft makes the
// invoice's push failed, since the provider no longer holds it.
const (
	EventInvoicePaid      EventKind = "invoice.paid"
	EventInvoiceFailed    EventKind = "invoice.payment_failed"
	EventInvoiceVoided    EventKind = "invoice.voided"
	EventInvoiceFinalized EventKind = "invoice.finalized"
	EventInvoiceDeleted   EventKind = "invoice.deleted"
	EventCheckoutPaid     EventKind = "checkout.paid"
	EventOther            EventKind = ""
)

// ProviderEvent is a verified webhook event, read into what Tollgate
// needs of it.
type ProviderEvent struct {
	// ID is the provider's event ID: each is applied once.
	ID   string
	Type string
	Kind EventKind
	At   time.Time
	// The invoice's, for invoice events. Generation is the one it was
	// made for (0 for one made before the provider recorded it).
	InvoiceID       string
	InvoiceRef      string
	Generation      int
	CustomerID      string
	TotalMinor      int64
	AmountPaidMinor int64
	Currency        string
	// The checkout's, for EventCheckoutPaid.
	SessionID string
	TopUpID   string
}

// InvoiceLines are the lines of st's invoice, mirroring the statement:
// each plan period's base fee and each of its overage tiers, then the
// month's prepaid credits (used, past the balance, adjusted) as lines of
// no amount, since credits are paid when bought. Their amounts sum to
// st.TotalMinor.
func InvoiceLines(st Statement) []InvoiceLine {
	var lines []InvoiceLine
	for i, p := range st.Plans {
		span := p.From.UTC().Format("2006-01-02") + " to " + p.To.UTC().Format("2006-01-02")
		lines = append(lines, InvoiceLine{Key: fmt.Sprintf("p%d.base", i),
			Description: fmt.Sprintf("Base fee, plan %s, %s", p.Plan, span), AmountMinor: p.BaseFeeMinor})
		for j, o := range p.Overage {
			lines = append(lines, InvoiceLine{Key: fmt.Sprintf("p%d.overage.%d", i, j),
				Description: fmt.Sprintf("Overage, plan %s, %s: units %d to %d at %d each", p.Plan, span, o.FromUnit, o.ToUnit, o.UnitMinor),
				Units:       o.Units, AmountMinor: o.AmountMinor})
		}
	}
	if c := st.Credits; c != nil {
		if c.Used != 0 {
			lines = append(lines, InvoiceLine{Key: "credits.used", Units: c.Used,
				Description: "Prepaid credits used (paid when bought)"})
		}
		if c.Overage != 0 {
			lines = append(lines, InvoiceLine{Key: "credits.past_balance", Units: c.Overage,
				Description: "Units past the prepaid balance (priced in the overage above)"})
		}
		if c.Adjusted != 0 {
			lines = append(lines, InvoiceLine{Key: "credits.adjusted", Units: c.Adjusted,
				Description: "Prepaid credits adjusted"})
		}
	}
	return lines
}

// sumLines returns the lines' total.
func sumLines(lines []InvoiceLine) (int64, error) {
	var total int64
	for _, l := range lines {
		var err error
		if total, err = addChecked(total, l.AmountMinor); err != nil {
			return 0, err
		}
	}
	return total, nil
}

// InvoiceRef is the reference of tenantID's statement of month m at the
// provider.
func InvoiceRef(tenantID, month string) string { return "tollgate-" + tenantID + "-" + month }
