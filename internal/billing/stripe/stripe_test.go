package stripe_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/billing/stripe"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/metering/meteringtest"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
	"github.com/tollgate/tollgate/internal/testenv/stripetest"
	"github.com/tollgate/tollgate/internal/usage"
)

// TestMonthClosesIntoInvoicesExactlyOnce: a month with three tenants —
// a flat plan, tiered overage, and prepaid credits bought through
// Checkout — closes into three invoices whose lines are the statements'
// to the cent; closing and pushing again creates nothing.
func TestMonthClosesIntoInvoicesExactlyOnce(t *testing.T) {
	r := newRig(t, billing.ModeFinalize)
	ctx := context.Background()
	upTo := int64(1000)
	flat := fixture.Plan(t, r.db, plans.Plan{Name: "flat", BaseFeeMinor: 4900, IncludedUnits: 1_000_000})
	tiered := fixture.Plan(t, r.db, plans.Plan{Name: "tiered", BaseFeeMinor: 1000, IncludedUnits: 100,
		Tiers: []plans.PriceTier{{UpTo: &upTo, UnitMinor: 5}, {UnitMinor: 2}}})
	prepaid := fixture.Plan(t, r.db, plans.Plan{Name: "prepaid", BaseFeeMinor: 0, OverageUnitMinor: 3, IncludedUnits: 0})
	flatCo, tieredCo, prepaidCo := r.tenant("flat-co", flat), r.tenant("tiered-co", tiered), r.tenant("prepaid-co", prepaid)
	r.tenant("unlinked-co", flat)
	r.use(flatCo, 500)
	r.use(tieredCo, 2100) // 2000 past the included 100: 1000 × 5 + 1000 × 2

	r.link(flatCo, billing.LinkInput{Create: true, Email: "billing@flat.example"})
	r.link(tieredCo, billing.LinkInput{CustomerID: "cus_existing42"})
	r.link(prepaidCo, billing.LinkInput{Create: true})
	if _, err := r.inv.LinkAccount(ctx, audit.CLI, flatCo.ID, billing.LinkInput{CustomerID: "cus_existing42"}); err == nil {
		t.Error("one customer linked to two tenants")
	}

	// A top-up bought through Checkout is granted once, under replays
	// and a second event of the same payment.
	u, err := r.inv.OpenTopUp(ctx, audit.CLI, prepaidCo.ID, billing.TopUpInput{Units: 5000, AmountMinor: 2500,
		SuccessURL: "https://console.example/ok", CancelURL: "https://console.example/back"})
	testenv.Must(t, err)
	if u.SessionID == "" || u.CheckoutURL == "" || u.Currency != "USD" {
		t.Fatalf("top-up %+v", u)
	}
	sessions := creates(r.stripe, "/v1/checkout/sessions")
	if len(sessions) != 1 || sessions[0].Form.Get("line_items[0][price_data][unit_amount]") != "2500" ||
		sessions[0].Form.Get("metadata[tollgate_topup]") != u.ID || sessions[0].IdempotencyKey != "tollgate-topup-"+u.ID {
		t.Fatalf("checkout requests %+v", sessions)
	}
	unpaid := stripetest.CheckoutEvent("evt_cs_unpaid", u.SessionID, u.ID, "unpaid", time.Now())
	if res, err := r.deliver(unpaid); err != nil || res.Applied {
		t.Errorf("an unpaid checkout: %+v, %v; want nothing applied", res, err)
	}
	paid := stripetest.CheckoutEvent("evt_cs_paid", u.SessionID, u.ID, "paid", time.Now())
	for i, payload := range [][]byte{paid, paid, stripetest.CheckoutEvent("evt_cs_async", u.SessionID, u.ID, "paid", time.Now())} {
		if _, err := r.deliver(payload); err != nil {
			t.Fatalf("checkout event %d: %v", i, err)
		}
	}
	bal, err := credits.NewStore(r.db).Balance(ctx, prepaidCo.ID)
	testenv.Must(t, err)
	if bal.Balance != 5000 || r.count(`SELECT count(*) FROM audit_log WHERE action = 'credits.grant' AND actor = 'stripe'`) != 1 {
		t.Errorf("balance %d after the top-up's events, grants audited %d; want 5000 once", bal.Balance,
			r.count(`SELECT count(*) FROM audit_log WHERE action = 'credits.grant'`))
	}

	res := r.closeOctober()
	if res.Invoices == nil || res.Invoices.Pushed != 3 || res.Invoices.Failed != 0 || res.Invoices.Pending != 0 {
		t.Fatalf("close pushed %+v, want 3 invoices", res.Invoices)
	}
	statements, err := billing.NewStore(r.db, r.clock.Now).Statements(ctx, october, nil)
	testenv.Must(t, err)
	want := map[string]int64{flatCo.ID: 4900, tieredCo.ID: 1000 + 5000 + 2000, prepaidCo.ID: 0}
	made := r.stripe.Invoices()
	if len(made) != 3 {
		t.Fatalf("%d invoices at Stripe, want 3", len(made))
	}
	for _, st := range statements {
		if st.TenantName == "unlinked-co" {
			if st.Invoice != nil {
				t.Errorf("a tenant without a billing account was invoiced: %+v", st.Invoice)
			}
			continue
		}
		if st.TotalMinor != want[st.TenantID] {
			t.Errorf("%s: statement total %d, want %d", st.TenantName, st.TotalMinor, want[st.TenantID])
		}
		ref := billing.InvoiceRef(st.TenantID, "2026-10")
		var in *stripetest.Invoice
		for i := range made {
			if made[i].Metadata["tollgate_ref"] == ref {
				in = &made[i]
			}
		}
		if in == nil {
			t.Errorf("%s: no invoice at Stripe", st.TenantName)
			continue
		}
		lines := billing.InvoiceLines(st)
		if in.Total != st.TotalMinor || in.Currency != "usd" || in.Status != "open" || len(in.Lines) != len(lines) {
			t.Errorf("%s: Stripe has total %d %s, %s, %d lines; want %d usd, open, %d lines", st.TenantName, in.Total, in.Currency,
				in.Status, len(in.Lines), st.TotalMinor, len(lines))
		}
		if st.Invoice == nil || st.Invoice.PushState != "pushed" || st.Invoice.ProviderInvoiceID != in.ID {
			t.Errorf("%s: statement's invoice %+v, want pushed as %s", st.TenantName, st.Invoice, in.ID)
		}
	}
	// What was sent: keys derived from the statements, the lines' amounts
	// in minor units, the statement's currency, the test key only.
	for _, q := range r.stripe.Requests() {
		if !q.Authorized {
			t.Errorf("%s %s without the test key", q.Method, q.Path)
		}
	}
	for _, q := range creates(r.stripe, "/v1/invoices") {
		if ref := q.Form.Get("metadata[tollgate_ref]"); q.IdempotencyKey != ref+"/invoice" || q.Form.Get("currency") != "usd" ||
			q.Form.Get("pending_invoice_items_behavior") != "exclude" {
			t.Errorf("invoice created with key %q, form %v", q.IdempotencyKey, q.Form)
		}
	}
	items := creates(r.stripe, "/v1/invoiceitems")
	sent := map[string]int64{}
	for _, q := range items {
		ref := q.Form.Get("metadata[tollgate_ref]")
		amount, _ := strconv.ParseInt(q.Form.Get("amount"), 10, 64)
		sent[ref] += amount
		if q.IdempotencyKey != ref+"/line/"+q.Form.Get("metadata[tollgate_line]") {
			t.Errorf("line sent with key %q", q.IdempotencyKey)
		}
	}
	for tenantID, total := range want {
		if got := sent[billing.InvoiceRef(tenantID, "2026-10")]; got != total {
			t.Errorf("lines sent for %s sum to %d, want %d", tenantID, got, total)
		}
	}
	tieredLines := 0
	for _, q := range items {
		if strings.Contains(q.Form.Get("description"), "plan tiered") {
			tieredLines++
		}
	}
	if tieredLines != 3 { // base fee and two overage tiers
		t.Errorf("tiered-co's invoice has %d plan lines, want 3", tieredLines)
	}

	// Again: the close, a push of everything, a push by another process.
	before := len(r.stripe.Requests())
	again, err := r.ops.CloseMonth(ctx, audit.CLI, october, nil)
	testenv.Must(t, err)
	if !again.AlreadyClosed || again.Invoices.Pushed != 0 {
		t.Errorf("closing again: %+v", again)
	}
	if p, err := r.inv.Push(ctx, true); err != nil || p.Pushed != 0 {
		t.Errorf("pushing again: %+v, %v", p, err)
	}
	if n := len(r.stripe.Requests()); n != before {
		t.Errorf("pushing again sent %d requests", n-before)
	}
	if n := len(creates(r.stripe, "/v1/invoices")); n != 3 {
		t.Errorf("%d invoices created, want 3", n)
	}

	// Reconciled to the cent.
	rec, err := r.inv.Reconcile(ctx, october)
	testenv.Must(t, err)
	if len(rec) != 4 {
		t.Fatalf("reconciliation of %d tenants, want 4", len(rec))
	}
	for _, c := range rec {
		if len(c.Differences) != 0 {
			t.Errorf("%s differs: %v", c.TenantName, c.Differences)
		}
	}
	r.wantDifferences(0, "everything reconciled")
}

