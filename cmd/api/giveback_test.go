package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// giveBackBound is how long after units are given back in the store (a
// hold settled below its estimate or expired, a lease released) another
// api process may still deny them from its local denials: their longest
// life (enforce's maxDenialLife, a second), plus a margin for polling and
// the machine.
const giveBackBound = time.Second + 250*time.Millisecond

// TestLocalDenialsFollowGiveBacksAcrossProcesses: three api processes;
// a budget of 100 a week with holds. On process A a hold takes the whole
// budget and a check of 1 is denied, on every process, twice (the second
// from the local denials). Once the hold expires unsettled (a refund),
// or once it is settled at 0 on another process, every process admits a
// check of 1 within giveBackBound of the store showing the budget back;
// the process that settled admits at once.
func TestLocalDenialsFollowGiveBacksAcrossProcesses(t *testing.T) {
	f := newFixture(t)
	plan := plans.Plan{Name: "budget", DisplayName: "budget", Currency: "USD", Rules: []plans.Rule{{
		Name: "budget", Algorithm: limiter.GCRA, Limit: 100, PeriodUS: 604_800_000_000, Burst: 100,
		Resource: "*", Scope: plans.ScopeKey, Mode: plans.ModeEnforce, FailureMode: plans.FailClosed,
		Options: plans.Options{Hold: true},
	}}}
	ctx := context.Background()
	stored, err := plans.NewStore(f.db).Put(ctx, plan)
	testenv.Must(t, err)
	keyOf := func(tenant string) string {
		ts := tenants.NewStore(f.db)
		tn, err := ts.Create(ctx, tenant, stored.ID)
		testenv.Must(t, err)
		key, _, err := ts.IssueKey(ctx, tn.ID, "k", nil)
		testenv.Must(t, err)
		return key
	}
	expiring, settling := keyOf("expiring"), keyOf("settling")
	nodes := []string{f.startAPI(t, nil), f.startAPI(t, nil), f.startAPI(t, nil)}
	check := func(node, key string, cost int, extra string) checkResponse {
		t.Helper()
		return post(t, node, f.token, fmt.Sprintf(`{"key":%q,"cost":%d%s}`, key, cost, extra))
	}
	denyEverywhere := func(key string) {
		t.Helper()
		for i, n := range nodes {
			for range 2 {
				if r := check(n, key, 1, ""); r.body["allowed"] != false {
					t.Fatalf("process %d: a check of 1 on a spent budget: %v", i, r.body)
				}
			}
		}
	}
	// everyoneAdmits waits for the store to show the budget back, then for
	// each process to admit a check of 1 within giveBackBound of that.
	everyoneAdmits := func(key string, what string) {
		t.Helper()
		// A check of cost 0 always asks the store.
		testenv.WaitFor(t, 10*time.Second, what+": the budget back in the store", func() bool {
			return remaining(t, nodes[1], f.token, key) >= 1
		})
		back := time.Now()
		for i, n := range nodes {
			testenv.Eventually(t, back, giveBackBound, fmt.Sprintf("%s: process %d admits", what, i), func() (bool, string) {
				r := check(n, key, 1, "")
				return r.body["allowed"] == true, fmt.Sprint(r.body["reason"])
			})
		}
	}

	// The hold expires unsettled: its 100 units are refunded.
	if r := check(nodes[0], expiring, 100, `,"hold":true,"hold_ttl_s":2`); r.body["allowed"] != true {
		t.Fatalf("hold of 100: %v", r.body)
	}
	denyEverywhere(expiring)
	everyoneAdmits(expiring, "expired hold")

	// The hold is settled at 0 on process B.
	r := check(nodes[0], settling, 100, `,"hold":true`)
	id, _ := r.body["hold_id"].(string)
	if r.body["allowed"] != true || id == "" {
		t.Fatalf("hold of 100: %v", r.body)
	}
	denyEverywhere(settling)
	if code, st := settle(t, nodes[1], f.token, id, 0); code != 200 {
		t.Fatalf("settle at 0: %d %v", code, st)
	}
	if r := check(nodes[1], settling, 1, ""); r.body["allowed"] != true {
		t.Errorf("the process that settled at 0 denies: %v", r.body)
	}
	everyoneAdmits(settling, "settled at 0")
}
