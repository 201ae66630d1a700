package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/usage"
)

// These tests drive one tenant's monthly count across quota thresholds
// and its spend cap through several api processes at once, and require
// each crossing recorded exactly once and the month's statement within
// the cap.

// quotaTenant makes a plan with settings and a tenant on it (on the plan
// since the month began, so that nothing is prorated) and returns the
// tenant's ID and a key.
func quotaTenant(t *testing.T, r *rig, name string, p plans.Plan, in quota.PlanSettingsInput) (string, string) {
	t.Helper()
	ctx := context.Background()
	plan, err := plans.NewStore(r.db).Put(ctx, p)
	testenv.Must(t, err)
	_, err = quota.NewOps(r.db).SetPlan(ctx, audit.CLI, plan.ID, in)
	testenv.Must(t, err)
	ts := tenants.NewStore(r.db)
	tn, err := ts.Create(ctx, name, plan.ID)
	testenv.Must(t, err)
	_, err = r.db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
		WHERE tenant_id = $1`, tn.ID)
	testenv.Must(t, err)
	secret, _, err := ts.IssueKey(ctx, tn.ID, "", nil)
	testenv.Must(t, err)
	return tn.ID, secret
}

// spend sends checks of cost 1–3 for key over apis from 12 goroutines
// until units allowed units are reached or a check is denied with
// stopOn (any reason when ""), n checks at most; it returns the allowed
// units and the denials by reason.
func (r *rig) spend(t *testing.T, apis []string, key string, units, n int64) (int64, map[string]int64) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	var allowed, sent atomic.Int64
	denied := map[string]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; ; i += 12 {
				if allowed.Load() >= units || sent.Add(1) > n {
					return
				}
				cost := int64(1 + i%3)
				d, err := checkReason(client, apis[i%len(apis)], r.token, map[string]any{"key": key, "resource": "GET /x", "cost": cost})
				if err != nil {
					t.Errorf("check: %v", err)
					return
				}
				if d.Allowed {
					allowed.Add(cost)
					continue
				}
				mu.Lock()
				denied[d.Reason]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return allowed.Load(), denied
}

func checkReason(client *http.Client, addr, token string, body map[string]any) (struct {
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason"`
}, error) {
	var d struct {
		Allowed bool   `json:"allowed"`
		Reason  string `json:"reason"`
	}
	err := postJSON(client, "http://"+addr+"/v1/check", token, body, &d)
	return d, err
}