// TestPushRecoversWithoutDuplicates: Stripe down leaves the invoice
// pending ("push pending") and retried with backoff; answers lost after
// Stripe acted (the invoice made, a line added) are found again on the
// next push, never made twice.
func TestPushRecoversWithoutDuplicates(t *testing.T) {
	r := newRig(t, billing.ModeDraft)
	ctx := context.Background()
	pro := fixture.Plan(t, r.db, plans.Plan{Name: "pro", BaseFeeMinor: 2000, IncludedUnits: 10, OverageUnitMinor: 3})
	acme := r.tenant("acme", pro)
	r.use(acme, 110)
	r.link(acme, billing.LinkInput{CustomerID: "cus_acme"})

	r.stripe.Down(503)
	res := r.closeOctober()
	if res.Invoices.Failed != 1 || res.Invoices.Pending != 1 {
		t.Fatalf("close with Stripe down: %+v", res.Invoices)
	}
	st, err := billing.NewStore(r.db, r.clock.Now).Statement(ctx, acme.ID, october)
	testenv.Must(t, err)
	if st.Invoice == nil || st.Invoice.PushState != "pending" {
		t.Errorf("statement's invoice %+v, want push pending", st.Invoice)
	}
	r.wantReconciled("push pending", "503")
	r.clock.Advance(10 * time.Second)
	if p, err := r.inv.Push(ctx, false); err != nil || p.Pushed+p.Failed != 0 {
		t.Errorf("push within the backoff: %+v, %v; want nothing tried", p, err)
	}

	// Back up, but the invoice's answer is lost; then a line's.
	r.stripe.Down(0)
	r.stripe.DropAnswer(func(q stripetest.Request) bool { return q.Method == "POST" && q.Path == "/v1/invoices" })
	r.clock.Advance(time.Minute)
	if p, _ := r.inv.Push(ctx, false); p.Failed != 1 {
		t.Fatalf("push with the answer lost: %+v", p)
	}
	r.stripe.DropAnswer(func(q stripetest.Request) bool {
		return q.Path == "/v1/invoiceitems" && q.Form.Get("metadata[tollgate_line]") != "p0.base"
	})
	r.clock.Advance(2 * time.Minute)
	if p, _ := r.inv.Push(ctx, false); p.Failed != 1 {
		t.Fatalf("push with a line's answer lost: %+v", p)
	}
	// Past Stripe's memory of idempotency keys, the invoice and its
	// lines are found by their metadata.
	r.stripe.ForgetKeys()
	r.clock.Advance(5 * time.Minute)
	if p, err := r.inv.Push(ctx, false); err != nil || p.Pushed != 1 || p.Pending != 0 {
		t.Fatalf("push after the outage: %+v, %v", p, err)
	}
	made := r.stripe.Invoices()
	if len(made) != 1 || len(creates(r.stripe, "/v1/invoices")) != 1 {
		t.Fatalf("%d invoices at Stripe, want 1", len(made))
	}
	keys := map[string]bool{}
	for _, l := range made[0].Lines {
		key := l["metadata"].(map[string]string)["tollgate_line"]
		if keys[key] {
			t.Errorf("line %s added twice", key)
		}
		keys[key] = true
	}
	if made[0].Total != 2000+300 || len(keys) != 2 || made[0].Status != "draft" {
		t.Errorf("invoice total %d with lines %v, %s; want 2300 in 2 lines, a draft", made[0].Total, keys, made[0].Status)
	}
	recs, err := r.inv.Invoices(ctx, acme.ID, nil)
	testenv.Must(t, err)
	if recs[0].PushState != "pushed" || recs[0].ProviderInvoiceID != made[0].ID || recs[0].PushAttempts != 4 {
		t.Errorf("our record %+v", recs[0])
	}
}

