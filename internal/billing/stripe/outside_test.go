package stripe_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
	"github.com/tollgate/tollgate/internal/testenv/stripetest"
)

// TestBillOutsideAsksStripeFirst: an invoice left pending by a push whose
// answer was lost may be at Stripe, which charges it: closing it out as
// billed outside is refused, naming what Stripe holds, while Stripe holds
// it (open, or a draft), and while Stripe cannot be asked; once voided
// there it is closed out. A failed invoice is closed out with Stripe
// down.
func TestBillOutsideAsksStripeFirst(t *testing.T) {
	t.Run("open", func(t *testing.T) {
		r := newRig(t, billing.ModeFinalize)
		ctx := context.Background()
		acme := r.acme()
		r.stripe.DropAnswer(func(q stripetest.Request) bool { return strings.HasSuffix(q.Path, "/finalize") })
		r.closeOctober()
		held := r.stripe.Invoices()
		if rec := r.invoiceOf(acme); rec.PushState != billing.PushPending || len(held) != 1 || held[0].Status != "open" {
			t.Fatalf("after a lost finalize answer: %s with %+v at Stripe, want pending and one open invoice", rec.PushState, held)
		}
		_, err := r.inv.BillOutside(ctx, audit.CLI, acme.ID, october, "billed by hand")
		if tollgate.ErrorCode(err) != tollgate.ECONFLICT || !strings.Contains(err.Error(), held[0].ID) || !strings.Contains(err.Error(), "void it") {
			t.Errorf("closing out an invoice Stripe holds open: %v, want ECONFLICT naming %s and saying to void it", err, held[0].ID)
		}

		r.stripe.Down(503)
		if _, err := r.inv.BillOutside(ctx, audit.CLI, acme.ID, october, ""); tollgate.ErrorCode(err) != tollgate.ECONFLICT {
			t.Errorf("closing out a pending invoice with Stripe down: %v, want ECONFLICT", err)
		}
		r.stripe.Down(0)
		off := billing.NewInvoicing(r.db, billing.InvoicingConfig{Log: slog.New(slog.DiscardHandler)}, r.clock.Now)
		if _, err := off.BillOutside(ctx, audit.CLI, acme.ID, october, ""); tollgate.ErrorCode(err) != tollgate.ECONFLICT {
			t.Errorf("closing out a pending invoice with invoicing off: %v, want ECONFLICT", err)
		}
		if rec := r.invoiceOf(acme); rec.PushState != billing.PushPending {
			t.Errorf("after the refusals: %s, want pending", rec.PushState)
		}
		if n := r.count(`SELECT count(*) FROM audit_log WHERE action = 'invoice.bill_outside'`); n != 0 {
			t.Errorf("%d invoice.bill_outside entries, want none", n)
		}

		// Voided at Stripe (its event recorded), it is closed out.
		r.invoiceEvent("evt_voided", "invoice.voided", held[0])
		got, err := r.inv.BillOutside(ctx, audit.CLI, acme.ID, october, "billed by hand")
		if err != nil || got.PushState != billing.PushBilledOutside {
			t.Fatalf("closing out the invoice voided at Stripe: %s, %v; want billed_outside", got.PushState, err)
		}
		r.wantReconciled()
	})

	t.Run("draft", func(t *testing.T) {
		r := newRig(t, billing.ModeDraft)
		acme := r.acme()
		// The push's last request reads the draft back.
		r.stripe.DropAnswer(func(q stripetest.Request) bool {
			return q.Method == "GET" && strings.HasPrefix(q.Path, "/v1/invoices/in_")
		})
		r.closeOctober()
		held := r.stripe.Invoices()
		if rec := r.invoiceOf(acme); rec.PushState != billing.PushPending || len(held) != 1 {
			t.Fatalf("after a lost answer: %s with %+v at Stripe, want pending and a draft", rec.PushState, held)
		}
		_, err := r.inv.BillOutside(context.Background(), audit.CLI, acme.ID, october, "")
		if tollgate.ErrorCode(err) != tollgate.ECONFLICT || !strings.Contains(err.Error(), held[0].ID) || !strings.Contains(err.Error(), "delete it") {
			t.Errorf("closing out an invoice Stripe holds a draft of: %v, want ECONFLICT naming %s and saying to delete it", err, held[0].ID)
		}
	})

	t.Run("failed, Stripe down", func(t *testing.T) {
		r := newRig(t, billing.ModeFinalize)
		manama := r.manama()
		r.closeOctober()
		r.stripe.Down(503)
		got, err := r.inv.BillOutside(context.Background(), audit.CLI, manama.ID, october, "")
		if err != nil || got.PushState != billing.PushBilledOutside {
			t.Errorf("closing out a failed invoice with Stripe down: %s, %v; want billed_outside", got.PushState, err)
		}
	})
}

