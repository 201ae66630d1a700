// Package stripe is billing's payment provider on Stripe: customers,
// invoices pushed exactly once (found by their reference, created with
// idempotency keys derived from the statement), hosted checkout for
// credit top-ups, and webhook events verified by their Stripe-Signature.
// It speaks to Stripe through Stripe's Go library and holds nothing of
// its own; package billing decides and records.
package stripe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	stripeapi "github.com/stripe/stripe-go/v84"
	"github.com/stripe/stripe-go/v84/webhook"

	"github.com/tollgate/tollgate/internal/billing"
)

// DefaultAPIURL is Stripe's API.
const DefaultAPIURL = "https://api.stripe.com"

// Config is how to reach Stripe.
type Config struct {
	// SecretKey is the API key (sk_live_…, sk_test_… or a restricted
	// rk_…). It is sent to Stripe and nowhere else.
	SecretKey string
	// WebhookSecret verifies webhooks' Stripe-Signature (whsec_…).
	WebhookSecret string
	// APIURL replaces DefaultAPIURL (tests point it at a local Stripe).
	APIURL string
	// Tolerance is how old a webhook's signature may be (5 minutes when
	// 0).
	Tolerance time.Duration
	// NetworkRetries is how many times the library retries a request that
	// failed on the network or with a 5xx, with the same idempotency key,
	// before the push records the failure and retries later.
	NetworkRetries int64
	// HTTPClient makes the requests (a client with a 30 s timeout when
	// nil).
	HTTPClient *http.Client
}

var (
	secretKeyForm     = regexp.MustCompile(`^(sk|rk)_(test|live)_[0-9A-Za-z]{8,247}$`)
	webhookSecretForm = regexp.MustCompile(`^whsec_[0-9A-Za-z+/=]{8,250}$`)
)

