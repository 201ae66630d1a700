package stripe_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
	"github.com/tollgate/tollgate/internal/testenv/stripetest"
	"github.com/tollgate/tollgate/internal/usage"
)

// TestCloseWithoutStripeStillIssuesInvoices: a month closed by a process
// without a Stripe key (the CLI run from a shell without it) records each
// linked tenant's invoice, pending, and sends nothing; a process with the
// key pushes it later.
func TestCloseWithoutStripeStillIssuesInvoices(t *testing.T) {
	r := newRig(t, billing.ModeFinalize)
	ctx := context.Background()
	pro := fixture.Plan(t, r.db, plans.Plan{Name: "pro", BaseFeeMinor: 4900})
	acme := r.linkedTenant("acme", pro)
	r.tenant("globex", pro) // no billing account: no invoice

	off := billing.NewInvoicing(r.db, billing.InvoicingConfig{Log: slog.New(slog.DiscardHandler)}, r.clock.Now)
	r.clock.Set(time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC))
	res, err := billing.NewOps(r.db, r.clock.Now).WithInvoicing(off).CloseMonth(ctx, audit.CLI, october, nil)
	testenv.Must(t, err)
	if res.Statements != 2 || res.InvoicesIssued != 1 || res.Invoices != nil {
		t.Errorf("close without a provider: %d statements, %d invoices issued, push %+v; want 2, 1, none", res.Statements,
			res.InvoicesIssued, res.Invoices)
	}
	if n := len(r.stripe.Requests()); n != 0 {
		t.Errorf("%d requests reached Stripe from a close without a key", n)
	}
	if rec := r.invoiceOf(acme); rec.PushState != billing.PushPending || rec.CustomerID != "cus_acme" || rec.TotalMinor != 4900 {
		t.Errorf("acme's invoice %+v, want pending to cus_acme for 4900", rec)
	}
	r.wantDifferences(1, "the push pending")

	r.wantPushedTo("cus_acme", 4900, false, "by a process with the key")
	r.wantDifferences(0, "after the push")
}