// TestPaymentOfAnInvoiceBilledOutsideIsADifference: an invoice closed
// out as billed outside Tollgate that Stripe then reports paid was paid
// twice: the reconciliation and the metric show it.
func TestPaymentOfAnInvoiceBilledOutsideIsADifference(t *testing.T) {
	r := newRig(t, billing.ModeFinalize)
	ctx := context.Background()
	manama := r.manama()
	r.closeOctober()
	got, err := r.inv.BillOutside(ctx, audit.CLI, manama.ID, october, "invoiced by hand")
	testenv.Must(t, err)
	// An invoice of the reference made at Stripe by hand, and paid.
	r.invoiceEvent("evt_paid", "invoice.paid", stripetest.Invoice{ID: "in_byhand", Customer: "cus_manama", Currency: "bhd",
		Total: 1010, Metadata: map[string]string{"tollgate_ref": got.Ref}})
	r.wantReconciled("paid")
	r.wantDifferences(1, "the payment of the invoice billed outside")
}

// TestDeploymentRefusalsAreRetried: Stripe's refusals that may be the
// deployment's (a key of another mode, which does not see the customer;
// an account not activated; tax settings missing) leave the invoice
// pending, retried with backoff, the refusal shown as its last error, and
// it is pushed once they are fixed; an amount Stripe refuses fails the
// push for good.
func TestDeploymentRefusalsAreRetried(t *testing.T) {
	r, f := newRigViaRefuser(t, billing.ModeFinalize)
	ctx := context.Background()
	acme := r.acme()
	f.set(refusing("/v1/invoices", refusal{404, "resource_missing", "customer",
		"No such customer: 'cus_acme'; a similar object exists in live mode, but a test mode key was used to make this request."}))
	r.closeOctober()
	for _, c := range []refusal{
		{400, "", "", "Your account cannot currently make live charges."},
		{400, "customer_tax_location_invalid", "customer", "The customer's location is not recognized."},
		{404, "resource_missing", "customer", "No such customer: 'cus_acme'"},
	} {
		f.set(refusing("/v1/invoices", c))
		p, err := r.inv.Push(ctx, true)
		if err != nil || p.Failed != 1 || p.Refused != 0 || p.Pending != 1 {
			t.Errorf("push refused with %d %s: %+v, %v; want it failed, retried", c.status, c.code, p, err)
		}
		rec := r.invoiceOf(acme)
		if rec.PushState != billing.PushPending || !strings.Contains(rec.LastError, fmt.Sprint(c.status)) || !rec.NextPushAt.After(r.clock.Now()) {
			t.Errorf("after %d %s: %s (%q), next push %s; want pending with the refusal, after a backoff", c.status, c.code,
				rec.PushState, rec.LastError, rec.NextPushAt)
		}
	}
	if n, err := r.inv.FailedPushes(ctx); err != nil || n != 0 {
		t.Errorf("failed pushes %d, %v; want 0", n, err)
	}
	// Stripe has no such customer: the tenant may be relinked, and the
	// invoice re-targeted, while it is pending.
	r.link(acme, billing.LinkInput{CustomerID: "cus_acme2"})
	if _, err := r.inv.Retarget(ctx, audit.CLI, acme.ID, october); err != nil {
		t.Fatal(err)
	}
	f.set(nil)
	r.wantPushedTo("cus_acme2", 0, true, "with the deployment fixed")
}

