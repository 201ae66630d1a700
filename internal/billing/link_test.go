package billing

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
)

// TestRelinkWaitsForACloseInFlight: a close that has read a tenant's
// customer to issue its invoice holds a relink back until it commits;
// the relink then sees the invoice still to push and is refused, so the
// invoice is never issued to a customer the tenant has left.
func TestRelinkWaitsForACloseInFlight(t *testing.T) {
	db := testenv.DB(t)
	ctx := context.Background()
	clock := testenv.NewClock(mustTime(t, "2026-11-02T08:00:00Z"))
	inv := NewInvoicing(db, InvoicingConfig{Provider: &fakeProvider{}}, clock.Now)
	p := fixture.Plan(t, db, plans.Plan{Name: "free"})
	tn := fixture.Tenant(t, db, "acme", p.ID)
	_, err := inv.LinkAccount(ctx, audit.CLI, tn.ID, LinkInput{CustomerID: "cus_acme"})
	testenv.Must(t, err)

	// The close's part for acme: its statement, and its invoice issued
	// to the customer it reads.
	tx, err := db.Begin(ctx)
	testenv.Must(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	st := Statement{TenantID: tn.ID, TenantName: tn.Name, Month: "2026-10", PeriodStart: october(t).Start(), Currency: "USD"}
	_, err = tx.Exec(ctx, `INSERT INTO usage_closed_months (month, closed_at, statements) VALUES ($1, $2, 1)`,
		st.PeriodStart, clock.Now())
	testenv.Must(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO statements (tenant_id, month, currency, total_minor, body, closed_at)
		VALUES ($1, $2, 'USD', 0, '{}', $3)`, tn.ID, st.PeriodStart, clock.Now())
	testenv.Must(t, err)
	_, err = issueInvoice(ctx, tx, st, clock.Now())
	testenv.Must(t, err)

	linked := make(chan error, 1)
	go func() {
		_, err := inv.LinkAccount(ctx, audit.CLI, tn.ID, LinkInput{CustomerID: "cus_elsewhere"})
		linked <- err
	}()
	select {
	case err := <-linked:
		t.Fatalf("the relink finished (%v) while a close issuing to the customer was in flight", err)
	case <-time.After(300 * time.Millisecond):
	}
	testenv.Must(t, tx.Commit(ctx))
	if err := <-linked; tollgate.ErrorCode(err) != tollgate.ECONFLICT {
		t.Errorf("relink after the close: %v, want ECONFLICT", err)
	}
	var customer string
	testenv.Must(t, db.QueryRow(ctx, `SELECT customer_id FROM invoices WHERE tenant_id = $1`, tn.ID).Scan(&customer))
	if a, err := inv.Account(ctx, tn.ID); err != nil || a.CustomerID != customer {
		t.Errorf("account %+v (%v), invoice issued to %s; want them the same", a, err, customer)
	}
}
