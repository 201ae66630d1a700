package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	tollgate "github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/usage"
)

// TestSpendCapSetMidMonthCountsTheWholeMonth: a cap set after the tenant
// ran past its included units counts the units already used this month,
// so the month's statement stays within the base fee plus the cap; a cap
// below what is already used denies at once. GET /v1/me shows the
// month's units past the included ones.
func TestSpendCapSetMidMonthCountsTheWholeMonth(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	ctx := context.Background()
	metered := plans.Plan{Name: "metered", BaseFeeMinor: 1000, IncludedUnits: 100, OverageUnitMinor: 2, QuotaMode: plans.QuotaOverage}
	late, lateKey := quotaTenant(t, r, "late", metered, quota.PlanSettingsInput{})
	low, lowKey := quotaTenant(t, r, "low", metered, quota.PlanSettingsInput{})
	apis := r.startFleet(t, 3)
	before := map[string]int64{}
	for _, k := range []string{lateKey, lowKey} {
		got, denied := r.spend(t, apis.addrs(), k, 150, 5000)
		if got < 150 || len(denied) > 0 {
			t.Fatalf("before the cap: %d units allowed, denials %v", got, denied)
		}
		before[k] = got
	}
	var st tollgate.Standing
	if status, _, p := getMe(t, "http://"+apis.addrs()[0], bearer(lateKey), &st); status != http.StatusOK || st.Quota == nil ||
		st.Quota.Used != before[lateKey] || st.Quota.Remaining != 0 {
		t.Errorf("GET /v1/me: %d %v, quota %+v; want %d used of 100", status, p, st.Quota, before[lateKey])
	}

	// 200 of overage money pays for 100 overage units: 200 units in all.
	// 40 pays for 20: 120 units, fewer than the tenant already used.
	ops := quota.NewOps(r.db)
	capMinor, lowCap := int64(200), int64(40)
	_, err := ops.SetTenantSpendCap(ctx, audit.CLI, late, &capMinor)
	testenv.Must(t, err)
	_, err = ops.SetTenantSpendCap(ctx, audit.CLI, low, &lowCap)
	testenv.Must(t, err)
	for _, a := range apis.addrs() {
		waitForRule(t, r, a, lateKey, plans.SpendCapRuleName)
		waitForRule(t, r, a, lowKey, plans.SpendCapRuleName)
	}

	after, denied := r.spend(t, apis.addrs(), lateKey, 1<<40, 3000)
	if total := before[lateKey] + after; total > 200 || total < 198 || denied[tollgate.ReasonSpendCap] == 0 || len(denied) != 1 {
		t.Errorf("after the cap: %d units in the month (want 198–200: the last checks cost up to 3), denials %v (want spend_cap only)",
			total, denied)
	}
	if after, denied := r.spend(t, apis.addrs(), lowKey, 1<<40, 60); after != 0 || denied[tollgate.ReasonSpendCap] != 60 {
		t.Errorf("a cap below the month's units: %d more units allowed, denials %v; want every check denied with spend_cap", after, denied)
	}
	apis.settle(t)
	stmt, err := billing.NewStore(r.db, nil).Statement(ctx, late, usage.MonthOf(time.Now()))
	testenv.Must(t, err)
	if stmt.Usage.AllowedUnits != before[lateKey]+after || stmt.TotalMinor > stmt.BaseFeeMinor+capMinor {
		t.Errorf("statement: %d units, base %d, total %d; want %d units and total ≤ base + %d",
			stmt.Usage.AllowedUnits, stmt.BaseFeeMinor, stmt.TotalMinor, before[lateKey]+after, capMinor)
	}
}

// waitForRule waits until a dry run of key on the api at addr applies
// the rule named name: the api has loaded the change that brought it.
func waitForRule(t *testing.T, r *rig, addr, key, name string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	testenv.Eventually(t, time.Now(), 10*time.Second, "the api applies "+name, func() (bool, string) {
		var d struct {
			Rules []struct {
				Name string `json:"name"`
			} `json:"rules"`
		}
		err := postJSON(client, "http://"+addr+"/v1/check", r.token, map[string]any{"key": key, "resource": "GET /x", "dry_run": true}, &d)
		names := []string{}
		for _, rr := range d.Rules {
			names = append(names, rr.Name)
		}
		return err == nil && slices.Contains(names, name), fmt.Sprintf("rules %v, %v", names, err)
	})
}
