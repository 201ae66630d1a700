package billing

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
)

// fakeProvider pushes invoices with push; it does nothing else.
type fakeProvider struct {
	push func(context.Context, Invoice) (PushedInvoice, error)
}

var errFake = errors.New("not in these tests")

func (f *fakeProvider) CreateCustomer(context.Context, CustomerInput) (string, error) {
	return "", errFake
}
func (f *fakeProvider) PushInvoice(ctx context.Context, in Invoice) (PushedInvoice, error) {
	return f.push(ctx, in)
}
func (f *fakeProvider) FindInvoices(context.Context, string, string) ([]PushedInvoice, error) {
	return nil, errFake
}
func (f *fakeProvider) OpenCheckout(context.Context, CheckoutInput) (CheckoutSession, error) {
	return CheckoutSession{}, errFake
}
func (f *fakeProvider) ParseEvent([]byte, string) (ProviderEvent, error) {
	return ProviderEvent{}, errFake
}

// pushRig is invoicing on a fake provider with an October closed for
// the tenants named, each with a billing account: their invoices are
// pending, their first push failed.
type pushRig struct {
	db    *pgxpool.Pool
	clock *testenv.Clock
	fake  *fakeProvider
	inv   *Invoicing
	refs  map[string]string // by tenant name
}

func newPushRig(t *testing.T, names ...string) *pushRig {
	t.Helper()
	ctx := context.Background()
	r := &pushRig{db: testenv.DB(t), clock: testenv.NewClock(mustTime(t, "2026-11-02T08:00:00Z")), refs: map[string]string{},
		fake: &fakeProvider{push: func(context.Context, Invoice) (PushedInvoice, error) {
			return PushedInvoice{}, errors.New("the provider is down")
		}}}
	r.inv = NewInvoicing(r.db, InvoicingConfig{Provider: r.fake, Mode: ModeFinalize}, r.clock.Now)
	p := fixture.Plan(t, r.db, plans.Plan{Name: "pro", BaseFeeMinor: 2000})
	for _, name := range names {
		tn := fixture.Tenant(t, r.db, name, p.ID)
		_, err := r.db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-09-01T00:00:00Z' WHERE tenant_id = $1`, tn.ID)
		testenv.Must(t, err)
		_, err = r.inv.LinkAccount(ctx, audit.CLI, tn.ID, LinkInput{CustomerID: "cus_" + name})
		testenv.Must(t, err)
		r.refs[name] = InvoiceRef(tn.ID, "2026-10")
	}
	res, err := NewOps(r.db, r.clock.Now).WithInvoicing(r.inv).CloseMonth(ctx, audit.CLI, october(t), nil)
	testenv.Must(t, err)
	if res.Invoices.Pending != len(names) {
		t.Fatalf("close: %+v, want %d invoices pending", res.Invoices, len(names))
	}
	return r
}

func (r *pushRig) record(t *testing.T, name string) InvoiceRecord {
	t.Helper()
	rec, err := scanInvoice(r.db.QueryRow(context.Background(), `SELECT `+invoiceColumns+` FROM invoices i
		LEFT JOIN tenants t ON t.id = i.tenant_id WHERE i.ref = $1`, r.refs[name]))
	testenv.Must(t, err)
	return rec
}

// TestLatePushKeepsTheEventsWord: an invoice paid, and its event
// applied, while its push is finishing keeps the provider's view the
// event recorded, and is recorded pushed.
func TestLatePushKeepsTheEventsWord(t *testing.T) {
	r := newPushRig(t, "acme")
	ctx := context.Background()
	r.fake.push = func(ctx context.Context, in Invoice) (PushedInvoice, error) {
		_, err := r.inv.ApplyEvent(ctx, ProviderEvent{ID: "evt_paid", Type: "invoice.paid", Kind: EventInvoicePaid,
			InvoiceID: "in_1", InvoiceRef: in.Ref, TotalMinor: in.TotalMinor, AmountPaidMinor: in.TotalMinor,
			Currency: in.Currency, At: r.clock.Now()})
		return PushedInvoice{ID: "in_1", Status: "open", TotalMinor: in.TotalMinor, Currency: in.Currency}, err
	}
	r.clock.Advance(time.Hour)
	if p, err := r.inv.Push(ctx, false); err != nil || p.Pushed != 1 {
		t.Fatalf("push: %+v, %v", p, err)
	}
	rec := r.record(t, "acme")
	if rec.PushState != "pushed" || rec.PaymentStatus != "paid" || rec.ProviderStatus != "paid" || rec.ProviderInvoiceID != "in_1" {
		t.Errorf("record push %s, payment %s, provider status %q, invoice %q; want pushed, paid, paid (the event's), in_1",
			rec.PushState, rec.PaymentStatus, rec.ProviderStatus, rec.ProviderInvoiceID)
	}
}

