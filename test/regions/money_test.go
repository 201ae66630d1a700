package regions

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
)

// money draws a prepaid balance of 600 with an overdraft of 50 from the
// three regions at 30 checks/s each, with ap cut off for 10 s in the
// middle (its NATS routes partitioned and its worker stopped, so its
// drainer neither records its draws nor reserves it escrow): the regions
// together never admit more than 650, ap no more while cut off than it
// held, and the ledger records every admitted unit once.
func (b *bed) money(t *testing.T) {
	ctx := context.Background()
	const balance, overdraft, rate = 600, 50, 30
	p, err := plans.NewStore(b.db).Put(ctx, plans.Plan{Name: "prepaid", Rules: []plans.Rule{{Name: "hourly",
		Resource: "GET /paid", Algorithm: limiter.GCRA, Limit: 1_000_000, PeriodUS: limiter.HourUS, Scope: plans.ScopeTenant}}})
	testenv.Must(t, err)
	ops := credits.NewOps(b.db, nil)
	_, err = ops.SetPlan(ctx, audit.CLI, p.ID, credits.PlanSettingsInput{Mode: credits.ModeDeny, Overdraft: overdraft})
	testenv.Must(t, err)
	tn := fixture.Tenant(t, b.db, "prepaid", p.ID)
	key, _ := fixture.Key(t, b.db, tn.ID, "paid")
	_, err = ops.Grant(ctx, audit.CLI, tn.ID, credits.GrantInput{Amount: balance, Cause: "top-up"})
	testenv.Must(t, err)
	store := credits.NewStore(b.db)

	var mu sync.Mutex
	admitted := map[string]int64{}
	check := func(name string) {
		a, _, err := b.checkKey(b.apis[name], key, "GET /paid", 1)
		if err != nil {
			t.Error(err)
			return
		}
		if a.Allowed {
			mu.Lock()
			admitted[name]++
			mu.Unlock()
		}
	}
	// Every region draws once it knows the key and holds escrow.
	for _, name := range names {
		testenv.Eventually(t, time.Now(), 30*time.Second, name+" drawing on the balance", func() (bool, string) {
			check(name)
			mu.Lock()
			defer mu.Unlock()
			return admitted[name] > 0, ""
		})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() {
			tick := time.NewTicker(time.Second / rate)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					wg.Go(func() { check(name) })
				}
			}
		})
	}
	time.Sleep(4 * time.Second) // fault injection: the load before the cut
	b.net.Partition("ap")
	testenv.Must(t, b.workers["ap"].Signal(syscall.SIGSTOP))
	cont := func() { _ = b.workers["ap"].Signal(syscall.SIGCONT) }
	defer cont()
	mu.Lock()
	apAtCut := admitted["ap"]
	mu.Unlock()
	var held int64
	escrows, err := store.Escrows(ctx, tn.ID)
	testenv.Must(t, err)
	for _, e := range escrows {
		if e.Region == "ap" {
			held = e.Held
		}
	}
	time.Sleep(10 * time.Second) // fault injection: the cut lasts
	mu.Lock()
	apCut := admitted["ap"] - apAtCut
	mu.Unlock()
	cont()
	b.net.Heal("ap")
	time.Sleep(10 * time.Second) // fault injection: the load after the heal
	close(stop)
	wg.Wait()
	var total int64
	for _, n := range admitted {
		total += n
	}
	testenv.Eventually(t, time.Now(), 30*time.Second, "the ledger recording every region's draws", func() (bool, string) {
		bal, err := store.Balance(ctx, tn.ID)
		return err == nil && bal.Consumed == total, fmt.Sprintf("consumed %d of %d (%v)", bal.Consumed, total, err)
	})
	bal, err := store.Balance(ctx, tn.ID)
	testenv.Must(t, err)
	t.Logf("figure money: a balance of %d with an overdraft of %d drawn from three regions at %d checks/s each: admitted %d in all (us %d, eu %d, ap %d; bound %d); ap cut off 10 s admitted %d, holding %d at the cut; ledger consumed %d, balance %d",
		balance, overdraft, rate, total, admitted["us"], admitted["eu"], admitted["ap"], balance+overdraft, apCut, held, bal.Consumed, bal.Balance)
	if total > balance+overdraft {
		t.Errorf("admitted %d, above the balance and its overdraft, %d", total, balance+overdraft)
	}
	if apCut > held {
		t.Errorf("ap admitted %d while cut off, holding %d", apCut, held)
	}
	if bal.Balance < -overdraft {
		t.Errorf("the ledger's balance is %d, below -%d", bal.Balance, overdraft)
	}
	if total < balance {
		t.Errorf("admitted %d: the regions left part of the balance of %d undrawn", total, balance)
	}
}
