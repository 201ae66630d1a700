package stripe_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/billing/stripe"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/metering/meteringtest"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
	"github.com/tollgate/tollgate/internal/testenv/stripetest"
	"github.com/tollgate/tollgate/internal/usage"
)

// rig is a database, a local Stripe and invoicing on both, on a clock
// the test moves.
type rig struct {
	t      *testing.T
	db     *pgxpool.Pool
	stripe *stripetest.Server
	clock  *testenv.Clock
	mode   billing.InvoiceMode
	inv    *billing.Invoicing
	ops    *billing.Ops
	prov   *stripe.Provider
}

// newRig starts a rig whose invoicing pushes in mode, with a dunning
// grace of 72 hours, on October 15th.
func newRig(t *testing.T, mode billing.InvoiceMode) *rig {
	t.Helper()
	r := &rig{t: t, db: testenv.DB(t), stripe: stripetest.Start(t), clock: testenv.NewClock(meteringtest.Time(t, "2026-10-15T12:00:00Z")),
		mode: mode}
	r.connect(r.stripe.URL)
	return r
}

// connect points r's provider, invoicing and ops at the Stripe API at
// apiURL.
func (r *rig) connect(apiURL string) {
	r.prov = stripe.New(stripe.Config{SecretKey: stripetest.SecretKey, WebhookSecret: stripetest.WebhookSecret, APIURL: apiURL})
	r.inv = billing.NewInvoicing(r.db, billing.InvoicingConfig{Provider: r.prov, Mode: r.mode, DunningGrace: 72 * time.Hour,
		Log: slog.New(slog.DiscardHandler)}, r.clock.Now)
	r.ops = billing.NewOps(r.db, r.clock.Now).WithInvoicing(r.inv)
}

// tenant makes a tenant on p, on it since September.
func (r *rig) tenant(name string, p plans.Plan) tenants.Tenant {
	tn := fixture.Tenant(r.t, r.db, name, p.ID)
	_, err := r.db.Exec(context.Background(), `UPDATE tenant_plan_changes SET effective_at = '2026-09-01T00:00:00Z' WHERE tenant_id = $1`, tn.ID)
	testenv.Must(r.t, err)
	return tn
}

// use records units of October usage by tn.
func (r *rig) use(tn tenants.Tenant, units int64) {
	_, key := fixture.Key(r.t, r.db, tn.ID, "k")
	_, err := usage.NewStore(r.db, usage.StoreConfig{Now: r.clock.Now}).Apply(context.Background(), metering.Batch{Version: 1,
		ID: "oct:" + tn.ID, Rows: []metering.Row{meteringtest.Row(meteringtest.At(r.t, "2026-10-10T09:00"), tn.ID, key.ID, "GET /x",
			metering.Counts{Allowed: units, AllowedUnits: units})}})
	testenv.Must(r.t, err)
}

func (r *rig) link(tn tenants.Tenant, in billing.LinkInput) billing.Account {
	a, err := r.inv.LinkAccount(context.Background(), audit.CLI, tn.ID, in)
	testenv.Must(r.t, err)
	return a
}

// linkedTenant makes a tenant on p (see tenant) linked to the Stripe
// customer "cus_" + name.
func (r *rig) linkedTenant(name string, p plans.Plan) tenants.Tenant {
	tn := r.tenant(name, p)
	r.link(tn, billing.LinkInput{CustomerID: "cus_" + name})
	return tn
}

// acme makes the tenant most tests bill: acme, linked to cus_acme, on
// the plan pro of a 4900 base fee and nothing else.
func (r *rig) acme() tenants.Tenant {
	return r.linkedTenant("acme", fixture.Plan(r.t, r.db, plans.Plan{Name: "pro", BaseFeeMinor: 4900}))
}

// manama makes a tenant whose invoice Stripe cannot take: manama, linked
// to cus_manama, on a plan of a BHD 1005 base fee (three decimals, the
// last not 0).
func (r *rig) manama() tenants.Tenant {
	return r.linkedTenant("manama", fixture.Plan(r.t, r.db, plans.Plan{Name: "bhd", Currency: "BHD", BaseFeeMinor: 1005}))
}