// TestLatePushKeepsAnotherPushersRecord: a push that ends after another
// pusher recorded the invoice pushed changes nothing of that record,
// whether it failed or made another invoice.
func TestLatePushKeepsAnotherPushersRecord(t *testing.T) {
	for name, outcome := range map[string]func(Invoice) (PushedInvoice, error){
		"failed": func(Invoice) (PushedInvoice, error) { return PushedInvoice{}, errors.New("timed out") },
		"pushed": func(in Invoice) (PushedInvoice, error) {
			return PushedInvoice{ID: "in_2", Status: "draft", TotalMinor: in.TotalMinor, Currency: in.Currency}, nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := newPushRig(t, "acme")
			ctx := context.Background()
			r.fake.push = func(ctx context.Context, in Invoice) (PushedInvoice, error) {
				_, err := r.db.Exec(ctx, `UPDATE invoices SET push_state = 'pushed', push_attempts = 2, pushed_at = $2,
					last_error = '', provider_invoice_id = 'in_1', provider_status = 'open', provider_total_minor = total_minor,
					provider_currency = currency WHERE ref = $1`, in.Ref, r.clock.Now())
				testenv.Must(t, err)
				return outcome(in)
			}
			r.clock.Advance(time.Hour)
			before := r.record(t, "acme")
			if _, err := r.inv.Push(ctx, false); err != nil {
				t.Fatal(err)
			}
			rec := r.record(t, "acme")
			if rec.PushState != "pushed" || rec.ProviderInvoiceID != "in_1" || rec.ProviderStatus != "open" ||
				rec.LastError != "" || rec.PushAttempts != 2 || !rec.NextPushAt.Equal(before.NextPushAt) {
				t.Errorf("record %+v, want the other pusher's: pushed as in_1, open, no error, 2 attempts", rec)
			}
		})
	}
}

// TestPushAllKeepsTheLease: pushing everything now pushes invoices
// waiting out a backoff, but not one another process is pushing.
func TestPushAllKeepsTheLease(t *testing.T) {
	r := newPushRig(t, "acme", "globex")
	ctx := context.Background()
	var mu sync.Mutex
	calls := map[string]int{}
	started, release := make(chan string, 1), make(chan struct{})
	r.fake.push = func(ctx context.Context, in Invoice) (PushedInvoice, error) {
		mu.Lock()
		calls[in.Ref]++
		first := len(calls) == 1 && calls[in.Ref] == 1
		mu.Unlock()
		if first {
			started <- in.Ref
			<-release
		}
		return PushedInvoice{ID: "in_" + in.Ref, Status: "open", TotalMinor: in.TotalMinor, Currency: in.Currency}, nil
	}
	// Both invoices wait out the backoff of their failed first push.
	if p, err := r.inv.Push(ctx, false); err != nil || p.Pushed+p.Failed != 0 {
		t.Fatalf("push within the backoff: %+v, %v; want nothing tried", p, err)
	}

	type result struct {
		report PushReport
		err    error
	}
	first := make(chan result, 1)
	go func() {
		p, err := r.inv.Push(ctx, true)
		first <- result{p, err}
	}()
	leased := <-started
	other := NewInvoicing(r.db, InvoicingConfig{Provider: r.fake, Mode: ModeFinalize}, r.clock.Now)
	p, err := other.Push(ctx, true)
	close(release)
	if err != nil || p.Pushed != 1 || p.Failed != 0 {
		t.Errorf("another process pushing everything: %+v, %v; want the invoice not being pushed pushed", p, err)
	}
	res := <-first
	if res.err != nil || res.report.Pushed != 1 || res.report.Pending != 0 {
		t.Errorf("the first push: %+v, %v; want its invoice pushed", res.report, res.err)
	}
	for name, ref := range r.refs {
		if calls[ref] != 1 {
			t.Errorf("%s's invoice pushed %d times, want once (leased first: %v)", name, calls[ref], ref == leased)
		}
		if rec := r.record(t, name); rec.PushState != "pushed" {
			t.Errorf("%s's invoice %s", name, rec.PushState)
		}
	}
}