// TestAmountRefusalIsFinal: an amount Stripe refuses fails the push for
// good.
func TestAmountRefusalIsFinal(t *testing.T) {
	r, f := newRigViaRefuser(t, billing.ModeFinalize)
	acme := r.acme()
	f.set(refusing("/v1/invoiceitems", refusal{400, "amount_too_small", "amount", "Amount must be at least 50 cents."}))
	if res := r.closeOctober(); res.Invoices.Refused != 1 || res.Invoices.Pending != 0 {
		t.Errorf("close with the amount refused: %+v, want it refused for good", res.Invoices)
	}
	if rec := r.invoiceOf(acme); rec.PushState != billing.PushFailed || !strings.Contains(rec.LastError, "amount_too_small") {
		t.Errorf("acme's invoice %s (%q), want failed with amount_too_small", rec.PushState, rec.LastError)
	}
}

// TestRetargetAllFailed: every failed invoice is re-targeted at once,
// each audited on its own; one that cannot be (its tenant has no billing
// account) is skipped, saying why.
func TestRetargetAllFailed(t *testing.T) {
	r := newRig(t, billing.ModeDraft)
	ctx := context.Background()
	pro := fixture.Plan(t, r.db, plans.Plan{Name: "pro", BaseFeeMinor: 4900})
	acme, globex, initech := r.linkedTenant("acme", pro), r.linkedTenant("globex", pro), r.linkedTenant("initech", pro)
	r.closeOctober()
	for i, in := range r.stripe.Invoices() {
		r.invoiceEvent(fmt.Sprintf("evt_deleted_%d", i), "invoice.deleted", in)
	}
	if n := r.count(`SELECT count(*) FROM audit_log WHERE action = 'invoice.deleted' AND actor = 'stripe'`); n != 3 {
		t.Errorf("%d invoice.deleted entries by stripe, want 3", n)
	}
	_, err := r.db.Exec(ctx, `DELETE FROM billing_accounts WHERE tenant_id = $1`, initech.ID)
	testenv.Must(t, err)

	res, err := r.inv.RetargetFailed(ctx, audit.CLI, &october)
	testenv.Must(t, err)
	if len(res.Retargeted) != 2 || len(res.Skipped) != 1 || res.Skipped[0].TenantID != initech.ID ||
		!strings.Contains(res.Skipped[0].Error, "billing account") {
		t.Errorf("retarget all failed: %+v, want acme's and globex's re-targeted, initech's skipped for its billing account", res)
	}
	for _, tn := range []string{acme.ID, globex.ID} {
		ref := billing.InvoiceRef(tn, "2026-10")
		if n := r.count(`SELECT count(*) FROM audit_log WHERE action = 'invoice.retarget' AND target_id = $1`, ref); n != 1 {
			t.Errorf("%d invoice.retarget entries of %s, want 1", n, ref)
		}
	}
	if rec := r.invoiceOf(acme); rec.PushState != billing.PushPending || rec.Generation != 1 {
		t.Errorf("acme's invoice %s, generation %d; want pending, 1", rec.PushState, rec.Generation)
	}
}