// TestStripeEvents: a signed invoice.paid marks the statement paid; a
// failed payment suspends the tenant after the grace period and a later
// payment resumes it, each with its Tollgate event and audit entry;
// replays change nothing; bad and stale signatures and unknown invoices
// change nothing.
func TestStripeEvents(t *testing.T) {
	r := newRig(t, billing.ModeFinalize)
	ctx := context.Background()
	pro := fixture.Plan(t, r.db, plans.Plan{Name: "pro", BaseFeeMinor: 2000})
	acme, globex := r.linkedTenant("acme", pro), r.linkedTenant("globex", pro)
	r.closeOctober()
	byCustomer := r.invoicesByCustomer()
	audits := func() int { return r.count(`SELECT count(*) FROM audit_log`) }
	eventsOf := func(typ string) int { return r.count(`SELECT count(*) FROM events WHERE type = $1`, typ) }
	status := func(tn tenants.Tenant) string {
		recs, err := r.inv.Invoices(ctx, tn.ID, nil)
		testenv.Must(t, err)
		return recs[0].PaymentStatus
	}

	// Signatures: wrong secret, stale, missing.
	payload := stripetest.InvoiceEvent("evt_paid_acme", "invoice.paid", byCustomer["cus_acme"], time.Now())
	for name, sig := range map[string]string{
		"wrong secret": stripetest.Sign(payload, "whsec_someoneelse0123456789", time.Now()),
		"stale":        stripetest.Sign(payload, stripetest.WebhookSecret, time.Now().Add(-10*time.Minute)),
		"missing":      "",
	} {
		if _, err := r.prov.ParseEvent(payload, sig); !errors.Is(err, billing.ErrBadSignature) {
			t.Errorf("%s signature: %v, want ErrBadSignature", name, err)
		}
	}
	before := audits()
	unknown := byCustomer["cus_acme"]
	unknown.ID, unknown.Metadata = "in_nobody", map[string]string{}
	if res, err := r.deliver(stripetest.InvoiceEvent("evt_unknown", "invoice.paid", unknown, time.Now())); err != nil || !res.Unknown {
		t.Errorf("an unknown invoice's event: %+v, %v", res, err)
	}
	if audits() != before || r.count(`SELECT count(*) FROM provider_events`) != 0 {
		t.Error("an unknown invoice's event changed something")
	}
	// Another invoice of the account, in ISK, of an amount Tollgate
	// could not have sent (not whole krónur): passed over, not refused,
	// so that Stripe does not retry it for days.
	foreign := stripetest.Invoice{ID: "in_foreign", Customer: unknown.Customer, Currency: "isk", Total: 4950, Metadata: map[string]string{}}
	if res, err := r.deliver(stripetest.InvoiceEvent("evt_foreign", "invoice.paid", foreign, time.Now())); err != nil || res.Applied {
		t.Errorf("a foreign ISK invoice's event: %+v, %v; want passed over", res, err)
	}

	// Paid, once.
	for i := range 2 {
		res, err := r.deliver(payload)
		if err != nil || res.Applied != (i == 0) || res.Replayed != (i == 1) {
			t.Errorf("invoice.paid delivery %d: %+v, %v", i, res, err)
		}
	}
	if status(acme) != "paid" || eventsOf("invoice.paid") != 1 || audits() != before+1 {
		t.Errorf("after invoice.paid: status %s, %d events, %d entries", status(acme), eventsOf("invoice.paid"), audits()-before)
	}
	st, err := billing.NewStore(r.db, r.clock.Now).Statement(ctx, acme.ID, october)
	testenv.Must(t, err)
	if st.Invoice == nil || st.Invoice.PaymentStatus != "paid" {
		t.Errorf("statement's invoice %+v, want paid", st.Invoice)
	}

	// Failed: dunning suspends after the grace period; the payment
	// resumes.
	failed := stripetest.InvoiceEvent("evt_failed_globex", "invoice.payment_failed", byCustomer["cus_globex"], r.clock.Now())
	if _, err := r.deliver(failed); err != nil || status(globex) != "failed" || eventsOf("invoice.payment_failed") != 1 {
		t.Fatalf("invoice.payment_failed: %v, status %s", err, status(globex))
	}
	r.clock.Advance(71 * time.Hour)
	if n, err := r.inv.Dunning(ctx); err != nil || n != 0 {
		t.Errorf("dunning within the grace period: %d, %v", n, err)
	}
	r.clock.Advance(2 * time.Hour)
	if n, err := r.inv.Dunning(ctx); err != nil || n != 1 {
		t.Errorf("dunning after the grace period: %d, %v", n, err)
	}
	if n, _ := r.inv.Dunning(ctx); n != 0 {
		t.Error("dunning suspended twice")
	}
	if r.tenantStatus(globex) != tenants.StatusSuspended || eventsOf("tenant.suspended") != 1 ||
		r.count(`SELECT count(*) FROM audit_log WHERE action = 'tenant.suspend' AND actor = 'dunning'`) != 1 {
		t.Errorf("globex %s after dunning", r.tenantStatus(globex))
	}
	paidLate := stripetest.InvoiceEvent("evt_paid_globex", "invoice.paid", byCustomer["cus_globex"], r.clock.Now())
	for range 2 {
		if _, err := r.deliver(paidLate); err != nil {
			t.Fatal(err)
		}
	}
	if r.tenantStatus(globex) != tenants.StatusActive || eventsOf("tenant.resumed") != 1 || status(globex) != "paid" ||
		r.count(`SELECT count(*) FROM audit_log WHERE action = 'tenant.resume' AND actor = 'stripe'`) != 1 {
		t.Errorf("globex %s (%s) after paying", r.tenantStatus(globex), status(globex))
	}
	// A late failure of a paid invoice changes nothing.
	n := audits()
	r.invoiceEvent("evt_late_fail", "invoice.payment_failed", byCustomer["cus_globex"])
	if status(globex) != "paid" || audits() != n {
		t.Errorf("a late failure changed a paid invoice: %s", status(globex))
	}
}