// TestMonthClosedWithoutInvoicesIsReconciledAndIssued: a month closed
// before closes issued invoices without a provider has no invoice for a
// tenant linked at the close; the reconciliation and the metric name it,
// and issuing the month's missing invoices (audited once, idempotent)
// issues it to the tenant's customer, while a tenant linked only after
// the close gets none.
func TestMonthClosedWithoutInvoicesIsReconciledAndIssued(t *testing.T) {
	r := newRig(t, billing.ModeFinalize)
	ctx := context.Background()
	pro := fixture.Plan(t, r.db, plans.Plan{Name: "pro", BaseFeeMinor: 4900})
	acme := r.linkedTenant("acme", pro)
	globex := r.tenant("globex", pro)
	r.tenant("initech", pro)
	r.stripe.Down(503)
	r.closeOctober()
	r.stripe.Down(0)
	// As a close without a provider left it before: no invoice at all.
	_, err := r.db.Exec(ctx, `DELETE FROM invoices`)
	testenv.Must(t, err)
	r.clock.Advance(time.Hour)
	r.link(globex, billing.LinkInput{CustomerID: "cus_globex"})

	rec, err := r.inv.Reconcile(ctx, october)
	testenv.Must(t, err)
	for _, c := range rec {
		want := 0
		if c.TenantID == acme.ID {
			want = 1
		}
		if len(c.Differences) != want || want == 1 && !strings.Contains(c.Differences[0], "no invoice") {
			t.Errorf("%s reconciles with %v, want %d differences", c.TenantName, c.Differences, want)
		}
	}
	r.wantDifferences(1, "acme's invoice never issued")

	res, err := r.inv.IssueMissing(ctx, audit.CLI, october)
	testenv.Must(t, err)
	if want := []string{billing.InvoiceRef(acme.ID, "2026-10")}; !slices.Equal(res.Issued, want) {
		t.Errorf("issued %v, want %v", res.Issued, want)
	}
	again, err := r.inv.IssueMissing(ctx, audit.CLI, october)
	if err != nil || len(again.Issued) != 0 {
		t.Errorf("issuing again: %+v, %v; want nothing issued", again, err)
	}
	if n := r.count(`SELECT count(*) FROM audit_log WHERE action = 'invoice.issue' AND target_id = '2026-10'`); n != 1 {
		t.Errorf("%d invoice.issue entries, want 1", n)
	}
	november := usage.MonthOf(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	if _, err := r.inv.IssueMissing(ctx, audit.CLI, november); tollgate.ErrorCode(err) != tollgate.ECONFLICT {
		t.Errorf("issuing an open month's invoices: %v, want ECONFLICT", err)
	}

	r.wantPushedTo("cus_acme", 4900, false, "after issuing")
	r.wantDifferences(0, "after issuing and pushing")
}

// TestMissingCustomerIsRetriedAndRelinked: an invoice to a customer
// Stripe does not have (a mistyped ID, or a key of another account or
// mode, which an operator fixes for every invoice at once) stays pending,
// retried with backoff, is reconciled as a difference, and no longer
// holds the tenant to the customer; relinked and re-targeted, it is
// pushed to the right customer with keys of its own.
func TestMissingCustomerIsRetriedAndRelinked(t *testing.T) {
	r, f := newRigViaRefuser(t, billing.ModeFinalize)
	ctx := context.Background()
	pro := fixture.Plan(t, r.db, plans.Plan{Name: "pro", BaseFeeMinor: 4900})
	acme := r.tenant("acme", pro)
	r.link(acme, billing.LinkInput{CustomerID: "cus_tyop"})
	f.set(refusing("/v1/invoices", noSuchCustomer("cus_tyop")))
	res := r.closeOctober()
	if res.Invoices.Failed != 1 || res.Invoices.Refused != 0 || res.Invoices.Pending != 1 {
		t.Errorf("close with the customer unknown to Stripe: %+v, want 1 failed, retried", res.Invoices)
	}
	rec := r.invoiceOf(acme)
	if rec.PushState != billing.PushPending || !strings.Contains(rec.LastError, "404") {
		t.Errorf("acme's invoice %s (%q), want pending with the 404", rec.PushState, rec.LastError)
	}
	before := len(r.stripe.Requests())
	if p, err := r.inv.Push(ctx, false); err != nil || p.Pushed+p.Failed != 0 {
		t.Errorf("push within the backoff: %+v, %v; want nothing tried", p, err)
	}
	if n := len(r.stripe.Requests()) - before; n != 0 {
		t.Errorf("%d requests within the backoff, want none", n)
	}
	r.clock.Advance(2 * time.Hour)
	if p, err := r.inv.Push(ctx, false); err != nil || p.Failed != 1 || p.Refused != 0 {
		t.Errorf("push after the backoff: %+v, %v; want it tried again", p, err)
	}
	if n, err := r.inv.FailedPushes(ctx); err != nil || n != 0 {
		t.Errorf("failed pushes %d, %v; want 0", n, err)
	}
	r.wantDifferences(1, "the pending push")
	r.wantReconciled("push pending", "no such customer")

	f.set(nil)
	if _, err := r.inv.LinkAccount(ctx, audit.CLI, acme.ID, billing.LinkInput{CustomerID: "cus_typo"}); err != nil {
		t.Fatalf("relinking a tenant whose invoice was refused: %v", err)
	}
	got, err := r.inv.Retarget(ctx, audit.CLI, acme.ID, october)
	testenv.Must(t, err)
	if got.PushState != billing.PushPending || got.CustomerID != "cus_typo" || got.LastError != "" {
		t.Errorf("re-targeted invoice %+v, want pending to cus_typo", got)
	}
	if n := r.count(`SELECT count(*) FROM audit_log WHERE action = 'invoice.retarget' AND target_id = $1`, got.Ref); n != 1 {
		t.Errorf("%d invoice.retarget entries, want 1", n)
	}
	if p, err := r.inv.Push(ctx, false); err != nil || p.Pushed != 1 {
		t.Fatalf("push after the retarget: %+v, %v", p, err)
	}
	made := creates(r.stripe, "/v1/invoices")
	if len(made) != 1 || made[0].Form.Get("customer") != "cus_typo" || made[0].IdempotencyKey != got.Ref+"/g1/invoice" {
		t.Errorf("invoices made %+v, want one to cus_typo keyed %s/g1/invoice", made, got.Ref)
	}
	r.wantReconciled()
	if _, err := r.inv.Retarget(ctx, audit.CLI, acme.ID, october); tollgate.ErrorCode(err) != tollgate.ECONFLICT {
		t.Errorf("re-targeting a pushed invoice: %v, want ECONFLICT", err)
	}
}

// TestPushRetriesWhatStripeMayAnswerOtherwise: a refused key (401, 403),
// a conflict (409) and too many requests (429) are the deployment's or
// the moment's, not the invoice's: the invoice stays pending.
func TestPushRetriesWhatStripeMayAnswerOtherwise(t *testing.T) {
	r := newRig(t, billing.ModeFinalize)
	ctx := context.Background()
	acme := r.acme()
	r.stripe.Down(401)
	r.closeOctober()
	for _, status := range []int{403, 409, 429} {
		r.stripe.Down(status)
		if p, err := r.inv.Push(ctx, true); err != nil || p.Failed != 1 || p.Refused != 0 || p.Pending != 1 {
			t.Errorf("push answered %d: %+v, %v; want it failed and pending", status, p, err)
		}
	}
	if rec := r.invoiceOf(acme); rec.PushState != billing.PushPending || rec.PushAttempts != 4 {
		t.Errorf("acme's invoice %s after %d attempts, want pending after 4", rec.PushState, rec.PushAttempts)
	}
}

// TestBillOutsideClosesAnUnpushableInvoice: an invoice Stripe cannot take
// (a BHD amount not ending in 0) fails again when re-targeted; closed out
// as billed outside Tollgate, with a note, it is never pushed and no
// longer a difference, and it cannot be closed out or re-targeted again.
func TestBillOutsideClosesAnUnpushableInvoice(t *testing.T) {
	r := newRig(t, billing.ModeFinalize)
	ctx := context.Background()
	manama := r.manama()
	r.closeOctober()
	if _, err := r.inv.Retarget(ctx, audit.CLI, manama.ID, october); err != nil {
		t.Fatal(err)
	}
	if p, err := r.inv.Push(ctx, false); err != nil || p.Refused != 1 {
		t.Errorf("pushing the re-targeted BHD invoice: %+v, %v; want it refused again", p, err)
	}
	got, err := r.inv.BillOutside(ctx, audit.CLI, manama.ID, october, "  invoiced by hand, INV-2026-118  ")
	testenv.Must(t, err)
	if got.PushState != billing.PushBilledOutside {
		t.Errorf("invoice closed out: %s, want billed_outside", got.PushState)
	}
	var note string
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT after->>'note' FROM audit_log WHERE action = 'invoice.bill_outside' AND target_id = $1`,
		got.Ref).Scan(&note))
	if note != "invoiced by hand, INV-2026-118" {
		t.Errorf("the audit entry's note %q", note)
	}
	before := len(r.stripe.Requests())
	if p, err := r.inv.Push(ctx, true); err != nil || p.Pushed+p.Failed != 0 || len(r.stripe.Requests()) != before {
		t.Errorf("push after closing it out: %+v, %v", p, err)
	}
	r.wantReconciled()
	r.wantDifferences(0, "the invoice closed out")
	for name, change := range map[string]func() error{
		"close out again": func() error { _, err := r.inv.BillOutside(ctx, audit.CLI, manama.ID, october, ""); return err },
		"retarget":        func() error { _, err := r.inv.Retarget(ctx, audit.CLI, manama.ID, october); return err },
	} {
		if err := change(); tollgate.ErrorCode(err) != tollgate.ECONFLICT {
			t.Errorf("%s: %v, want ECONFLICT", name, err)
		}
	}
	if _, err := r.inv.BillOutside(ctx, audit.CLI, manama.ID, usage.MonthOf(time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)), ""); tollgate.ErrorCode(err) != tollgate.ENOTFOUND {
		t.Errorf("closing out a month without an invoice: %v, want ENOTFOUND", err)
	}
}

// TestPaymentLiftsOnlyDunningsSuspension: a payment resumes a tenant only
// while dunning's suspension is the current one: not after an operator
// resumed the tenant and suspended it again, nor after an operator
// suspended it over dunning's suspension.
func TestPaymentLiftsOnlyDunningsSuspension(t *testing.T) {
	r := newRig(t, billing.ModeFinalize)
	ctx := context.Background()
	acme, globex, byCustomer := r.twoFailing("acme", "globex")
	r.dunAfterGrace(2, "both")
	op := tenants.NewOps(r.db, nil)
	operator := audit.Actor{Name: "ops@example.com", Operator: true}
	_, err := op.Resume(ctx, operator, acme.ID) // the customer promised to pay
	testenv.Must(t, err)
	_, err = op.Suspend(ctx, operator, acme.ID) // then abuse
	testenv.Must(t, err)
	_, err = op.Suspend(ctx, operator, globex.ID) // abuse, while dunning's suspension held
	testenv.Must(t, err)
	if n, err := r.inv.Dunning(ctx); err != nil || n != 0 {
		t.Errorf("dunning again: %d, %v; want nothing suspended", n, err)
	}

	r.invoiceEvent("evt_paid_acme", "invoice.paid", byCustomer["cus_acme"])
	r.invoiceEvent("evt_paid_globex", "invoice.paid", byCustomer["cus_globex"])
	for _, tn := range []tenants.Tenant{acme, globex} {
		r.wantStatus(tn, tenants.StatusSuspended, "after its invoice was paid (the operator's suspension kept)")
	}
	if n := r.count(`SELECT count(*) FROM audit_log WHERE action = 'tenant.resume' AND actor = 'stripe'`); n != 0 {
		t.Errorf("%d resumes by stripe, want none", n)
	}
}

// TestTopUpRefusedByStripe: a top-up whose checkout Stripe refuses is
// refused as Stripe's refusal says: for a URL, 422 naming that URL's
// field, not the price; for the price, 422 naming amount_minor; for the
// plan's currency, or a customer Stripe does not have, 409; for nothing
// of the request's (the account's settings), or with Stripe down, 503.
// Each top-up stays, cancelled, and its cancellation is audited beside
// its opening.
func TestTopUpRefusedByStripe(t *testing.T) {
	r, f := newRigViaRefuser(t, billing.ModeFinalize)
	ctx := context.Background()
	acme := r.acme()
	in := billing.TopUpInput{Units: 10, AmountMinor: 20, SuccessURL: "https://console.example/ok", CancelURL: "https://console.example/back"}
	cases := []struct {
		name                string
		refusal             refusal // of the checkout; none: Stripe is down
		wantCode, wantField string
	}{
		{"success URL", refusal{400, "url_invalid", "success_url", "Not a valid URL"}, tollgate.EINVALID, "success_url"},
		{"cancel URL", refusal{400, "url_invalid", "cancel_url", "Not a valid URL"}, tollgate.EINVALID, "cancel_url"},
		{"currency", refusal{400, "", "line_items[0][price_data][currency]", "Invalid currency"}, tollgate.ECONFLICT, ""},
		{"account", refusal{400, "", "", "Your account cannot currently make live charges."}, tollgate.EUNAVAILABLE, ""},
		{"price", refusal{400, "amount_too_small", "line_items[0][price_data][unit_amount]", "too small"}, tollgate.EINVALID, "amount_minor"},
		{"customer", noSuchCustomer("cus_acme"), tollgate.ECONFLICT, ""},
		{"Stripe down", refusal{}, tollgate.EUNAVAILABLE, ""},
	}
	for _, c := range cases {
		if c.refusal.status != 0 {
			f.set(refusing("/v1/checkout/sessions", c.refusal))
		} else {
			r.stripe.Down(503)
		}
		_, err := r.inv.OpenTopUp(ctx, audit.CLI, acme.ID, in)
		f.set(nil)
		r.stripe.Down(0)
		var te *tollgate.Error
		if !errors.As(err, &te) || te.Code != c.wantCode {
			t.Errorf("checkout refused for the %s: %v, want %s", c.name, err, c.wantCode)
			continue
		}
		if c.wantField != "" && te.Fields[c.wantField] == "" || c.wantField != "amount_minor" && te.Fields["amount_minor"] != "" {
			t.Errorf("checkout refused for the %s: fields %v, want %q named, and amount_minor only for the price", c.name, te.Fields, c.wantField)
		}
	}
	if n := r.count(`SELECT count(*) FROM credit_topups WHERE tenant_id = $1 AND status = 'cancelled'`, acme.ID); n != len(cases) {
		t.Errorf("%d cancelled top-ups, want %d", n, len(cases))
	}
	if n := r.count(`SELECT count(*) FROM audit_log o JOIN audit_log c ON c.target_id = o.target_id
		WHERE o.action = 'credits.topup' AND c.action = 'credits.topup_cancel' AND c.after->>'status' = 'cancelled'
		AND c.after->>'reason' LIKE '%did not open the checkout%'`); n != len(cases) {
		t.Errorf("%d top-ups opened and cancelled in the audit log, want %d", n, len(cases))
	}
}

// TestSendModeLeavesTheEmailToThePush: in send mode the invoice is
// finalized without automatic advancement, which for a send_invoice
// invoice would have Stripe email it too, and then sent once; in
// finalize mode it is finalized with it, so that Stripe charges it.
func TestSendModeLeavesTheEmailToThePush(t *testing.T) {
	for mode, want := range map[billing.InvoiceMode]string{billing.ModeSend: "false", billing.ModeFinalize: "true"} {
		t.Run(string(mode), func(t *testing.T) {
			r := newRig(t, mode)
			r.acme()
			r.closeOctober()
			var finalized []string
			for _, q := range r.stripe.Requests() {
				if q.Method == "POST" && strings.HasSuffix(q.Path, "/finalize") {
					finalized = append(finalized, q.Form.Get("auto_advance"))
				}
			}
			if !slices.Equal(finalized, []string{want}) {
				t.Errorf("finalized with auto_advance %v, want [%s]", finalized, want)
			}
		})
	}
}

// TestDraftEditedOrDeletedAtStripe: Stripe's invoice.finalized records
// the total of a draft an operator edited there, which the
// reconciliation shows; invoice.deleted makes the push failed, and the
// invoice, re-targeted to the tenant's new customer, is pushed there as a
// new draft. An event about the draft left at the earlier customer,
// which carries the same reference, changes nothing.
func TestDraftEditedOrDeletedAtStripe(t *testing.T) {
	r := newRig(t, billing.ModeDraft)
	ctx := context.Background()
	acme := r.acme()
	r.closeOctober()
	draft := r.stripe.Invoices()[0]

	edited := draft
	edited.Total = 5400
	r.invoiceEvent("evt_finalized", "invoice.finalized", edited)
	rec := r.invoiceOf(acme)
	if rec.ProviderTotalMinor == nil || *rec.ProviderTotalMinor != 5400 || rec.ProviderStatus != "open" {
		t.Errorf("after invoice.finalized: %+v, want Stripe's total 5400, open", rec)
	}
	r.wantReconciled("5400")

	r.invoiceEvent("evt_deleted", "invoice.deleted", draft)
	if rec := r.invoiceOf(acme); rec.PushState != billing.PushFailed || !strings.Contains(rec.LastError, "deleted") {
		t.Errorf("after invoice.deleted: %s (%q), want failed", rec.PushState, rec.LastError)
	}
	r.link(acme, billing.LinkInput{CustomerID: "cus_acmenew"})
	if _, err := r.inv.Retarget(ctx, audit.CLI, acme.ID, october); err != nil {
		t.Fatal(err)
	}
	if res, err := r.deliver(stripetest.InvoiceEvent("evt_old_paid", "invoice.paid", draft, r.clock.Now())); err != nil || !res.Unknown {
		t.Errorf("invoice.paid of the draft at the earlier customer: %+v, %v; want unknown", res, err)
	}
	if p, err := r.inv.Push(ctx, false); err != nil || p.Pushed != 1 {
		t.Fatalf("push after the retarget: %+v, %v", p, err)
	}
	rec = r.invoiceOf(acme)
	made := r.stripe.Invoices()
	if len(made) != 2 || made[1].Customer != "cus_acmenew" || rec.ProviderInvoiceID != made[1].ID || rec.PaymentStatus != "unpaid" ||
		rec.ProviderTotalMinor == nil || *rec.ProviderTotalMinor != 4900 {
		t.Errorf("record %+v with invoices at Stripe %+v, want a second draft of 4900 at cus_acmenew, unpaid", rec, made)
	}
}

// TestDraftLeftByAPushInDraftMode: an invoice pushed by a process in
// draft mode (an operator's shell without the deployment's
// TOLLGATE_INVOICE_MODE) is a draft at Stripe that agrees with the
// statement to the cent. In draft mode that is what is pushed, and no
// difference; to a process that pushes in finalize or send mode it is a
// difference, in the reconciliation and its metric, until Stripe's
// invoice.finalized says an operator finalized it there.
func TestDraftLeftByAPushInDraftMode(t *testing.T) {
	r := newRig(t, billing.ModeDraft)
	acme := r.acme()
	r.closeOctober()
	if rec := r.invoiceOf(acme); rec.PushState != billing.PushPushed || rec.ProviderStatus != "draft" {
		t.Fatalf("pushed in draft mode: %+v, want pushed, a draft", rec)
	}
	r.wantReconciled()
	r.wantDifferences(0, "a draft, pushed in draft mode, seen in draft mode")

	for _, mode := range []billing.InvoiceMode{billing.ModeFinalize, billing.ModeSend} {
		r.mode = mode
		r.connect(r.stripe.URL)
		r.wantReconciled("still a draft", string(mode)+" mode")
		r.wantDifferences(1, "a draft, pushed in draft mode, seen in "+string(mode)+" mode")
	}

	r.invoiceEvent("evt_finalized_by_hand", "invoice.finalized", r.stripe.Invoices()[0])
	r.wantReconciled()
	r.wantDifferences(0, "the draft finalized at Stripe")
}
