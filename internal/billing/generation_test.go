package billing

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestEarlierDraftsDeletionKeepsThePush: the deletion of the draft an
// invoice had before a retarget, reported while the re-targeted invoice's
// push is in flight (its ID not recorded yet), neither fails the invoice
// nor loses the push's record of success.
func TestEarlierDraftsDeletionKeepsThePush(t *testing.T) {
	r := newPushRig(t, "acme")
	ctx := context.Background()
	if _, err := r.inv.Retarget(ctx, audit.CLI, r.record(t, "acme").TenantID, october(t)); err != nil {
		t.Fatal(err)
	}
	r.fake.push = func(ctx context.Context, in Invoice) (PushedInvoice, error) {
		res, err := r.inv.ApplyEvent(ctx, ProviderEvent{ID: "evt_old_deleted", Type: "invoice.deleted", Kind: EventInvoiceDeleted,
			InvoiceID: "in_old", InvoiceRef: in.Ref, CustomerID: in.CustomerID, Generation: in.Generation - 1, At: r.clock.Now()})
		testenv.Must(t, err)
		if !res.Unknown {
			t.Errorf("the earlier draft's deletion: %+v, want it unknown", res)
		}
		return PushedInvoice{ID: "in_new", Status: "draft", TotalMinor: in.TotalMinor, Currency: in.Currency}, nil
	}
	r.clock.Advance(time.Hour)
	if p, err := r.inv.Push(ctx, false); err != nil || p.Pushed != 1 {
		t.Fatalf("push: %+v, %v", p, err)
	}
	if rec := r.record(t, "acme"); rec.PushState != PushPushed || rec.ProviderInvoiceID != "in_new" || rec.Generation != 1 {
		t.Errorf("record %s as %q, generation %d; want pushed as in_new, generation 1", rec.PushState, rec.ProviderInvoiceID, rec.Generation)
	}
}
