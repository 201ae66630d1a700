package credits_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/usage"
)

// clockedStore is the Redis store with its clock set by the test: every
// check and settlement runs at nowUS, as Redis's TIME would have it then.
type clockedStore struct {
	*redisstore.Store
	nowUS int64
}

func (s *clockedStore) Check(ctx context.Context, b limiter.Batch) (limiter.Outcome, error) {
	b.NowUS = s.nowUS
	return s.Store.Check(ctx, b)
}

func (s *clockedStore) Settle(ctx context.Context, req limiter.Settle) (limiter.Settlement, error) {
	req.NowUS = s.nowUS
	return s.Store.Settle(ctx, req)
}

// events keeps the usage events a checker records.
type events struct {
	mu  sync.Mutex
	all []tollgate.UsageEvent
}

func (e *events) Record(ev tollgate.UsageEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

// TestHoldOpenAtTheMonthsEndBillsOnce: a hold on a prepaid balance opened
// in the last minute of a month (its estimate drawn then) and settled in
// the next month's first counts in the month of its request: its usage
// (journaled, and the event the api process records), and the ledger's
// refund or extra draw, so that the two months' statements bill it once,
// as if it had been settled in its own month, whatever the settled cost.
// (Before, its units were usage of the month of the settlement, whose
// statement billed them as overage while the estimate, drawn the month
// before, paid for nothing.)
func TestHoldOpenAtTheMonthsEndBillsOnce(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cost     int64
		overage  int64 // units past the balance, billed
		balance0 int64
	}{
		{"settled below the estimate", 10, 0, 1000},
		{"settled above the estimate", 130, 0, 1000},
		{"settled past the balance", 130, 30, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, credits.ModeOverage, 0, 0)
			ps := plans.NewStore(r.db)
			p, err := ps.Get(ctx, r.planID)
			testenv.Must(t, err)
			p.Currency, p.OverageUnitMinor = "USD", 3
			_, err = ps.Update(ctx, r.planID, p)
			testenv.Must(t, err)
			r.topUp(tc.balance0)
			r.drain()

			store := &clockedStore{Store: redisstore.New(r.rdb)}
			rec := &events{}
			checker := enforce.NewChecker(r.holder, store, enforce.CheckerConfig{Prefix: r.prefix, NoLocalDenials: true,
				JournalUsage: true, Recorder: rec})
			t.Cleanup(checker.Close)

			// Months after the tenant's plan began (its history starts now).
			dec, _ := usage.ParseMonth(time.Now().AddDate(0, 1, 0).Format("2006-01"))
			jan, _ := usage.ParseMonth(dec.End().Format("2006-01"))
			opened := dec.End().Add(-30 * time.Second)
			store.nowUS = opened.UnixMicro()
			d, err := checker.Check(ctx, enforce.Request{Key: r.key, Cost: 100, Resource: "GET /x", Hold: true})
			if err != nil || !d.Allowed || d.HoldID == "" {
				t.Fatalf("hold: %+v, %v", d, err)
			}
			store.nowUS = jan.Start().Add(30 * time.Second).UnixMicro()
			if _, err := checker.Settle(ctx, d.HoldID, tc.cost); err != nil {
				t.Fatal(err)
			}
			r.agree()

			// The api process's event of the settlement is dated at the check.
			for _, ev := range rec.all {
				if ev.Hold == tollgate.HoldSettled && ev.AtUS != opened.UnixMicro() {
					t.Errorf("the settlement's usage event at %s, want %s (the check's)", time.UnixMicro(ev.AtUS).UTC(), opened)
				}
			}

			// The worker applies the journals.
			us := usage.NewStore(r.db, usage.StoreConfig{})
			w := &usage.Worker{Consumer: usage.NewJournalConsumer(r.rdb, r.prefix, time.Millisecond), Store: us,
				FetchCount: 8, RetryMax: 100 * time.Millisecond}
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- w.Run(runCtx) }()
			bs := billing.NewStore(r.db, nil)
			statement := func(m usage.Month) billing.Statement {
				st, err := bs.Statement(ctx, r.tenantID, m)
				testenv.Must(t, err)
				return st
			}
			testenv.Eventually(t, time.Now(), 30*time.Second, "the hold's usage applied", func() (bool, string) {
				return statement(dec).Usage.AllowedUnits+statement(jan).Usage.AllowedUnits == tc.cost, "units short"
			})
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}

			o, n := statement(dec), statement(jan)
			if o.Usage.Allowed != 1 || o.Usage.AllowedUnits != tc.cost || n.Usage.AllowedUnits != 0 {
				t.Errorf("usage: %s %d decisions, %d units; %s %d units; want 1 decision and %d units in %s, none after",
					dec, o.Usage.Allowed, o.Usage.AllowedUnits, jan, n.Usage.AllowedUnits, tc.cost, dec)
			}
			if len(o.Plans) != 1 || len(n.Plans) != 1 {
				t.Fatalf("plan periods %d and %d, want 1 each", len(o.Plans), len(n.Plans))
			}
			if got, want := o.Plans[0].CreditUnits, tc.cost; got != want {
				t.Errorf("%s: credit units %d, want %d (the hold's settled cost, drawn and settled in its month)", dec, got, want)
			}
			if got := n.Plans[0].CreditUnits; got != 0 {
				t.Errorf("%s: credit units %d, want 0", jan, got)
			}
			if got, want := o.OverageMinor+n.OverageMinor, 3*tc.overage; got != want {
				t.Errorf("overage billed %d minor (%s %d units, %s %d units), want %d: the hold's units past its balance once",
					got, dec, o.Plans[0].OverageUnits, jan, n.Plans[0].OverageUnits, want)
			}
			if got, want := o.Plans[0].OverageUnits, tc.overage; got != want {
				t.Errorf("%s: overage units %d, want %d", dec, got, want)
			}
		})
	}
}