// deliver signs payload as Stripe would, now, and applies it.
func (r *rig) deliver(payload []byte) (billing.EventResult, error) {
	ev, err := r.prov.ParseEvent(payload, stripetest.Sign(payload, stripetest.WebhookSecret, time.Now()))
	if err != nil {
		return billing.EventResult{}, err
	}
	return r.inv.ApplyEvent(context.Background(), ev)
}

// invoiceEvent delivers Stripe's event id of type typ about invoice in,
// sent now, failing the test if it is not applied.
func (r *rig) invoiceEvent(id, typ string, in stripetest.Invoice) {
	r.t.Helper()
	if _, err := r.deliver(stripetest.InvoiceEvent(id, typ, in, r.clock.Now())); err != nil {
		r.t.Fatal(err)
	}
}

// invoicesByCustomer returns the invoices at Stripe by their customer.
func (r *rig) invoicesByCustomer() map[string]stripetest.Invoice {
	byCustomer := map[string]stripetest.Invoice{}
	for _, in := range r.stripe.Invoices() {
		byCustomer[in.Customer] = in
	}
	return byCustomer
}

// failPayments delivers invoice.payment_failed for every invoice at
// Stripe and returns them by their customer.
func (r *rig) failPayments() map[string]stripetest.Invoice {
	r.t.Helper()
	for _, in := range r.stripe.Invoices() {
		r.invoiceEvent("evt_fail_"+in.ID, "invoice.payment_failed", in)
	}
	return r.invoicesByCustomer()
}

// twoFailing makes two tenants, a and b, linked on the plan standard of
// a 1000 base fee, closes October and fails the payment of the invoice
// of each, and returns them and their invoices by customer.
func (r *rig) twoFailing(a, b string) (tenants.Tenant, tenants.Tenant, map[string]stripetest.Invoice) {
	r.t.Helper()
	plan := fixture.Plan(r.t, r.db, plans.Plan{Name: "standard", BaseFeeMinor: 1000})
	ta, tb := r.linkedTenant(a, plan), r.linkedTenant(b, plan)
	r.closeOctober()
	return ta, tb, r.failPayments()
}