// Validate names the setting of each malformed field (by its
// environment variable), never showing a secret's value.
func (c Config) Validate() map[string]string {
	f := map[string]string{}
	if !secretKeyForm.MatchString(c.SecretKey) {
		f["TOLLGATE_STRIPE_SECRET_KEY"] = "must be a Stripe secret key (sk_live_…, sk_test_…, or a restricted rk_…)"
	}
	if !webhookSecretForm.MatchString(c.WebhookSecret) {
		f["TOLLGATE_STRIPE_WEBHOOK_SECRET"] = "must be the webhook endpoint's signing secret (whsec_…)"
	}
	if c.APIURL != "" {
		u, err := url.Parse(c.APIURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Path != "" && u.Path != "/" {
			f["TOLLGATE_STRIPE_API_URL"] = "must be a base URL such as https://api.stripe.com"
		}
	}
	return f
}

// Provider is billing.Provider on Stripe. Safe for concurrent use.
type Provider struct {
	client    *stripeapi.Client
	secret    string
	tolerance time.Duration
}

var _ billing.Provider = (*Provider)(nil)

// New returns the provider for cfg (which Validate accepts). Every
// backend of the library points at cfg.APIURL, so that nothing it does
// reaches another host.
func New(cfg Config) *Provider {
	base := strings.TrimSuffix(cfg.APIURL, "/")
	if base == "" {
		base = DefaultAPIURL
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	backend := stripeapi.GetBackendWithConfig(stripeapi.APIBackend, &stripeapi.BackendConfig{
		URL: stripeapi.String(base), HTTPClient: hc, MaxNetworkRetries: stripeapi.Int64(cfg.NetworkRetries),
		EnableTelemetry: stripeapi.Bool(false),
		LeveledLogger:   &stripeapi.LeveledLogger{Level: stripeapi.LevelNull},
	})
	backends := &stripeapi.Backends{API: backend, Connect: backend, Uploads: backend, MeterEvents: backend}
	tolerance := cfg.Tolerance
	if tolerance <= 0 {
		tolerance = webhook.DefaultTolerance
	}
	return &Provider{client: stripeapi.NewClient(cfg.SecretKey, stripeapi.WithBackends(backends)),
		secret: cfg.WebhookSecret, tolerance: tolerance}
}

// The metadata keys Tollgate sets on what it creates at Stripe.
const (
	metaRef    = "tollgate_ref"
	metaLine   = "tollgate_line"
	metaTenant = "tollgate_tenant_id"
	metaMonth  = "tollgate_month"
	metaTopUp  = "tollgate_topup"
	// metaGeneration is the invoice's generation (billing.Invoice's):
	// events about an invoice of an earlier one are told apart by it.
	metaGeneration = "tollgate_generation"
	// metaSent marks an invoice the push has emailed (ModeSend).
	metaSent = "tollgate_sent"
)

// idempotent returns params' base with key as its idempotency key.
func idempotent(key string) stripeapi.Params {
	return stripeapi.Params{IdempotencyKey: stripeapi.String(key)}
}

// CreateCustomer makes a customer for a tenant, once per request (see
// customerKey): a retry of the same request answers with the customer
// the first made, and another request (another email or name, or a
// create after the tenant was linked to a customer) makes another one.
func (p *Provider) CreateCustomer(ctx context.Context, in billing.CustomerInput) (string, error) {
	params := &stripeapi.CustomerCreateParams{Params: idempotent(customerKey(in)),
		Name: stripeapi.String(in.TenantName), Metadata: map[string]string{metaTenant: in.TenantID}}
	if in.Email != "" {
		params.Email = stripeapi.String(in.Email)
	}
	c, err := p.client.V1Customers.Create(ctx, params)
	if err != nil {
		return "", describe("create customer", err)
	}
	return c.ID, nil
}

// customerKey is the idempotency key of the creation of in's customer:
// the tenant's ID and a hash of the rest of the request, the email and
// the name sent and the customer the tenant was linked to when it was
// asked (in.Replacing). Stripe refuses a key it has seen with other
// parameters (idempotency_error) and answers a key it has seen with the
// same ones with its first answer, for 24 hours: a key of the tenant
// alone refused a create with another email, or after a rename, and
// answered a second create with the customer made by the first, which
// the tenant may have been moved off since. With the parameters and the
// link in the key, a retry (the library's after a timeout, or the
// operator's of a command that failed before the link was recorded) is
// still made once, and any other request is a request of its own.
func customerKey(in billing.CustomerInput) string {
	h := sha256.New()
	for _, part := range []string{in.TenantName, in.Email, in.Replacing} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "tollgate-customer-" + in.TenantID + "-" + hex.EncodeToString(h.Sum(nil)[:12])
}

// PushInvoice finds inv at Stripe by its reference (the customer's
// invoices' metadata), or creates it, then adds each line it does not
// have yet, then finalizes (and sends) it as inv.Mode says. Every
// creating request carries an idempotency key derived from inv.Ref (and
// the line's key), so a push repeated after a timeout or a crash makes
// nothing twice: Stripe answers a repeated key with the first answer,
// and past its memory of keys the lookup finds what was made.
//
// The lines' amounts are converted to Stripe's unit of the currency
// (toStripe) before anything is sent: a line Stripe would refuse (a
// three-decimal amount not ending in 0) fails the push, wrapping
// billing.ErrAmountNotAccepted, with nothing made at Stripe.
//
// In ModeSend an open invoice is emailed once: after sending it, the
// push marks it sent in its metadata, and a later push that finds it
// marked (a retry after our record of the push was lost) does not send
// it again. One that finds it open and unmarked (the push stopped
// between finalizing and sending, or before marking) sends it with the
// same idempotency key, which Stripe answers without a second email for
// 24 hours. The invoice is finalized without automatic advancement in
// this mode: with it, Stripe emails a send_invoice invoice itself when it
// is finalized (as the account's email settings say), and the push's own
// send would be a second email. In ModeFinalize it is finalized with
// automatic advancement, which is what makes Stripe charge it.
//
// An invoice of a later generation (billing.Invoice.Generation, after an
// operator re-targeted it) uses keys of its own: "<ref>/g<n>/…". A draft
// of an earlier generation found at the customer (re-targeted to the
// same one) is reused, its metadata's generation set to inv's first.
//
// A refusal of Stripe's (a 4xx but 401 and 403, the key's; 409, a
// request in flight; 424, a dependency of Stripe's; 429, its rate limit)
// makes the error billing.ErrRefused, and also
// billing.ErrAmountNotAccepted when it names an amount (amountRefusal):
// only the latter fails the push for good, since the others may be the
// deployment's (a key of another account or mode, an account not
// activated) and billing retries them.
func (p *Provider) PushInvoice(ctx context.Context, inv billing.Invoice) (billing.PushedInvoice, error) {
	amounts := make([]int64, len(inv.Lines))
	for i, l := range inv.Lines {
		a, err := toStripe(inv.Currency, l.AmountMinor)
		if err != nil {
			return billing.PushedInvoice{}, fmt.Errorf("line %s: %w", l.Key, err)
		}
		amounts[i] = a
	}
	stem := inv.Ref
	if inv.Generation > 0 {
		stem += "/g" + strconv.Itoa(inv.Generation)
	}
	found, err := p.findInvoice(ctx, inv.CustomerID, inv.Ref)
	if err != nil {
		return billing.PushedInvoice{}, err
	}
	have := map[string]bool{}
	if found == nil {
		params := &stripeapi.InvoiceCreateParams{Params: idempotent(stem + "/invoice"),
			Customer: stripeapi.String(inv.CustomerID), Currency: stripeapi.String(strings.ToLower(inv.Currency)),
			AutoAdvance:                 stripeapi.Bool(false),
			PendingInvoiceItemsBehavior: stripeapi.String("exclude"),
			Description:                 stripeapi.String("Usage of " + inv.Month),
			Metadata: map[string]string{metaRef: inv.Ref, metaTenant: inv.TenantID, metaMonth: inv.Month,
				metaGeneration: strconv.Itoa(inv.Generation)},
		}
		if inv.Mode == billing.ModeSend {
			params.CollectionMethod = stripeapi.String("send_invoice")
			params.DaysUntilDue = stripeapi.Int64(30)
		} else {
			params.CollectionMethod = stripeapi.String("charge_automatically")
		}
		if found, err = p.client.V1Invoices.Create(ctx, params); err != nil {
			return billing.PushedInvoice{}, describe("create invoice", err)
		}
	} else if found.Status == stripeapi.InvoiceStatusDraft {
		// Absent on drafts made before generations were recorded: the
		// first.
		if generation, _ := strconv.Atoi(found.Metadata[metaGeneration]); generation != inv.Generation {
			// A draft of an earlier generation at the same customer (a
			// retarget to it): it becomes this generation's, so that its
			// events (finalized, deleted) are taken for this one's
			// before the push records its ID.
			if found, err = p.client.V1Invoices.Update(ctx, found.ID, &stripeapi.InvoiceUpdateParams{
				Params: idempotent(stem + "/generation"), Metadata: map[string]string{metaGeneration: strconv.Itoa(inv.Generation)}}); err != nil {
				return billing.PushedInvoice{}, describe("mark invoice's generation", err)
			}
		}
		for line, err := range p.client.V1Invoices.ListLines(ctx, &stripeapi.InvoiceListLinesParams{Invoice: stripeapi.String(found.ID)}) {
			if err != nil {
				return billing.PushedInvoice{}, describe("list invoice lines", err)
			}
			have[line.Metadata[metaLine]] = true
		}
	}
	if found.Status == "" || found.Status == stripeapi.InvoiceStatusDraft {
		for i, l := range inv.Lines {
			if have[l.Key] {
				continue
			}
			_, err := p.client.V1InvoiceItems.Create(ctx, &stripeapi.InvoiceItemCreateParams{
				Params:   idempotent(stem + "/line/" + l.Key),
				Customer: stripeapi.String(inv.CustomerID), Invoice: stripeapi.String(found.ID),
				Amount: stripeapi.Int64(amounts[i]), Currency: stripeapi.String(strings.ToLower(inv.Currency)),
				Description: stripeapi.String(l.Description),
				// A coupon of the customer's at Stripe must not move the
				// invoice away from the statement.
				Discountable: stripeapi.Bool(false),
				Metadata:     map[string]string{metaRef: inv.Ref, metaLine: l.Key, "units": strconv.FormatInt(l.Units, 10)},
			})
			if err != nil {
				return billing.PushedInvoice{}, describe("add invoice line "+l.Key, err)
			}
		}
		if inv.Mode != billing.ModeDraft {
			if found, err = p.client.V1Invoices.FinalizeInvoice(ctx, found.ID, &stripeapi.InvoiceFinalizeInvoiceParams{
				Params: idempotent(stem + "/finalize"), AutoAdvance: stripeapi.Bool(inv.Mode == billing.ModeFinalize)}); err != nil {
				return billing.PushedInvoice{}, describe("finalize invoice", err)
			}
		}
	}
	if inv.Mode == billing.ModeSend && found.Status == stripeapi.InvoiceStatusOpen && found.Metadata[metaSent] == "" {
		if found, err = p.client.V1Invoices.SendInvoice(ctx, found.ID, &stripeapi.InvoiceSendInvoiceParams{
			Params: idempotent(stem + "/send")}); err != nil {
			return billing.PushedInvoice{}, describe("send invoice", err)
		}
		if found, err = p.client.V1Invoices.Update(ctx, found.ID, &stripeapi.InvoiceUpdateParams{
			Params: idempotent(stem + "/sent"), Metadata: map[string]string{metaSent: "true"}}); err != nil {
			return billing.PushedInvoice{}, describe("mark invoice sent", err)
		}
	}
	if inv.Mode == billing.ModeDraft {
		// The draft's total, with every line added.
		if found, err = p.client.V1Invoices.Retrieve(ctx, found.ID, nil); err != nil {
			return billing.PushedInvoice{}, describe("read invoice", err)
		}
	}
	total, err := fromStripe(string(found.Currency), found.Total)
	if err != nil {
		return billing.PushedInvoice{}, err
	}
	return billing.PushedInvoice{ID: found.ID, Status: string(found.Status), TotalMinor: total,
		Currency: strings.ToUpper(string(found.Currency))}, nil
}

// findInvoice returns the customer's invoice whose metadata names ref,
// or nil. Stripe lists the newest first, so a statement's invoice is
// usually on the first page; the search reads every page rather than
// stop early, since missing an invoice that exists would make a second
// one once Stripe has forgotten the idempotency keys.
func (p *Provider) findInvoice(ctx context.Context, customerID, ref string) (*stripeapi.Invoice, error) {
	params := &stripeapi.InvoiceListParams{Customer: stripeapi.String(customerID)}
	params.Limit = stripeapi.Int64(100)
	for in, err := range p.client.V1Invoices.List(ctx, params) {
		if err != nil {
			return nil, describe("look the invoice up", err)
		}
		if in.Metadata[metaRef] == ref {
			return in, nil
		}
	}
	return nil, nil
}

// FindInvoices returns the invoices Stripe holds at the customer whose
// metadata names ref, of every generation, newest first: what an
// operator must settle there before billing the statement another way.
func (p *Provider) FindInvoices(ctx context.Context, customerID, ref string) ([]billing.PushedInvoice, error) {
	params := &stripeapi.InvoiceListParams{Customer: stripeapi.String(customerID)}
	params.Limit = stripeapi.Int64(100)
	var found []billing.PushedInvoice
	for in, err := range p.client.V1Invoices.List(ctx, params) {
		if err != nil {
			return nil, describe("look the invoice up", err)
		}
		if in.Metadata[metaRef] != ref {
			continue
		}
		total, err := fromStripe(string(in.Currency), in.Total)
		if err != nil {
			return nil, err
		}
		found = append(found, billing.PushedInvoice{ID: in.ID, Status: string(in.Status), TotalMinor: total,
			Currency: strings.ToUpper(string(in.Currency))})
	}
	return found, nil
}

// OpenCheckout opens a Checkout session paying for a top-up, once per
// top-up (its idempotency key). The session's metadata names the top-up,
// which the checkout.session.completed event brings back. The price is
// converted to Stripe's unit as an invoice's lines are (toStripe). A
// refusal of Stripe's wraps billing.ErrRefused, and
// billing.ErrNoSuchCustomer when the customer is missing
// (resource_missing naming the customer) or billing.ErrAmountNotAccepted
// when it names the amount (amountRefusal); one naming another parameter
// of the input (the URLs, the currency) is a billing.FieldRefusal naming
// the input's field.
func (p *Provider) OpenCheckout(ctx context.Context, in billing.CheckoutInput) (billing.CheckoutSession, error) {
	amount, err := toStripe(in.Currency, in.AmountMinor)
	if err != nil {
		return billing.CheckoutSession{}, err
	}
	meta := map[string]string{metaTopUp: in.TopUpID, metaTenant: in.TenantID}
	s, err := p.client.V1CheckoutSessions.Create(ctx, &stripeapi.CheckoutSessionCreateParams{
		Params: idempotent("tollgate-topup-" + in.TopUpID), Mode: stripeapi.String("payment"),
		Customer: stripeapi.String(in.CustomerID), ClientReferenceID: stripeapi.String(in.TopUpID),
		SuccessURL: stripeapi.String(in.SuccessURL), CancelURL: stripeapi.String(in.CancelURL),
		LineItems: []*stripeapi.CheckoutSessionCreateLineItemParams{{
			Quantity: stripeapi.Int64(1),
			PriceData: &stripeapi.CheckoutSessionCreateLineItemPriceDataParams{
				Currency: stripeapi.String(strings.ToLower(in.Currency)), UnitAmount: stripeapi.Int64(amount),
				ProductData: &stripeapi.CheckoutSessionCreateLineItemPriceDataProductDataParams{
					Name: stripeapi.String(fmt.Sprintf("%d prepaid units", in.Units))},
			},
		}},
		Metadata: meta,
	})
	if err != nil {
		err = describe("open checkout", err)
		var pe *providerError
		if errors.As(err, &pe) && pe.refused {
			switch {
			case pe.also != nil:
			case pe.param == "success_url" || pe.param == "cancel_url":
				pe.field = pe.param
			case strings.HasSuffix(pe.param, "currency]") || pe.param == "currency":
				pe.field = "currency"
			}
		}
		return billing.CheckoutSession{}, err
	}
	return billing.CheckoutSession{ID: s.ID, URL: s.URL}, nil
}

// event is what Tollgate reads of a Stripe event.
type event struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Created int64  `json:"created"`
	Data    struct {
		Object struct {
			ID            string            `json:"id"`
			Customer      json.RawMessage   `json:"customer"`
			Total         int64             `json:"total"`
			AmountPaid    int64             `json:"amount_paid"`
			Currency      string            `json:"currency"`
			PaymentStatus string            `json:"payment_status"`
			Metadata      map[string]string `json:"metadata"`
		} `json:"object"`
	} `json:"data"`
}

// ParseEvent verifies payload's Stripe-Signature header with the webhook
// secret and the tolerance, and reads the event. It reads only the
// fields Tollgate uses, so any API version's events parse; an invoice's
// amounts are converted from Stripe's unit (fromStripe).
func (p *Provider) ParseEvent(payload []byte, signature string) (billing.ProviderEvent, error) {
	if err := webhook.ValidatePayloadWithTolerance(payload, signature, p.secret, p.tolerance); err != nil {
		return billing.ProviderEvent{}, fmt.Errorf("%w: %v", billing.ErrBadSignature, err)
	}
	var e event
	if err := json.Unmarshal(payload, &e); err != nil || e.ID == "" || e.Type == "" {
		return billing.ProviderEvent{}, fmt.Errorf("stripe: event: not a Stripe event")
	}
	o := e.Data.Object
	ev := billing.ProviderEvent{ID: e.ID, Type: e.Type, At: time.Unix(e.Created, 0).UTC(), CustomerID: idOf(o.Customer)}
	switch e.Type {
	case "invoice.paid", "invoice.payment_failed", "invoice.voided", "invoice.finalized", "invoice.deleted":
		ev.Kind = billing.EventKind(e.Type)
		ev.InvoiceID, ev.InvoiceRef = o.ID, o.Metadata[metaRef]
		// Absent on invoices made before generations were recorded: the
		// first.
		ev.Generation, _ = strconv.Atoi(o.Metadata[metaGeneration])
		ev.Currency = strings.ToUpper(o.Currency)
		total, err := fromStripe(o.Currency, o.Total)
		paid, perr := fromStripe(o.Currency, o.AmountPaid)
		switch {
		case (err != nil || perr != nil) && ev.InvoiceRef == "":
			// Not an invoice of Tollgate's (those carry its reference,
			// and their amounts convert): ignored, as any other.
			ev.Kind = billing.EventOther
		case err != nil || perr != nil:
			return billing.ProviderEvent{}, fmt.Errorf("stripe: event %s: %w", e.ID, errors.Join(err, perr))
		}
		ev.TotalMinor, ev.AmountPaidMinor = total, paid
	case "checkout.session.completed", "checkout.session.async_payment_succeeded":
		if o.PaymentStatus == "paid" {
			ev.Kind = billing.EventCheckoutPaid
		}
		ev.SessionID, ev.TopUpID = o.ID, o.Metadata[metaTopUp]
	}
	return ev, nil
}

// idOf reads an expandable field: an ID, or an object with one.
func idOf(raw json.RawMessage) string {
	var id string
	if json.Unmarshal(raw, &id) == nil {
		return id
	}
	var o struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(raw, &o)
	return o.ID
}

// describe says what failed, with Stripe's status, type, code and the
// parameter it names, and keeps the error for errors.As. It leaves out
// Stripe's message and request log address: they may quote part of the
// key, and the text is stored with an invoice whose tenant's users may
// read it. A refusal (refused) makes the error billing.ErrRefused, and
// one naming an amount (amountRefusal) billing.ErrAmountNotAccepted too,
// one of a missing customer (resource_missing naming the customer)
// billing.ErrNoSuchCustomer; any other 404 is a refusal only.
func describe(what string, err error) error {
	var se *stripeapi.Error
	if errors.As(err, &se) {
		msg := fmt.Sprintf("stripe: %s: %d %s", what, se.HTTPStatusCode, se.Type)
		if se.Code != "" {
			msg += " " + string(se.Code)
		}
		if se.Param != "" {
			msg += " (" + se.Param + ")"
		}
		pe := &providerError{msg: msg, err: err, status: se.HTTPStatusCode, code: string(se.Code),
			param: se.Param, refused: refused(se.HTTPStatusCode)}
		switch {
		case !pe.refused:
		case amountRefusal(pe.code, pe.param):
			pe.also = billing.ErrAmountNotAccepted
		case pe.code == "resource_missing" && pe.param == "customer":
			// Only when Stripe names the customer: a 404 of anything
			// else (a draft deleted meanwhile, say) is no reason to move
			// the tenant off its customer.
			pe.also = billing.ErrNoSuchCustomer
		}
		return pe
	}
	return fmt.Errorf("stripe: %s: %w", what, err)
}

// refused reports whether Stripe's answer of HTTP status refused the
// request as it was made: a 4xx but 401 and 403 (the key, which an
// operator fixes for every request at once), 409 (a request with the same
// idempotency key in flight), 424 (a dependency of Stripe's) and 429 (too
// many requests). A refusal may still be the deployment's rather than the
// request's (a key of another account or mode: "no such customer"; an
// account not activated; tax settings missing), so only one naming an
// amount (amountRefusal) fails an invoice's push for good.
func refused(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusConflict, http.StatusFailedDependency, http.StatusTooManyRequests:
		return false
	}
	return status >= 400 && status < 500
}