// crossings returns the tenant's recorded crossings of kind as units →
// count, and the number of events of typ.
func crossings(t *testing.T, r *rig, tenantID, kind, typ string) (map[int64]int, int) {
	t.Helper()
	ctx := context.Background()
	rows, err := r.db.Query(ctx, `SELECT units FROM quota_crossings WHERE tenant_id = $1 AND kind = $2`, tenantID, kind)
	testenv.Must(t, err)
	got := map[int64]int{}
	for rows.Next() {
		var u int64
		testenv.Must(t, rows.Scan(&u))
		got[u]++
	}
	rows.Close()
	var events int
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT count(*) FROM events WHERE tenant_id = $1 AND type = $2`,
		tenantID, typ).Scan(&events))
	return got, events
}

func addrs(apis []*api) []string {
	var out []string
	for _, a := range apis {
		out = append(out, a.addr)
	}
	return out
}

// fleet is api processes and a usage worker on one rig: a test spends
// through the processes at once, settles, and reads what the worker
// applied.
type fleet struct {
	r          *rig
	apis       []*api
	stopWorker func() error
}

// startFleet starts n api processes and a usage worker.
func (r *rig) startFleet(t *testing.T, n int) *fleet {
	t.Helper()
	f := &fleet{r: r}
	for range n {
		f.apis = append(f.apis, r.startAPI(t))
	}
	f.stopWorker = runWorker(r.worker("w"))
	return f
}

// addrs are the api processes' addresses.
func (f *fleet) addrs() []string { return addrs(f.apis) }

// settle stops the api processes, which publish their last usage, waits
// until the worker has applied every batch, and stops it.
func (f *fleet) settle(t *testing.T) {
	t.Helper()
	for _, a := range f.apis {
		testenv.Must(t, a.stop())
	}
	f.r.waitDrained(t)
	testenv.Must(t, f.stopWorker())
}

func TestQuotaThresholdCrossedOnceAcrossThreeAPIs(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	metered := plans.Plan{Name: "metered", BaseFeeMinor: 500, IncludedUnits: 1000, OverageUnitMinor: 2, QuotaMode: plans.QuotaOverage}
	settings := quota.PlanSettingsInput{Thresholds: []quota.Threshold{{Percent: 50}, {Units: 900}, {Remaining: 40}}}
	busy, busyKey := quotaTenant(t, r, "busy", metered, settings)
	quiet, quietKey := quotaTenant(t, r, "quiet", metered, settings)
	apis := r.startFleet(t, 3)
	// 990 units (up to 12 × 3 more in flight): past 500, 900 and 960 (40
	// left).
	if got, denied := r.spend(t, apis.addrs(), busyKey, 990, 5000); got < 990 || len(denied) > 0 {
		t.Fatalf("busy tenant: %d units allowed, denials %v", got, denied)
	}
	// 400 units: the checks in flight when it is reached add at most 12 × 3.
	if got, denied := r.spend(t, apis.addrs(), quietKey, 400, 5000); got < 400 || got > 436 || len(denied) > 0 {
		t.Fatalf("quiet tenant: %d units allowed, denials %v", got, denied)
	}
	apis.settle(t)
	got, events := crossings(t, r, busy, "threshold", quota.EventThresholdCrossed)
	if want := map[int64]int{500: 1, 900: 1, 960: 1}; fmt.Sprint(got) != fmt.Sprint(want) || events != 3 {
		t.Errorf("busy tenant: crossings %v and %d events, want %v and 3", got, events, want)
	}
	var fromChecks int
	testenv.Must(t, r.db.QueryRow(context.Background(), `SELECT count(*) FROM quota_crossings WHERE tenant_id = $1 AND source = 'check'`,
		busy).Scan(&fromChecks))
	t.Logf("%d of 3 crossings recorded from the checks' batches", fromChecks)
	// A quiet tenant that stays under its first threshold crosses nothing.
	if got, events := crossings(t, r, quiet, "threshold", quota.EventThresholdCrossed); len(got) != 0 || events != 0 {
		t.Errorf("quiet tenant: crossings %v and %d events, want none", got, events)
	}
}

func TestQuotaCrossingOfAKilledAPIIsReconciled(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	r := newRig(t, dbURL)
	thresholds := quota.PlanSettingsInput{Thresholds: []quota.Threshold{{Units: 100}}}
	tenantID, key := quotaTenant(t, r, "watched", plans.Plan{Name: "watched", IncludedUnits: 1000, QuotaMode: plans.QuotaHard}, thresholds)
	quietID, quietKey := quotaTenant(t, r, "quiet", plans.Plan{Name: "calm", IncludedUnits: 1000, QuotaMode: plans.QuotaOverage}, thresholds)
	live := r.startAPI(t)
	stop := runWorker(r.counterWorker("w"))
	defer func() { testenv.Must(t, stop()) }()
	client := &http.Client{Timeout: 10 * time.Second}
	one := func(addr, key string, cost int64) {
		t.Helper()
		d, err := checkReason(client, addr, r.token, map[string]any{"key": key, "resource": "GET /x", "cost": cost})
		if err != nil || !d.Allowed {
			t.Fatalf("check of cost %d on %s: %+v, %v", cost, addr, d, err)
		}
	}
	for range 99 {
		one(live.addr, key, 1)
	}
	r.waitDrained(t)
	// An api process whose batches never reach the worker: the check that
	// crosses 100 is counted in Redis, and its batch dies with the
	// process, as do those of the quiet tenant's 90 units.
	addr, doomed := r.startSilentAPIProcess(t)
	for range 9 {
		one(addr, quietKey, 10)
	}
	one(addr, key, 5) // 99 → 104: crosses 100
	doomed.Kill()     // SIGKILL
	// No check follows: the worker's sweep finds the crossing from the
	// tenant's counter, within a minute.
	since := time.Now()
	testenv.Eventually(t, since, time.Minute, "the crossing reconciled from the counter", func() (bool, string) {
		got, events := crossings(t, r, tenantID, "threshold", quota.EventThresholdCrossed)
		return got[100] == 1 && events == 1, fmt.Sprintf("crossings %v, %d events", got, events)
	})
	t.Logf("crossing recorded %v after the kill", time.Since(since).Round(time.Millisecond))
	var source string
	testenv.Must(t, r.db.QueryRow(context.Background(), `SELECT source FROM quota_crossings WHERE tenant_id = $1`, tenantID).Scan(&source))
	if source != quota.SourceCounter {
		t.Errorf("source %q, want %q", source, quota.SourceCounter)
	}
	// Sweeping again, from this worker and another, records nothing more;
	// the quiet tenant, at 90, crossed nothing.
	for range 2 {
		testenv.Must(t, r.counterStore().Sweep(context.Background()))
	}
	if got, events := crossings(t, r, tenantID, "threshold", quota.EventThresholdCrossed); len(got) != 1 || got[100] != 1 || events != 1 {
		t.Errorf("after more sweeps: crossings %v and %d events, want 100 once", got, events)
	}
	if got, events := crossings(t, r, quietID, "threshold", quota.EventThresholdCrossed); len(got) != 0 || events != 0 {
		t.Errorf("quiet tenant: crossings %v and %d events, want none", got, events)
	}
}

func TestSpendCapBoundsTheStatementAcrossThreeAPIs(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	upTo := int64(50)
	// Graduated overage: 50 units at 3, then 7 each. A cap of 400 pays for
	// 50 × 3 + 35 × 7 = 395: 85 overage units, 185 in all.
	capped := plans.Plan{Name: "capped", BaseFeeMinor: 1000, IncludedUnits: 100, QuotaMode: plans.QuotaOverage,
		Tiers: []plans.PriceTier{{UpTo: &upTo, UnitMinor: 3}, {UnitMinor: 7}}}
	capMinor := int64(400)
	tenantID, key := quotaTenant(t, r, "capped", capped, quota.PlanSettingsInput{SpendCapDefaultMinor: &capMinor})
	apis := r.startFleet(t, 3)
	allowed, denied := r.spend(t, apis.addrs(), key, 1<<40, 3000)
	apis.settle(t)
	if allowed > 185 || allowed < 183 || denied["spend_cap"] == 0 || len(denied) != 1 {
		t.Errorf("allowed %d units (want 183–185: the last checks cost up to 3), denials %v (want spend_cap only)", allowed, denied)
	}
	st, err := billing.NewStore(r.db, nil).Statement(context.Background(), tenantID, usage.MonthOf(time.Now()))
	testenv.Must(t, err)
	if st.Usage.AllowedUnits != allowed || st.TotalMinor > st.BaseFeeMinor+capMinor || st.BaseFeeMinor != 1000 {
		t.Errorf("statement: %d units, base %d, total %d; want %d units and total ≤ 1000 + %d",
			st.Usage.AllowedUnits, st.BaseFeeMinor, st.TotalMinor, allowed, capMinor)
	}
	if _, events := crossings(t, r, tenantID, "spend_cap", quota.EventSpendCapReached); events != 1 {
		t.Errorf("%d %s events, want 1", events, quota.EventSpendCapReached)
	}
}

func TestQuotaCountSurvivesAPlanChange(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	small := plans.Plan{Name: "small", IncludedUnits: 10, QuotaMode: plans.QuotaHard}
	tenantID, key := quotaTenant(t, r, "mover", small, quota.PlanSettingsInput{})
	a := r.startAPI(t)
	client := &http.Client{Timeout: 10 * time.Second}
	for range 6 {
		if d, err := checkReason(client, a.addr, r.token, map[string]any{"key": key, "resource": "GET /x"}); err != nil || !d.Allowed {
			t.Fatalf("check: %+v, %v", d, err)
		}
	}
	bigger, err := plans.NewStore(r.db).Put(context.Background(), plans.Plan{Name: "bigger", IncludedUnits: 8, QuotaMode: plans.QuotaHard})
	testenv.Must(t, err)
	testenv.Must(t, tenants.NewStore(r.db).SetPlan(context.Background(), tenantID, bigger.ID, time.Now()))
	// The month's 6 units count on the new plan: 2 of its 8 are left, 1
	// after the dry run's unit.
	testenv.Eventually(t, time.Now(), 5*time.Second, "the new plan's quota with the month's count", func() (bool, string) {
		var d struct {
			Plan      string `json:"plan"`
			Remaining int64  `json:"remaining"`
		}
		err := postJSON(client, "http://"+a.addr+"/v1/check", r.token, map[string]any{"key": key, "resource": "GET /x", "dry_run": true}, &d)
		return err == nil && d.Plan == "bigger" && d.Remaining == 1, fmt.Sprintf("%+v %v", d, err)
	})
}

// postJSON posts body to url with the service token and decodes a 200's
// answer into out.
func postJSON(client *http.Client, url, token string, body, out any) error {
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", resp.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}