// TestInvoiceLinesMirrorTheStatement: a statement's lines — base fees
// per plan period, overage per tier, credits as lines of no amount — sum
// to its total.
func TestInvoiceLinesMirrorTheStatement(t *testing.T) {
	st := billing.Statement{TotalMinor: 1000 + 500 + 300 + 80, Plans: []billing.PlanCharges{
		{Plan: "a", BaseFeeMinor: 1000, Overage: []billing.OverageLine{{FromUnit: 1, ToUnit: 100, Units: 100, UnitMinor: 5, AmountMinor: 500}}},
		{Plan: "b", BaseFeeMinor: 300, Overage: []billing.OverageLine{{FromUnit: 1, ToUnit: 40, Units: 40, UnitMinor: 2, AmountMinor: 80}}},
	}, Credits: &credits.Month{Used: 700, Overage: 40, Adjusted: -5}}
	lines := billing.InvoiceLines(st)
	var keys []string
	var sum int64
	for _, l := range lines {
		keys = append(keys, l.Key)
		sum += l.AmountMinor
	}
	want := "p0.base p0.overage.0 p1.base p1.overage.0 credits.used credits.past_balance credits.adjusted"
	if strings.Join(keys, " ") != want || sum != st.TotalMinor {
		t.Errorf("lines %v sum to %d; want %s summing to %d", keys, sum, want, st.TotalMinor)
	}
}

// TestConfigNamesTheSetting: malformed secrets fail naming the setting,
// never showing the value.
func TestConfigNamesTheSetting(t *testing.T) {
	bad := stripe.Config{SecretKey: "pk_live_oops123456789", WebhookSecret: "secret", APIURL: "ftp://x"}.Validate()
	for _, name := range []string{"TOLLGATE_STRIPE_SECRET_KEY", "TOLLGATE_STRIPE_WEBHOOK_SECRET", "TOLLGATE_STRIPE_API_URL"} {
		if bad[name] == "" || strings.Contains(bad[name], "oops") {
			t.Errorf("%s: %q", name, bad[name])
		}
	}
	if got := (stripe.Config{SecretKey: stripetest.SecretKey, WebhookSecret: stripetest.WebhookSecret}).Validate(); len(got) != 0 {
		t.Errorf("good settings refused: %v", got)
	}
}