// amountRefusal reports whether Stripe's error code and param name an
// amount it does not take: amount_too_small, amount_too_large (and any
// other amount_ code), or an amount parameter (amount, unit_amount,
// line_items[0][price_data][unit_amount]). Asked again, Stripe refuses
// the amount again, whatever the deployment.
func amountRefusal(code, param string) bool {
	return strings.HasPrefix(code, "amount_") || param == "amount" || strings.HasSuffix(param, "_amount") ||
		strings.HasSuffix(param, "amount]")
}

// providerError is an error of Stripe's, told without its message. It is
// billing.ErrRefused when refused, and also whatever also is; field, when
// set, is the input's field the refusal names (billing.FieldRefusal).
type providerError struct {
	msg     string
	err     error
	status  int
	code    string
	param   string
	refused bool
	also    error
	field   string
}

func (e *providerError) Error() string { return e.msg }
func (e *providerError) Unwrap() error { return e.err }

// RefusedField names the input's field Stripe refused ("" for none).
func (e *providerError) RefusedField() string {
	if !e.refused {
		return ""
	}
	return e.field
}

// Is makes a refusal billing.ErrRefused (and e.also) to errors.Is.
func (e *providerError) Is(target error) bool {
	return e.refused && (target == billing.ErrRefused || e.also != nil && target == e.also)
}