// TestEventsOfAnEarlierGeneration: after a retarget, events about the
// invoice's earlier draft (deleted, finalized) change nothing, while one
// about the current generation's invoice applies before a push recorded
// its ID; the push records the generation in the invoice's metadata, and
// a draft's deletion and finalization are audited as Stripe's.
func TestEventsOfAnEarlierGeneration(t *testing.T) {
	r := newRig(t, billing.ModeDraft)
	ctx := context.Background()
	pro := fixture.Plan(t, r.db, plans.Plan{Name: "pro", BaseFeeMinor: 4900})
	acme := r.linkedTenant("acme", pro)
	globex := r.tenant("globex", pro)
	r.link(globex, billing.LinkInput{CustomerID: "cus_globexold"})
	r.closeOctober()
	old := r.invoicesByCustomer()
	// As a push refused for good after Stripe made the draft leaves it.
	_, err := r.db.Exec(ctx, `UPDATE invoices SET push_state = 'failed', last_error = 'stripe: finalize invoice: 400'`)
	testenv.Must(t, err)
	if _, err := r.inv.Retarget(ctx, audit.CLI, acme.ID, october); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"invoice.deleted", "invoice.finalized"} {
		res, err := r.deliver(stripetest.InvoiceEvent("evt_old_"+typ, typ, old["cus_acme"], r.clock.Now()))
		if err != nil || !res.Unknown {
			t.Errorf("%s about the earlier draft: %+v, %v; want it unknown", typ, res, err)
		}
	}
	if rec := r.invoiceOf(acme); rec.PushState != billing.PushPending || rec.LastError != "" || rec.ProviderStatus != "" {
		t.Errorf("re-targeted invoice %s (%q, %q) after events about the draft it replaced; want pending", rec.PushState,
			rec.LastError, rec.ProviderStatus)
	}
	// The current generation's draft, deleted before its push recorded it.
	current := stripetest.Invoice{ID: "in_gen1", Customer: "cus_acme", Currency: "usd", Status: "draft", Total: 4900,
		Metadata: map[string]string{"tollgate_ref": billing.InvoiceRef(acme.ID, "2026-10"), "tollgate_generation": "1"}}
	r.invoiceEvent("evt_gen1_deleted", "invoice.deleted", current)
	if rec := r.invoiceOf(acme); rec.PushState != billing.PushFailed {
		t.Errorf("after the current draft's deletion: %s, want failed", rec.PushState)
	}
	if n := r.count(`SELECT count(*) FROM audit_log WHERE action = 'invoice.deleted' AND actor = 'stripe' AND target_id = $1`,
		current.Metadata["tollgate_ref"]); n != 1 {
		t.Errorf("%d invoice.deleted entries by stripe, want 1", n)
	}

	r.link(globex, billing.LinkInput{CustomerID: "cus_globex"})
	if _, err := r.inv.Retarget(ctx, audit.CLI, globex.ID, october); err != nil {
		t.Fatal(err)
	}
	if p, err := r.inv.Push(ctx, false); err != nil || p.Pushed != 1 {
		t.Fatalf("push: %+v, %v", p, err)
	}
	made := creates(r.stripe, "/v1/invoices")
	if last := made[len(made)-1]; last.Form.Get("customer") != "cus_globex" || last.Form.Get("metadata[tollgate_generation]") != "1" {
		t.Errorf("invoice made %v, want one at cus_globex of generation 1", last.Form)
	}
	edited := r.invoicesByCustomer()["cus_globex"]
	edited.Total = 5400
	r.invoiceEvent("evt_globex_finalized", "invoice.finalized", edited)
	if n := r.count(`SELECT count(*) FROM audit_log WHERE action = 'invoice.finalized' AND actor = 'stripe' AND target_id = $1`,
		billing.InvoiceRef(globex.ID, "2026-10")); n != 1 {
		t.Errorf("%d invoice.finalized entries by stripe, want 1", n)
	}
}

// TestDunningPassesOverInvoicesBilledOutside: an invoice billed outside
// Tollgate whose payment at Stripe is recorded as failed is the
// operator's to chase: dunning does not suspend its tenant for it.
func TestDunningPassesOverInvoicesBilledOutside(t *testing.T) {
	r := newRig(t, billing.ModeFinalize)
	ctx := context.Background()
	acme, owing, _ := r.twoFailing("acme", "owing")
	_, err := r.db.Exec(ctx, `UPDATE invoices SET push_state = 'billed_outside' WHERE tenant_id = $1`, acme.ID)
	testenv.Must(t, err)
	r.dunAfterGrace(1, "owing alone")
	r.wantStatus(acme, tenants.StatusActive, "(its invoice billed outside) after dunning")
	r.wantStatus(owing, tenants.StatusSuspended, "after dunning")
}