// TestDunningPerPlan: a plan's own grace replaces the server's (72 h
// here): a tenant on a plan of 24 h is suspended after 24 h, one on a
// plan with dunning off never is, and one on a plan without settings
// after the server's 72 h.
func TestDunningPerPlan(t *testing.T) {
	r := newRig(t, billing.ModeFinalize)
	ctx := context.Background()
	day := int64(24 * 3600)
	off := int64(0)
	quick := fixture.Plan(t, r.db, plans.Plan{Name: "quick", BaseFeeMinor: 1000})
	lenient := fixture.Plan(t, r.db, plans.Plan{Name: "lenient", BaseFeeMinor: 1000})
	standard := fixture.Plan(t, r.db, plans.Plan{Name: "standard", BaseFeeMinor: 1000})
	if _, err := r.inv.SetPlanBilling(ctx, audit.CLI, quick.ID, billing.PlanBillingInput{DunningGraceS: &day}); err != nil {
		t.Fatal(err)
	}
	pb, err := r.inv.SetPlanBilling(ctx, audit.CLI, lenient.ID, billing.PlanBillingInput{DunningGraceS: &off})
	if err != nil || pb.EffectiveDunningGraceS != 0 || pb.DunningGraceS == nil {
		t.Fatalf("lenient's settings %+v, %v", pb, err)
	}
	if pb, err := r.inv.PlanBilling(ctx, standard.ID); err != nil || pb.DunningGraceS != nil || pb.EffectiveDunningGraceS != 72*3600 {
		t.Errorf("standard's settings %+v, %v; want the server's 72 h", pb, err)
	}
	if _, err := r.inv.SetPlanBilling(ctx, audit.CLI, quick.ID, billing.PlanBillingInput{DunningGraceS: new(int64(-1))}); err == nil {
		t.Error("a negative grace was taken")
	}
	acme, globex, initech := r.linkedTenant("acme", quick), r.linkedTenant("globex", lenient), r.linkedTenant("initech", standard)
	r.closeOctober()
	r.failPayments()
	if n := r.count(`SELECT count(*) FROM invoices WHERE payment_status = 'failed'`); n != 3 {
		t.Fatalf("%d failed invoices, want 3", n)
	}
	suspended := func() []string {
		var names []string
		for _, tn := range []tenants.Tenant{acme, globex, initech} {
			if r.tenantStatus(tn) == tenants.StatusSuspended {
				names = append(names, tn.Name)
			}
		}
		return names
	}
	step := func(advance time.Duration, wantN int, want string) {
		t.Helper()
		r.clock.Advance(advance)
		n, err := r.inv.Dunning(ctx)
		if got := strings.Join(suspended(), ","); err != nil || n != wantN || got != want {
			t.Errorf("after %s more: dunning suspended %d (%v); suspended now %q, want %d and %q", advance, n, err, got, wantN, want)
		}
	}
	step(23*time.Hour, 0, "")
	step(2*time.Hour, 1, "acme")
	step(48*time.Hour, 1, "acme,initech")
	step(365*24*time.Hour, 0, "acme,initech")
	if n := r.count(`SELECT count(*) FROM audit_log WHERE action = 'tenant.suspend' AND actor = 'dunning'`); n != 2 {
		t.Errorf("%d dunning suspensions audited, want 2", n)
	}
	if n := r.count(`SELECT count(*) FROM audit_log WHERE action = 'plan.billing'`); n != 2 {
		t.Errorf("%d plan.billing entries, want 2", n)
	}
}

// TestDunningLeavesAnOperatorsSuspension: a tenant an operator suspended
// is not marked by dunning when its grace runs out, so paying the
// invoice does not resume it; a tenant dunning suspended is resumed when
// its invoice is voided.
func TestDunningLeavesAnOperatorsSuspension(t *testing.T) {
	r := newRig(t, billing.ModeFinalize)
	ctx := context.Background()
	held, owing, byTenant := r.twoFailing("held", "owing")
	_, err := tenants.NewOps(r.db, nil).Suspend(ctx, audit.CLI, held.ID)
	testenv.Must(t, err)
	r.dunAfterGrace(1, "owing; held was suspended already")
	for name, ev := range map[string]string{"held": "invoice.paid", "owing": "invoice.voided"} {
		in, ok := byTenant["cus_"+name]
		if !ok {
			t.Fatalf("no invoice of %s among %d", name, len(byTenant))
		}
		r.invoiceEvent("evt_"+name, ev, in)
	}
	r.wantStatus(held, tenants.StatusSuspended, "(suspended by an operator) after its invoice was paid")
	r.wantStatus(owing, tenants.StatusActive, "(suspended by dunning) after its invoice was voided")
}