func (r *rig) count(query string, args ...any) int {
	var n int
	testenv.Must(r.t, r.db.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// creates returns the requests that reached Stripe and created something
// at path (not answered from an earlier idempotency key).
func creates(s *stripetest.Server, path string) []stripetest.Request {
	var out []stripetest.Request
	for _, q := range s.Requests() {
		if q.Method == "POST" && q.Path == path && !q.Replayed && q.Status == 200 {
			out = append(out, q)
		}
	}
	return out
}

var october = usage.MonthOf(time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC))

// closeOctober closes October on the morning of November 2nd and returns
// what the close did.
func (r *rig) closeOctober() billing.CloseResult {
	r.t.Helper()
	r.clock.Set(meteringtest.Time(r.t, "2026-11-02T08:00:00Z"))
	res, err := r.ops.CloseMonth(context.Background(), audit.CLI, october, nil)
	testenv.Must(r.t, err)
	return res
}

// tenantStatus returns tn's status now (active or suspended).
func (r *rig) tenantStatus(tn tenants.Tenant) string {
	r.t.Helper()
	got, err := tenants.NewStore(r.db).Get(context.Background(), tn.ID)
	testenv.Must(r.t, err)
	return got.Status
}

// invoiceOf returns the record of tn's only invoice.
func (r *rig) invoiceOf(tn tenants.Tenant) billing.InvoiceRecord {
	r.t.Helper()
	recs, err := r.inv.Invoices(context.Background(), tn.ID, nil)
	testenv.Must(r.t, err)
	if len(recs) != 1 {
		r.t.Fatalf("%s has %d invoices, want 1", tn.Name, len(recs))
	}
	return recs[0]
}

// wantDifferences checks the differences metric (Invoicing.Differences)
// is want; why says what the test expects it to count.
func (r *rig) wantDifferences(want int, why string) {
	r.t.Helper()
	if n, err := r.inv.Differences(context.Background()); err != nil || n != want {
		r.t.Errorf("differences %d, %v; want %d (%s)", n, err, want, why)
	}
}

// wantReconciled checks October's reconciliation is of one tenant, with
// no difference when parts is empty, else with one that contains each of
// parts.
func (r *rig) wantReconciled(parts ...string) {
	r.t.Helper()
	c, err := r.inv.Reconcile(context.Background(), october)
	ok := err == nil && len(c) == 1 && len(c[0].Differences) == min(len(parts), 1)
	for _, part := range parts {
		ok = ok && strings.Contains(c[0].Differences[0], part)
	}
	if !ok {
		r.t.Errorf("reconciliation %+v, %v; want one tenant's, with a difference saying %q (none if nothing)", c, err, parts)
	}
}

// wantPushedTo pushes (every pending invoice when all, else those due),
// wanting one invoice pushed and none left pending, and then Stripe to
// hold one invoice in all: customer's, of total (of any total when
// total is 0). when says what the push follows.
func (r *rig) wantPushedTo(customer string, total int64, all bool, when string) {
	r.t.Helper()
	if p, err := r.inv.Push(context.Background(), all); err != nil || p.Pushed != 1 || p.Pending != 0 {
		r.t.Fatalf("push %s: %+v, %v; want it pushed", when, p, err)
	}
	if made := r.stripe.Invoices(); len(made) != 1 || made[0].Customer != customer || total != 0 && made[0].Total != total {
		r.t.Errorf("invoices at Stripe %+v, want one at %s of %d", made, customer, total)
	}
}

// wantStatus checks tn's status is want (active or suspended); when says
// what it follows.
func (r *rig) wantStatus(tn tenants.Tenant, want, when string) {
	r.t.Helper()
	if got := r.tenantStatus(tn); got != want {
		r.t.Errorf("%s %s: %s, want %s", tn.Name, when, got, want)
	}
}

// refusal is an error answer of Stripe's.
type refusal struct {
	status      int
	code, param string
	message     string
}

// noSuchCustomer is Stripe's refusal of a request naming customer id,
// which it does not have (a mistyped ID, or a key of another mode).
func noSuchCustomer(id string) refusal {
	return refusal{404, "resource_missing", "customer", "No such customer: '" + id + "'"}
}

// refuser sits in front of the local Stripe and answers the requests
// that refuse selects with its refusal, as Stripe refuses them (the local
// Stripe's Down answers with a bare status only). Safe for concurrent
// use.
type refuser struct {
	mu     sync.Mutex
	refuse func(*http.Request) (refusal, bool)
}

func (f *refuser) set(refuse func(*http.Request) (refusal, bool)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = refuse
}

// refusing refuses every request to path (POST) with refusal.
func refusing(path string, with refusal) func(*http.Request) (refusal, bool) {
	return func(q *http.Request) (refusal, bool) { return with, q.Method == "POST" && q.URL.Path == path }
}

// newRigViaRefuser starts a rig (see newRig) whose provider reaches the
// local Stripe through a refuser.
func newRigViaRefuser(t *testing.T, mode billing.InvoiceMode) (*rig, *refuser) {
	t.Helper()
	r := newRig(t, mode)
	target, err := url.Parse(r.stripe.URL)
	testenv.Must(r.t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	f := &refuser{}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		f.mu.Lock()
		refuse := f.refuse
		f.mu.Unlock()
		if refuse != nil {
			if a, ok := refuse(q); ok {
				body := fmt.Sprintf(`{"error":{"type":"invalid_request_error","code":%q,"param":%q,"message":%q}}`, a.code, a.param, a.message)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(a.status)
				io.WriteString(w, body) //nolint:errcheck // the client went away
				return
			}
		}
		proxy.ServeHTTP(w, q)
	}))
	r.t.Cleanup(front.Close)
	r.connect(front.URL)
	return r, f
}

// dunAfterGrace moves the clock past the 72-hour dunning grace and runs
// dunning, which must suspend want tenants (who says which).
func (r *rig) dunAfterGrace(want int, who string) {
	r.t.Helper()
	r.clock.Advance(73 * time.Hour)
	if n, err := r.inv.Dunning(context.Background()); err != nil || n != want {
		r.t.Fatalf("dunning suspended %d (%v), want %d (%s)", n, err, want, who)
	}
}