// TestRelinkRetargetsInvoicesRefusedForTheCustomer: an invoice whose
// push Stripe refused for not having its customer (a key of the wrong
// mode) does not hold the tenant to that customer, and a relink
// re-targets it to the new customer in the same transaction, audited as
// a retarget: once the key is fixed, the next push bills the new
// customer, never the one the tenant left.
func TestRelinkRetargetsInvoicesRefusedForTheCustomer(t *testing.T) {
	r, f := newRigViaRefuser(t, billing.ModeFinalize)
	ctx := context.Background()
	acme := r.acme()
	f.set(refusing("/v1/invoices", noSuchCustomer("cus_acme")))
	r.closeOctober()
	if rec := r.invoiceOf(acme); rec.PushState != billing.PushPending || !strings.Contains(rec.LastError, "no such customer") {
		t.Fatalf("acme's invoice %s (%q), want pending, refused for its customer", rec.PushState, rec.LastError)
	}

	// The operator relinks the tenant, and does not retarget.
	r.link(acme, billing.LinkInput{CustomerID: "cus_acme2"})
	rec := r.invoiceOf(acme)
	if rec.PushState != billing.PushPending || rec.CustomerID != "cus_acme2" || rec.Generation != 1 || rec.LastError != "" {
		t.Errorf("after the relink: %s to %s, generation %d (%q); want pending to cus_acme2, generation 1", rec.PushState,
			rec.CustomerID, rec.Generation, rec.LastError)
	}
	var linkID, retargetID int64
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT coalesce(max(id) FILTER (WHERE action = 'billing_account.link'), 0),
		coalesce(max(id) FILTER (WHERE action = 'invoice.retarget'), 0) FROM audit_log WHERE tenant_id = $1`, acme.ID).
		Scan(&linkID, &retargetID))
	if n := r.count(`SELECT count(*) FROM audit_log WHERE action = 'invoice.retarget' AND target_id = $1 AND after->>'customer_id' = 'cus_acme2'`,
		rec.Ref); n != 1 || retargetID < linkID {
		t.Errorf("%d invoice.retarget entries to cus_acme2 (entry %d, the link's %d), want 1 after the link's", n, retargetID, linkID)
	}

	// The key fixed, the push bills the new customer.
	f.set(nil)
	r.wantPushedTo("cus_acme2", 0, true, "with the key fixed")
}

// TestNotFoundOfAnotherObjectHoldsTheCustomer: a 404 of Stripe's about
// something other than the customer (the draft, deleted while the push
// finalized it) is not a missing customer: the invoice still holds the
// tenant to its customer.
func TestNotFoundOfAnotherObjectHoldsTheCustomer(t *testing.T) {
	r, f := newRigViaRefuser(t, billing.ModeFinalize)
	acme := r.acme()
	f.set(func(q *http.Request) (refusal, bool) {
		return refusal{404, "resource_missing", "invoice", "No such invoice"}, q.Method == "POST" && strings.HasSuffix(q.URL.Path, "/finalize")
	})
	r.closeOctober()
	rec := r.invoiceOf(acme)
	if rec.PushState != billing.PushPending || !strings.Contains(rec.LastError, "404") || strings.Contains(rec.LastError, "no such customer") {
		t.Errorf("acme's invoice %s (%q), want pending with the 404, not a missing customer", rec.PushState, rec.LastError)
	}
	_, err := r.inv.LinkAccount(context.Background(), audit.CLI, acme.ID, billing.LinkInput{CustomerID: "cus_acme2"})
	if tollgate.ErrorCode(err) != tollgate.ECONFLICT || !strings.Contains(err.Error(), "still to push to customer cus_acme") {
		t.Errorf("relinking while the invoice is still to push to cus_acme: %v, want ECONFLICT", err)
	}
}

// TestRetargetToTheSameCustomerTakesTheDraft: a push of a later
// generation that finds the draft an earlier one left at the same
// customer marks the draft as its own, so that the draft's deletion,
// reported before the push recorded its ID, is the invoice's.
func TestRetargetToTheSameCustomerTakesTheDraft(t *testing.T) {
	r := newRig(t, billing.ModeDraft)
	ctx := context.Background()
	acme := r.acme()
	// The push's last request reads the draft back: its answer lost, the
	// invoice stays pending with the draft at Stripe.
	readBack := func(q stripetest.Request) bool {
		return q.Method == "GET" && strings.HasPrefix(q.Path, "/v1/invoices/in_")
	}
	r.stripe.DropAnswer(readBack)
	r.closeOctober()
	got, err := r.inv.Retarget(ctx, audit.CLI, acme.ID, october)
	if err != nil || got.Generation != 1 || got.CustomerID != "cus_acme" {
		t.Fatalf("retarget to the same customer: %+v, %v; want generation 1 at cus_acme", got, err)
	}
	r.stripe.DropAnswer(readBack)
	if p, err := r.inv.Push(ctx, true); err != nil || p.Failed != 1 {
		t.Fatalf("push with the answer lost: %+v, %v", p, err)
	}
	held := r.stripe.Invoices()
	if len(held) != 1 || held[0].Metadata["tollgate_generation"] != "1" {
		t.Fatalf("invoices at Stripe %+v, want the one draft, of generation 1", held)
	}
	var marked bool
	for _, q := range r.stripe.Requests() {
		marked = marked || q.Method == "POST" && q.Path == "/v1/invoices/"+held[0].ID && q.IdempotencyKey == got.Ref+"/g1/generation"
	}
	if !marked {
		t.Errorf("no update of the draft keyed %s/g1/generation", got.Ref)
	}
	res, err := r.deliver(stripetest.InvoiceEvent("evt_deleted", "invoice.deleted", held[0], r.clock.Now()))
	if err != nil || !res.Applied {
		t.Errorf("the draft's deletion before the push recorded it: %+v, %v; want it applied", res, err)
	}
	if rec := r.invoiceOf(acme); rec.PushState != billing.PushFailed {
		t.Errorf("after the draft's deletion: %s, want failed", rec.PushState)
	}
}

// TestBillOutsideAsksBeforeLocking: closing an invoice out asks Stripe
// before taking the invoice's push lease, so that a push may run while
// Stripe answers; what Stripe said is then out of date, and closing out
// is refused, to try again.
func TestBillOutsideAsksBeforeLocking(t *testing.T) {
	r, f := newRigViaRefuser(t, billing.ModeFinalize)
	ctx := context.Background()
	acme := r.acme()
	r.stripe.Down(503)
	r.closeOctober()
	r.stripe.Down(0)
	var asked atomic.Bool
	var during billing.PushReport
	var duringErr error
	f.set(func(q *http.Request) (refusal, bool) {
		if q.Method == "GET" && q.URL.Path == "/v1/invoices" && asked.CompareAndSwap(false, true) {
			// A push while Stripe is asked, failing with Stripe down.
			r.stripe.Down(503)
			during, duringErr = r.inv.Push(ctx, true)
			r.stripe.Down(0)
		}
		return refusal{}, false
	})
	_, err := r.inv.BillOutside(ctx, audit.CLI, acme.ID, october, "billed by hand")
	if duringErr != nil || during.Failed != 1 {
		t.Errorf("push while Stripe was asked: %+v, %v; want it tried (not held up by the close-out)", during, duringErr)
	}
	if tollgate.ErrorCode(err) != tollgate.ECONFLICT || !strings.Contains(err.Error(), "try again") {
		t.Errorf("closing out an invoice pushed again meanwhile: %v, want ECONFLICT saying to try again", err)
	}
	if n := r.count(`SELECT count(*) FROM audit_log WHERE action = 'invoice.bill_outside'`); n != 0 {
		t.Errorf("%d invoice.bill_outside entries, want none", n)
	}
	got, err := r.inv.BillOutside(ctx, audit.CLI, acme.ID, october, "billed by hand")
	if err != nil || got.PushState != billing.PushBilledOutside {
		t.Errorf("closing out again: %s, %v; want billed_outside", got.PushState, err)
	}
}