// TestAmountsInStripesUnits: Stripe counts ISK in hundredths of a króna
// though ISO 4217 (and Tollgate) count it in krónur, so an ISK invoice's
// lines and a top-up's price are sent ×100 and Stripe's totals are read
// ÷100; a three-decimal amount not ending in 0, which Stripe refuses, is
// never sent: the invoice's push fails for good (not retried) with an
// error naming the currency and the amount, and the top-up is refused.
func TestAmountsInStripesUnits(t *testing.T) {
	r := newRig(t, billing.ModeFinalize)
	ctx := context.Background()
	isk := fixture.Plan(t, r.db, plans.Plan{Name: "isk", Currency: "ISK", BaseFeeMinor: 4900})
	kwd := fixture.Plan(t, r.db, plans.Plan{Name: "kwd", Currency: "KWD", BaseFeeMinor: 12_340})
	bhd := fixture.Plan(t, r.db, plans.Plan{Name: "bhd", Currency: "BHD", BaseFeeMinor: 1005})
	reykjavik := r.linkedTenant("reykjavik", isk)
	r.linkedTenant("kuwait", kwd)
	manama := r.linkedTenant("manama", bhd)

	// Top-ups: ISK converted, BHD refused before anything is sent.
	in := billing.TopUpInput{Units: 100, AmountMinor: 2500, SuccessURL: "https://console.example/ok", CancelURL: "https://console.example/back"}
	if _, err := r.inv.OpenTopUp(ctx, audit.CLI, reykjavik.ID, in); err != nil {
		t.Fatal(err)
	}
	in.AmountMinor = 2505
	_, err := r.inv.OpenTopUp(ctx, audit.CLI, manama.ID, in)
	var te *tollgate.Error
	if !errors.As(err, &te) || te.Code != tollgate.EINVALID || !strings.Contains(te.Fields["amount_minor"], "BHD 2505") {
		t.Errorf("a BHD top-up of 2505: %v, want EINVALID naming BHD 2505", err)
	}
	if n := r.count(`SELECT count(*) FROM credit_topups WHERE tenant_id = $1 AND status <> 'cancelled'`, manama.ID); n != 0 {
		t.Errorf("%d top-ups of manama left open, want none: no checkout was opened", n)
	}
	sessions := creates(r.stripe, "/v1/checkout/sessions")
	if len(sessions) != 1 || sessions[0].Form.Get("line_items[0][price_data][unit_amount]") != "250000" ||
		sessions[0].Form.Get("line_items[0][price_data][currency]") != "isk" {
		t.Errorf("checkout sessions %+v, want one of 250000 isk", sessions)
	}

	r.closeOctober()
	byCustomer := r.invoicesByCustomer()
	if in := byCustomer["cus_reykjavik"]; in.Total != 490_000 || len(in.Lines) != 1 || in.Lines[0]["amount"] != int64(490_000) {
		t.Errorf("ISK invoice at Stripe: total %d, lines %v; want 490000 (4900 krónur in Stripe's hundredths)", in.Total, in.Lines)
	}
	if in := byCustomer["cus_kuwait"]; in.Total != 12_340 {
		t.Errorf("KWD invoice at Stripe: total %d, want 12340 unchanged", in.Total)
	}
	for _, q := range r.stripe.Requests() {
		if q.Form.Get("customer") == "cus_manama" || q.Query.Get("customer") == "cus_manama" {
			t.Errorf("%s %s sent for the BHD invoice that Stripe would refuse", q.Method, q.Path)
		}
	}
	if rec := r.invoiceOf(reykjavik); rec.PushState != "pushed" || rec.ProviderTotalMinor == nil || *rec.ProviderTotalMinor != 4900 {
		t.Errorf("ISK record %+v, want pushed with Stripe's total read back as 4900", rec)
	}
	rec := r.invoiceOf(manama)
	if rec.PushState != billing.PushFailed || !strings.Contains(rec.LastError, "BHD 1005") || !strings.Contains(rec.LastError, "end in 0") {
		t.Errorf("BHD record %s with error %q, want failed naming BHD 1005", rec.PushState, rec.LastError)
	}
	// Not retried: pushing everything leaves it, without a request.
	before := len(r.stripe.Requests())
	if p, err := r.inv.Push(ctx, true); err != nil || p.Pushed+p.Failed != 0 || len(r.stripe.Requests()) != before {
		t.Errorf("pushing the BHD invoice again: %+v, %v, %d requests", p, err, len(r.stripe.Requests())-before)
	}

	// Stripe's ISK totals come back ÷100 in events too.
	r.invoiceEvent("evt_paid_isk", "invoice.paid", byCustomer["cus_reykjavik"])
	if rec := r.invoiceOf(reykjavik); rec.PaymentStatus != "paid" || *rec.ProviderTotalMinor != 4900 {
		t.Errorf("ISK record after invoice.paid %+v, want paid with 4900", rec)
	}
	var paid int64
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT (data->>'amount_paid_minor')::bigint FROM events WHERE type = 'invoice.paid'`).Scan(&paid))
	if paid != 4900 {
		t.Errorf("invoice.paid event's amount paid %d, want 4900", paid)
	}
	rows, err := r.inv.Reconcile(ctx, october)
	testenv.Must(t, err)
	for _, c := range rows {
		want := 0
		if c.TenantID == manama.ID {
			want = 1
		}
		if len(c.Differences) != want {
			t.Errorf("%s (%s) reconciles with %v, want %d differences", c.TenantName, c.Currency, c.Differences, want)
		}
	}
	r.wantDifferences(1, "the BHD push")
}

// TestRelinkWaitsForPendingInvoices: a tenant cannot move to another
// customer while an invoice is still to push to its customer, and no
// tenant can take a customer that another tenant's pending invoice
// names.
func TestRelinkWaitsForPendingInvoices(t *testing.T) {
	r := newRig(t, billing.ModeFinalize)
	ctx := context.Background()
	pro := fixture.Plan(t, r.db, plans.Plan{Name: "pro", BaseFeeMinor: 2000})
	acme, globex := r.linkedTenant("acme", pro), r.tenant("globex", pro)
	r.link(globex, billing.LinkInput{CustomerID: "cus_globexold"})
	r.stripe.Down(503)
	r.closeOctober()
	r.stripe.Down(0)
	// globex moved to another customer before relinks were checked: its
	// pending invoice still names the old one.
	_, err := r.db.Exec(ctx, `UPDATE billing_accounts SET customer_id = 'cus_globexnew' WHERE tenant_id = $1`, globex.ID)
	testenv.Must(t, err)

	link := func(tn tenants.Tenant, in billing.LinkInput, wantCode, wantText string) {
		t.Helper()
		_, err := r.inv.LinkAccount(ctx, audit.CLI, tn.ID, in)
		if tollgate.ErrorCode(err) != wantCode || (wantText != "" && !strings.Contains(err.Error(), wantText)) {
			t.Errorf("linking %s to %+v: %v, want %q %q", tn.Name, in, err, wantCode, wantText)
		}
	}
	link(acme, billing.LinkInput{CustomerID: "cus_acmenew"}, tollgate.ECONFLICT, "still to push to customer cus_acme")
	link(acme, billing.LinkInput{Create: true}, tollgate.ECONFLICT, "still to push")
	if n := len(creates(r.stripe, "/v1/customers")); n != 0 {
		t.Errorf("%d customers made for a refused link", n)
	}
	link(acme, billing.LinkInput{CustomerID: "cus_acme"}, "", "")

	// acme's invoice pushed, globex's still waiting.
	_, err = r.db.Exec(ctx, `UPDATE invoices SET next_push_at = next_push_at + interval '1 day' WHERE tenant_id = $1`, globex.ID)
	testenv.Must(t, err)
	r.clock.Advance(time.Hour)
	if p, err := r.inv.Push(ctx, false); err != nil || p.Pushed != 1 || p.Pending != 1 {
		t.Fatalf("push: %+v, %v", p, err)
	}
	link(acme, billing.LinkInput{CustomerID: "cus_globexnew"}, tollgate.ECONFLICT, "linked to another tenant")
	link(acme, billing.LinkInput{CustomerID: "cus_globexold"}, tollgate.ECONFLICT, "of another tenant still to push")
	link(acme, billing.LinkInput{CustomerID: "cus_acmenew"}, "", "")
	if n := r.count(`SELECT count(*) FROM audit_log WHERE action = 'billing_account.link' AND tenant_id = $1`, acme.ID); n != 3 {
		t.Errorf("%d links of acme audited, want 3 (the first, its repetition, and the one after its invoice was pushed)", n)
	}
}

// TestDunningCountsEveryOverdueInvoice: a tenant dunning suspended for
// September's invoice, whose October invoice then fails and passes its
// grace too, stays suspended when September's is paid and is resumed
// when October's is; so is one whose October invoice passed its grace
// before dunning ran again.
func TestDunningCountsEveryOverdueInvoice(t *testing.T) {
	r := newRig(t, billing.ModeFinalize)
	ctx := context.Background()
	pro := fixture.Plan(t, r.db, plans.Plan{Name: "pro", BaseFeeMinor: 2000})
	acme, globex := r.linkedTenant("acme", pro), r.linkedTenant("globex", pro)
	invoices := map[string]stripetest.Invoice{} // by customer and month
	fail := func(month string) {
		t.Helper()
		for _, in := range r.stripe.Invoices() {
			if in.Metadata["tollgate_month"] != month {
				continue
			}
			invoices[in.Customer+" "+month] = in
			r.invoiceEvent("evt_fail_"+in.ID, "invoice.payment_failed", in)
		}
	}

	r.clock.Set(meteringtest.Time(t, "2026-10-02T08:00:00Z"))
	_, err := r.ops.CloseMonth(ctx, audit.CLI, usage.MonthOf(meteringtest.Time(t, "2026-09-01T00:00:00Z")), nil)
	testenv.Must(t, err)
	fail("2026-09")
	r.dunAfterGrace(2, "both, for September")

	r.closeOctober()
	fail("2026-10")
	r.clock.Advance(73 * time.Hour)
	// Dunning runs for acme's October invoice; globex's passes its grace
	// unseen.
	_, err = r.db.Exec(ctx, `UPDATE invoices SET payment_failed_at = payment_failed_at + interval '2 hours' WHERE tenant_id = $1`, globex.ID)
	testenv.Must(t, err)
	if n, err := r.inv.Dunning(ctx); err != nil || n != 0 {
		t.Errorf("dunning for October: %d, %v; want nobody suspended again", n, err)
	}
	marked := func(tn tenants.Tenant) bool {
		recs, err := r.inv.Invoices(ctx, tn.ID, nil)
		testenv.Must(t, err)
		return recs[0].Month == "2026-10" && recs[0].DunningSuspendedAt != nil
	}
	if !marked(acme) || marked(globex) {
		t.Errorf("October's invoices marked as dunning's: acme %v, globex %v; want acme's only", marked(acme), marked(globex))
	}
	r.clock.Advance(3 * time.Hour)

	for _, tn := range []tenants.Tenant{acme, globex} {
		in := invoices["cus_"+tn.Name+" 2026-09"]
		r.invoiceEvent("evt_paid_"+in.ID, "invoice.paid", in)
		r.wantStatus(tn, tenants.StatusSuspended, "after paying September, October overdue")
		in = invoices["cus_"+tn.Name+" 2026-10"]
		r.invoiceEvent("evt_paid_"+in.ID, "invoice.paid", in)
		r.wantStatus(tn, tenants.StatusActive, "after paying October too")
	}
	if n := r.count(`SELECT count(*) FROM audit_log WHERE action = 'tenant.resume'`); n != 2 {
		t.Errorf("%d resumes audited, want 2", n)
	}
}

// TestSendModeEmailsOnce: an invoice whose push stopped after Stripe
// finalized it is sent when the push is retried; one that was sent is
// not sent again by a retry, even past Stripe's memory of idempotency
// keys, since it is marked sent at Stripe.
func TestSendModeEmailsOnce(t *testing.T) {
	r := newRig(t, billing.ModeSend)
	ctx := context.Background()
	acme := r.acme()
	sends := func() int {
		n := 0
		for _, q := range r.stripe.Requests() {
			if q.Method == "POST" && strings.HasSuffix(q.Path, "/send") && !q.Replayed && q.Status == 200 {
				n++
			}
		}
		return n
	}

	r.stripe.DropAnswer(func(q stripetest.Request) bool { return strings.HasSuffix(q.Path, "/finalize") })
	if res := r.closeOctober(); res.Invoices.Failed != 1 {
		t.Fatalf("close with the finalize's answer lost: %+v", res.Invoices)
	}
	r.stripe.ForgetKeys()
	r.clock.Advance(time.Hour)
	if p, err := r.inv.Push(ctx, false); err != nil || p.Pushed != 1 {
		t.Fatalf("push after the lost answer: %+v, %v", p, err)
	}
	if n := sends(); n != 1 {
		t.Errorf("an invoice finalized but not sent was sent %d times, want 1", n)
	}

	// Our record of the push lost (a crash before the commit), and a day
	// later pushed again: found sent, not sent again.
	_, err := r.db.Exec(ctx, `UPDATE invoices SET push_state = 'pending', provider_invoice_id = NULL WHERE tenant_id = $1`, acme.ID)
	testenv.Must(t, err)
	r.stripe.ForgetKeys()
	if p, err := r.inv.Push(ctx, true); err != nil || p.Pushed != 1 {
		t.Fatalf("push again: %+v, %v", p, err)
	}
	if n := sends(); n != 1 {
		t.Errorf("the invoice was sent %d times, want once", n)
	}
	made := r.stripe.Invoices()
	if len(made) != 1 || made[0].Status != "open" || made[0].Metadata["tollgate_sent"] != "true" {
		t.Errorf("invoices at Stripe %+v, want one, open and marked sent", made)
	}
}

// TestLookupReadsEveryPage: an invoice made at Stripe whose answer was
// lost is found by its reference however many newer invoices the
// customer has, so the push does not make a second once Stripe has
// forgotten the idempotency key.
func TestLookupReadsEveryPage(t *testing.T) {
	r := newRig(t, billing.ModeDraft)
	ctx := context.Background()
	acme := r.acme()
	r.stripe.DropAnswer(func(q stripetest.Request) bool { return q.Method == "POST" && q.Path == "/v1/invoices" })
	if res := r.closeOctober(); res.Invoices.Failed != 1 {
		t.Fatalf("close with the invoice's answer lost: %+v", res.Invoices)
	}
	r.stripe.AddInvoices("cus_acme", 650)
	r.stripe.ForgetKeys()
	r.clock.Advance(time.Hour)
	if p, err := r.inv.Push(ctx, false); err != nil || p.Pushed != 1 {
		t.Fatalf("push: %+v, %v", p, err)
	}
	if n := len(creates(r.stripe, "/v1/invoices")); n != 1 {
		t.Errorf("%d invoices created, want 1", n)
	}
	if rec := r.invoiceOf(acme); rec.ProviderInvoiceID != r.stripe.Invoices()[0].ID {
		t.Errorf("pushed as %s, want the first invoice made", rec.ProviderInvoiceID)
	}
}

// TestCustomerKeyIsTheRequests: the idempotency key of a customer's
// creation is the request's, not the tenant's alone. Stripe answers a
// key it has seen with its first answer (and refuses it with other
// parameters): a retry of the same request makes one customer, and a
// create with another email, another name, or after the tenant was
// linked to a customer, makes a customer of its own.
func TestCustomerKeyIsTheRequests(t *testing.T) {
	r := newRig(t, billing.ModeDraft)
	ctx := context.Background()
	tn := r.tenant("acme", fixture.Plan(t, r.db, plans.Plan{Name: "pro", BaseFeeMinor: 4900}))
	create := func(in billing.CustomerInput) string {
		t.Helper()
		id, err := r.prov.CreateCustomer(ctx, in)
		testenv.Must(t, err)
		return id
	}
	first := billing.CustomerInput{TenantID: tn.ID, TenantName: "acme", Email: "a@acme.example"}
	made := create(first)
	if again := create(first); again != made || len(creates(r.stripe, "/v1/customers")) != 1 {
		t.Errorf("the same request again made %s (first %s), %d customers; want the first, one", again, made,
			len(creates(r.stripe, "/v1/customers")))
	}
	seen := map[string]string{made: "the first request"}
	for what, in := range map[string]billing.CustomerInput{
		"another email":            {TenantID: tn.ID, TenantName: "acme", Email: "b@acme.example"},
		"no email":                 {TenantID: tn.ID, TenantName: "acme"},
		"another name":             {TenantID: tn.ID, TenantName: "acme-corp", Email: "a@acme.example"},
		"replacing the first made": {TenantID: tn.ID, TenantName: "acme", Email: "a@acme.example", Replacing: made},
	} {
		id := create(in)
		if other, ok := seen[id]; ok {
			t.Errorf("%s: answered with %s, the customer of %s; want a customer of its own", what, id, other)
		}
		seen[id] = what
	}
	keys := map[string]bool{}
	for _, q := range creates(r.stripe, "/v1/customers") {
		if !strings.HasPrefix(q.IdempotencyKey, "tollgate-customer-"+tn.ID) || keys[q.IdempotencyKey] {
			t.Errorf("key %q: want one per request, of the tenant's", q.IdempotencyKey)
		}
		keys[q.IdempotencyKey] = true
	}

	// Through the link: a second create, with another email, links the
	// tenant to a new customer, not to the first again.
	a := r.link(tn, billing.LinkInput{Create: true, Email: "a@acme.example"})
	b := r.link(tn, billing.LinkInput{Create: true, Email: "b@acme.example"})
	c := r.link(tn, billing.LinkInput{Create: true, Email: "b@acme.example"})
	if a.CustomerID == b.CustomerID || b.CustomerID == c.CustomerID || a.CustomerID == c.CustomerID {
		t.Errorf("creates linked %s, %s, %s; want three customers", a.CustomerID, b.CustomerID, c.CustomerID)
	}
}
